"""Timeline windows at the level of detail a zoom needs: the data behind the UI's timeline view.

A job can hold millions of events; a browser can draw a few thousand per frame. For each visible
track, :func:`timeline_window` returns the individual slices of the window when they are few
enough (with their nesting depth), and otherwise fixed-width bins (count, busy time, the name that
took most of the bin). Counters are averaged into the same bins. Every answer is bounded by
``max_items`` whatever the zoom. The track tree, the details of one slice, its launch ↔ GPU
activity connection and the statistics of an area selection complete what the view needs.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np
import orjson

from stepscope.analysis.tracks import TRACK_COLUMNS_SQL

__all__ = [
    "TimelineTrack",
    "slice_connections",
    "slice_details",
    "timeline_bounds",
    "timeline_tracks",
    "timeline_window",
    "window_statistics",
]

_LAUNCH = ("cuda_runtime", "cuda_driver")
_GPU_ACTIVITY = ("kernel", "gpu_memcpy", "gpu_memset")
#: Counters shown per node; ``gpu`` -1 is the node's CPU side.
_COUNTER_SQL = """
    SELECT node, -1 AS gpu, 'CPU utilization' AS series, timestamp_us, value
        FROM system WHERE dimension = 'CPUUtilization'
    UNION ALL SELECT node, -1, name || ' utilization', timestamp_us, value
        FROM system WHERE dimension = 'CPUUtilization'
    UNION ALL SELECT node, -1, 'Memory used', timestamp_us, value
        FROM system WHERE name = 'MemoryUsedPercent'
    UNION ALL SELECT node, CAST(regexp_extract(name, '[0-9]+$') AS INTEGER), 'utilization',
        timestamp_us, value FROM system WHERE dimension = 'GPUUtilization'
    UNION ALL SELECT node, CAST(regexp_extract(name, '[0-9]+$') AS INTEGER), 'memory',
        timestamp_us, value FROM system WHERE dimension = 'GPUMemoryUtilization'
"""


def _sql_list(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


@dataclass(frozen=True)
class TimelineTrack:
    """One row of the timeline and where it sits in the tree.

    :param id: an opaque, stable id (a hash of what the track is).
    :param path: labels from the root: ``[node, "CPU", "rank 0 · thread 7"]`` or
        ``[node, "GPUs", "GPU-0", "rank 0 · stream 7"]``.
    :param kind: ``slices`` or ``counter``.
    :param key: the columns that select the track's rows (internal to the server).
    """

    id: str
    path: tuple[str, ...]
    kind: str
    count: int
    key: tuple[Any, ...] = field(repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "path": list(self.path), "kind": self.kind, "count": self.count}


def _track_id(key: tuple[Any, ...]) -> str:
    return hashlib.sha1(repr(key).encode()).hexdigest()[:12]


def timeline_tracks(con: duckdb.DuckDBPyConnection) -> list[TimelineTrack]:
    """Every slice track and counter of the job, in display order (node, CPU before GPUs)."""
    tracks: list[TimelineTrack] = []
    counters = con.execute(
        f"SELECT node, gpu, series, count(*) FROM ({_COUNTER_SQL}) GROUP BY ALL "
        "ORDER BY node, gpu, series"
    ).fetchall()
    slices = con.execute(
        f"SELECT node, rank, side, gpu, thread, count(*) FROM (SELECT {TRACK_COLUMNS_SQL} "
        "FROM events WHERE ph = 'X') GROUP BY ALL ORDER BY node, side, gpu, rank, thread"
    ).fetchall()
    for node, gpu, series, count in counters:
        key = ("counter", node, gpu, series)
        tracks.append(
            TimelineTrack(_track_id(key), _tree(node, gpu, series), "counter", count, key)
        )
    for node, rank, side, gpu, thread, count in slices:
        key = ("slices", node, rank, side, gpu, thread)
        rank_label = f"rank {rank}" if rank >= 0 else "rank ?"
        label = f"{rank_label} · {thread}"
        tracks.append(
            TimelineTrack(
                _track_id(key),
                _tree(node, gpu if side == "gpu" else -1, label),
                "slices",
                count,
                key,
            )
        )
    tracks.sort(key=_display_order)
    return tracks


def _display_order(track: TimelineTrack) -> tuple[Any, ...]:
    """Node, its CPU before its GPUs, GPU by GPU; counters before slice tracks in each group."""
    node, group, *rest = track.path
    gpu = _natural(rest[0]) if group == "GPUs" else ()
    return (_natural(node), group != "CPU", gpu, track.kind != "counter", _natural(track.path[-1]))


def _natural(text: str) -> tuple[Any, ...]:
    """``cpu10`` after ``cpu2``: digits compare as numbers."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def _tree(node: str, gpu: int, label: str) -> tuple[str, ...]:
    return (node, "CPU", label) if gpu < 0 else (node, "GPUs", f"GPU-{gpu}", label)


def timeline_bounds(con: duckdb.DuckDBPyConnection) -> tuple[float, float] | None:
    """The first and last time of anything in the job, µs; ``None`` for an empty job."""
    row = con.execute(
        "SELECT least((SELECT min(start_us) FROM events), "
        "(SELECT CAST(min(timestamp_us) AS DOUBLE) FROM system)), "
        "greatest((SELECT max(start_us + dur_us) FROM events), "
        "(SELECT CAST(max(timestamp_us) AS DOUBLE) FROM system))"
    ).fetchone()
    if row is None or row[0] is None:
        return None
    return float(row[0]), float(row[1])


def _slice_filter(track: TimelineTrack) -> tuple[str, list[Any]]:
    _, node, rank, side, gpu, thread = track.key
    return (
        "node = ? AND rank = ? AND side = ? AND gpu = ? AND thread = ?",
        [node, rank, side, gpu, thread],
    )


def timeline_window(
    con: duckdb.DuckDBPyConnection,
    tracks: list[TimelineTrack],
    start_us: float,
    end_us: float,
    *,
    bins: int = 1000,
    max_items: int = 4000,
) -> dict[str, Any]:
    """What the visible ``tracks`` hold in ``[start_us, end_us)``, bounded by ``max_items``.

    Each slice track answers with ``slices`` (``[start, dur, depth, name, category]`` rows) when
    its window holds at most its share of ``max_items``, else with ``bins`` (``[bin start, count,
    busy µs, dominant name]``). Counters answer with averaged ``points``. Flows between visible
    launch and GPU-activity slices come along as ``flows``.
    """
    bins = max(1, min(bins, max_items))
    share = max(50, max_items // max(1, len(tracks)))
    bin_us = max((end_us - start_us) / bins, 1e-3)
    _ensure_view(con)
    answer: dict[str, Any] = {"start_us": start_us, "end_us": end_us, "tracks": {}, "flows": []}
    visible_corr: dict[str, list[tuple[int, int, float, str]]] = {"launch": [], "gpu": []}
    for track in tracks:
        if track.kind == "counter":
            answer["tracks"][track.id] = {
                "points": _counter_points(con, track, start_us, end_us, bin_us)
            }
            continue
        where, params = _slice_filter(track)
        overlap = "start_us < ? AND start_us + dur_us > ?"
        count = con.execute(
            f"SELECT count(*) FROM timeline_events WHERE {where} AND {overlap}",
            [*params, end_us, start_us],
        ).fetchone()
        if count is not None and count[0] <= share:
            rows = con.execute(
                f"SELECT start_us, dur_us, name, category, rank, correlation FROM timeline_events "
                f"WHERE {where} AND {overlap} ORDER BY start_us, dur_us DESC",
                [*params, end_us, start_us],
            ).fetchall()
            depths = _depths(np.array([r[0] for r in rows]), np.array([r[0] + r[1] for r in rows]))
            answer["tracks"][track.id] = {
                "slices": [
                    [r[0], r[1], int(d), r[2], r[3]] for r, d in zip(rows, depths, strict=True)
                ]
            }
            for r in rows:
                if r[5] >= 0 and r[3] in _LAUNCH:
                    visible_corr["launch"].append((r[4], r[5], r[0], track.id))
                elif r[5] >= 0 and r[3] in _GPU_ACTIVITY:
                    visible_corr["gpu"].append((r[4], r[5], r[0], track.id))
        else:
            answer["tracks"][track.id] = {
                "bins": _slice_bins(con, where, params, start_us, end_us, bin_us)
            }
    launches = {(rank, corr): (ts, tid) for rank, corr, ts, tid in visible_corr["launch"]}
    for rank, corr, ts, tid in visible_corr["gpu"]:
        if (rank, corr) in launches:
            lts, ltid = launches[(rank, corr)]
            answer["flows"].append({"from": [ltid, lts], "to": [tid, ts]})
    return answer


def _ensure_view(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW timeline_events AS "
        f"SELECT *, {TRACK_COLUMNS_SQL} FROM events WHERE ph = 'X'"
    )


def _depths(starts: np.ndarray, ends: np.ndarray) -> list[int]:
    """Nesting depth of each slice (sorted by start, longer first): how many are still open."""
    depths: list[int] = []
    open_ends: list[float] = []
    for start, end in zip(starts, ends, strict=True):
        open_ends = [e for e in open_ends if e > start]
        depths.append(len(open_ends))
        open_ends.append(end)
    return depths


def _slice_bins(
    con: duckdb.DuckDBPyConnection,
    where: str,
    params: list[Any],
    start_us: float,
    end_us: float,
    bin_us: float,
) -> list[list[Any]]:
    rows = con.execute(
        f"""
        SELECT floor((greatest(start_us, ?) - ?) / ?) AS b, count(*) AS n,
               sum(least(start_us + dur_us, ?) - greatest(start_us, ?)) AS busy,
               arg_max(name, dur_us) AS top
        FROM timeline_events
        WHERE {where} AND start_us < ? AND start_us + dur_us > ?
        GROUP BY b ORDER BY b
        """,
        [start_us, start_us, bin_us, end_us, start_us, *params, end_us, start_us],
    ).fetchall()
    return [[start_us + b * bin_us, n, busy, top] for b, n, busy, top in rows]


def _counter_points(
    con: duckdb.DuckDBPyConnection,
    track: TimelineTrack,
    start_us: float,
    end_us: float,
    bin_us: float,
) -> list[list[float]]:
    _, node, gpu, series = track.key
    # one sample before the window keeps the line continuous at its left edge
    rows = con.execute(
        f"""
        WITH c AS (SELECT timestamp_us, value FROM ({_COUNTER_SQL})
                   WHERE node = ? AND gpu = ? AND series = ?)
        SELECT min(timestamp_us), avg(value) FROM c
        WHERE timestamp_us >= ? - ? AND timestamp_us < ? + ?
        GROUP BY floor((timestamp_us - ?) / ?) ORDER BY 1
        """,
        [node, gpu, series, start_us, bin_us, end_us, bin_us, start_us, bin_us],
    ).fetchall()
    return [[float(t), float(v)] for t, v in rows]


def slice_details(
    con: duckdb.DuckDBPyConnection, track: TimelineTrack, start_us: float, name: str
) -> dict[str, Any] | None:
    """Everything known of the slice of ``track`` that starts at ``start_us`` named ``name``."""
    _ensure_view(con)
    where, params = _slice_filter(track)
    row = con.execute(
        f"SELECT name, category, source, start_us, dur_us, pid, tid, step, device, stream, "
        f"correlation, external_id, bytes, args, rank FROM timeline_events "
        f"WHERE {where} AND name = ? AND abs(start_us - ?) < 0.001 LIMIT 1",
        [*params, name, start_us],
    ).fetchone()
    if row is None:
        return None
    keys = [
        "name",
        "category",
        "source",
        "start_us",
        "dur_us",
        "pid",
        "tid",
        "step",
        "device",
        "stream",
        "correlation",
        "external_id",
        "bytes",
        "args",
        "rank",
    ]
    details = dict(zip(keys, row, strict=True))
    details["args"] = orjson.loads(details["args"]) if details["args"] else {}
    return details


def slice_connections(
    con: duckdb.DuckDBPyConnection,
    tracks: list[TimelineTrack],
    details: dict[str, Any],
) -> list[dict[str, Any]]:
    """The launch of a GPU activity, or the GPU activities of a launch, with their tracks."""
    if details.get("correlation", -1) < 0:
        return []
    if details["category"] in _LAUNCH:
        other = _GPU_ACTIVITY
        relation = "launched"
    elif details["category"] in _GPU_ACTIVITY:
        other = _LAUNCH
        relation = "launch"
    else:
        return []
    _ensure_view(con)
    rows = con.execute(
        f"SELECT node, rank, side, gpu, thread, name, category, start_us, dur_us "
        f"FROM timeline_events WHERE rank = ? AND correlation = ? "
        f"AND category IN ({_sql_list(other)}) LIMIT 16",
        [details["rank"], details["correlation"]],
    ).fetchall()
    by_key = {t.key: t.id for t in tracks}
    return [
        {
            "relation": relation,
            "track": by_key.get(("slices", node, rank, side, gpu, thread)),
            "name": name,
            "category": category,
            "start_us": start,
            "dur_us": dur,
        }
        for node, rank, side, gpu, thread, name, category, start, dur in rows
    ]


def window_statistics(
    con: duckdb.DuckDBPyConnection,
    tracks: list[TimelineTrack],
    start_us: float,
    end_us: float,
    *,
    top: int = 50,
) -> list[dict[str, Any]]:
    """Count and total time (clipped to the window) per name over the selected slice tracks."""
    _ensure_view(con)
    keys = [t.key[1:] for t in tracks if t.kind == "slices"]
    if not keys:
        return []
    con.execute(
        "CREATE OR REPLACE TEMP TABLE timeline_selection (node VARCHAR, rank INTEGER, "
        "side VARCHAR, gpu BIGINT, thread VARCHAR)"
    )
    con.executemany(
        "INSERT INTO timeline_selection VALUES (?, ?, ?, ?, ?)", [list(k) for k in keys]
    )
    rows = con.execute(
        f"""
        SELECT e.name, e.category, count(*) AS n,
               sum(least(e.start_us + e.dur_us, ?) - greatest(e.start_us, ?)) AS total
        FROM timeline_events e JOIN timeline_selection s USING (node, rank, side, gpu, thread)
        WHERE e.start_us < ? AND e.start_us + e.dur_us > ?
        GROUP BY ALL ORDER BY total DESC LIMIT {int(top)}
        """,
        [end_us, start_us, end_us, start_us],
    ).fetchall()
    return [{"name": n, "category": c, "count": k, "total_us": t} for n, c, k, t in rows]
