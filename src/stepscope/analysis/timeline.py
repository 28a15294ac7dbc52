"""Timeline windows at the level of detail a zoom needs: the data behind the UI's timeline view.

A job can hold millions of events; a browser can draw a few thousand per frame. A
:class:`TimelineIndex` copies a job's spans and counters once into compact in-memory tables,
sorted by track and time, and answers each window with three scans whatever the zoom: for every
visible track, the individual slices with their nesting depth when they are few enough,
otherwise fixed-width bins (count, busy time, the name that took most of the bin); counters are
averaged into the same bins. Every answer is bounded by ``max_items``. The track tree, a slice's
details, its launch ↔ GPU activity connection and the statistics of an area selection complete
what the view needs.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import duckdb
import orjson

from stepscope._natural import natural_key
from stepscope.analysis.tracks import UNKNOWN_NODE, tracked_events_sql

__all__ = ["TimelineIndex", "TimelineTrack"]

_LAUNCH: tuple[str, ...] = ("cuda_runtime", "cuda_driver")
_GPU_ACTIVITY: tuple[str, ...] = ("kernel", "gpu_memcpy", "gpu_memset")
#: ``gpu`` of a node's counter of all its GPUs (the node's CPU side is -1).
_ALL_GPUS = -2
# A slice's time inside the window [$start, $end): its recorded duration less what lies outside.
# Not least(end) - greatest(start): µs since the epoch resolve only 0.25 µs, so that difference
# was off by as much even for a slice wholly inside (10 % of a 2.4 µs kernel).
_TIME_IN_WINDOW = "dur_us - greatest($start - start_us, 0) - greatest(end_us - $end, 0)"
#: Counters per node; ``gpu`` -1 is the node's CPU side, -2 its GPUs together.
_COUNTERS_SQL = f"""
    WITH s AS (SELECT CASE WHEN node = '' THEN '{UNKNOWN_NODE}' ELSE node END AS node,
                      timestamp_us, name, dimension, value FROM system)
    SELECT node, -1 AS gpu, 'CPU utilization' AS series, timestamp_us, avg(value) AS value
        FROM s WHERE dimension = 'CPUUtilization' GROUP BY ALL
    UNION ALL SELECT node, -1, name || ' utilization', timestamp_us, value
        FROM s WHERE dimension = 'CPUUtilization'
    UNION ALL SELECT node, -1, 'Memory used', timestamp_us, value
        FROM s WHERE name = 'MemoryUsedPercent'
    UNION ALL SELECT node, {_ALL_GPUS}, 'GPU utilization', timestamp_us, avg(value)
        FROM s WHERE dimension = 'GPUUtilization' GROUP BY ALL
    UNION ALL SELECT node, CAST(regexp_extract(name, '[0-9]+$') AS INTEGER), 'utilization',
        timestamp_us, value FROM s WHERE dimension = 'GPUUtilization'
    UNION ALL SELECT node, CAST(regexp_extract(name, '[0-9]+$') AS INTEGER), 'memory',
        timestamp_us, value FROM s WHERE dimension = 'GPUMemoryUtilization'
"""


def _sql_list(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


@dataclass(frozen=True)
class TimelineTrack:
    """One row of the timeline and where it sits in the tree.

    :param id: an opaque, stable id (a hash of what the track is).
    :param path: labels from the root: ``[node, "CPU", "rank 0 · thread 7"]``,
        ``[node, "GPUs", "GPU utilization"]`` (the mean of the node's GPUs) or
        ``[node, "GPUs", "GPU-0", "rank 0 · stream 7"]``.
    :param kind: ``slices`` or ``counter``.
    :param count: how many slices or samples the track holds.
    """

    id: str
    path: tuple[str, ...]
    kind: str
    count: int
    key: tuple[Any, ...] = field(repr=False)  # the columns that select the track's rows
    index: int = field(repr=False, default=-1)  # its number in the index's tables

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "path": list(self.path), "kind": self.kind, "count": self.count}

    def display_order(self) -> tuple[Any, ...]:
        """Node, its CPU before its GPUs, all GPUs then GPU by GPU; counters first in each group."""
        node, group, *rest = self.path
        gpu = (len(rest) > 1, natural_key(rest[0])) if group == "GPUs" else ()
        kind = self.kind != "counter"
        return (natural_key(node), group != "CPU", gpu, kind, natural_key(self.path[-1]))


def _track_id(key: tuple[Any, ...]) -> str:
    return hashlib.sha1(repr(key).encode()).hexdigest()[:12]


def _tree(node: str, gpu: int, label: str) -> tuple[str, ...]:
    if gpu == _ALL_GPUS:
        return (node, "GPUs", label)
    return (node, "CPU", label) if gpu < 0 else (node, "GPUs", f"GPU-{gpu}", label)


class TimelineIndex:
    """A job's timeline in memory, ready for bounded window queries.

    :param con: a connection with the ``events`` and ``system`` views; the index keeps it and
        adds two temporary tables to it, so give it a connection of its own.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        con.execute(f"CREATE OR REPLACE TEMP VIEW tl_source AS {tracked_events_sql()}")
        slice_keys = con.execute(
            "SELECT node, rank, side, gpu, thread, count(*) FROM tl_source GROUP BY ALL"
        ).fetchall()
        counter_keys = con.execute(
            f"SELECT node, gpu, series, count(*) FROM ({_COUNTERS_SQL}) GROUP BY ALL"
        ).fetchall()
        tracks = []
        for node, rank, side, gpu, thread, count in slice_keys:
            key: tuple[Any, ...] = ("slices", node, rank, side, gpu, thread)
            label = f"{f'rank {rank}' if rank >= 0 else 'rank ?'} · {thread}"
            path = _tree(node, gpu if side == "gpu" else -1, label)
            tracks.append(TimelineTrack(_track_id(key), path, "slices", count, key))
        for node, gpu, series, count in counter_keys:
            key = ("counter", node, gpu, series)
            tracks.append(
                TimelineTrack(_track_id(key), _tree(node, gpu, series), "counter", count, key)
            )
        tracks.sort(key=TimelineTrack.display_order)
        self.tracks = [
            TimelineTrack(t.id, t.path, t.kind, t.count, t.key, i) for i, t in enumerate(tracks)
        ]
        self.by_id = {t.id: t for t in self.tracks}
        self._materialize()

    def _materialize(self) -> None:
        con = self.con
        con.execute(
            "CREATE OR REPLACE TEMP TABLE tl_keys (idx INTEGER, kind VARCHAR, node VARCHAR, "
            "rank INTEGER, side VARCHAR, gpu BIGINT, label VARCHAR)"
        )
        rows = []
        for t in self.tracks:
            if t.kind == "slices":
                _, node, rank, side, gpu, thread = t.key
                rows.append([t.index, "slices", node, rank, side, gpu, thread])
            else:
                _, node, gpu, series = t.key
                rows.append([t.index, "counter", node, -1, "", gpu, series])
        if rows:
            con.executemany("INSERT INTO tl_keys VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        # names are interned: bins pick their dominant name by integer, not by string
        con.execute(
            "CREATE OR REPLACE TEMP TABLE tl_names AS "
            "SELECT row_number() OVER (ORDER BY name) - 1 AS name_id, name "
            "FROM (SELECT DISTINCT name FROM tl_source)"
        )
        self.names = [
            row[0] for row in con.execute("SELECT name FROM tl_names ORDER BY name_id").fetchall()
        ]
        con.execute(
            """
            CREATE OR REPLACE TEMP TABLE tl_slices AS
            SELECT k.idx, e.start_us, e.dur_us, e.start_us + e.dur_us AS end_us, n.name_id,
                   e.category, e.rank, e.correlation
            FROM tl_source e
            JOIN tl_keys k
              ON k.kind = 'slices' AND e.node = k.node AND e.rank = k.rank AND e.side = k.side
             AND e.gpu = k.gpu AND e.thread = k.label
            JOIN tl_names n ON e.name = n.name
            ORDER BY k.idx, e.start_us
            """
        )
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE tl_counters AS
            SELECT k.idx, c.timestamp_us AS t, c.value AS v
            FROM ({_COUNTERS_SQL}) c JOIN tl_keys k
              ON k.kind = 'counter' AND c.node = k.node AND c.gpu = k.gpu AND c.series = k.label
            ORDER BY k.idx, c.timestamp_us
            """
        )
        row = con.execute(
            "SELECT least((SELECT min(start_us) FROM tl_slices), "
            "(SELECT CAST(min(t) AS DOUBLE) FROM tl_counters)), "
            "greatest((SELECT max(end_us) FROM tl_slices), "
            "(SELECT CAST(max(t) AS DOUBLE) FROM tl_counters))"
        ).fetchone()
        self.bounds = (float(row[0]), float(row[1])) if row and row[0] is not None else None

    def select(self, ids: list[str]) -> list[TimelineTrack]:
        """The tracks named by ``ids``; ``KeyError`` names the first unknown one."""
        return [self.by_id[i] for i in ids]

    def window(
        self,
        tracks: list[TimelineTrack],
        start_us: float,
        end_us: float,
        *,
        bins: int = 1000,
        max_items: int = 6000,
    ) -> dict[str, Any]:
        """What ``tracks`` hold in ``[start_us, end_us)``: at most ``max_items`` rows in all.

        Each track gets an equal share of ``max_items`` (at least 20, at most ``bins``). A slice
        track answers with ``slices`` (``[start, dur, depth, name, category]`` rows) when its
        window holds no more than its share, else with ``bins`` (``[bin start, count, busy µs,
        dominant name]``, ``bin_us`` wide). Counters answer with averaged ``points`` (``[t,
        value]``). Flows between visible launch and GPU-activity slices come as ``flows``.
        """
        share = max(20, min(bins, max_items // max(1, len(tracks))))
        bin_us = max((end_us - start_us) / share, 1e-3)
        params = {"start": start_us, "end": end_us, "bin": bin_us}
        answer: dict[str, Any] = {"start_us": start_us, "end_us": end_us, "tracks": {}, "flows": []}
        slice_tracks = [t for t in tracks if t.kind == "slices"]
        counter_tracks = [t for t in tracks if t.kind == "counter"]
        if slice_tracks:
            binned = self._binned_slices(slice_tracks, params)
            exact = []
            for t in slice_tracks:
                rows = binned.get(t.index, [])
                if sum(row[1] for row in rows) <= share:
                    exact.append(t)
                else:
                    answer["tracks"][t.id] = {"bins": rows, "bin_us": bin_us}
            if exact:
                self._exact_slices(exact, params, answer)
        if counter_tracks:
            self._counter_points(counter_tracks, params, answer)
        return answer

    @staticmethod
    def _idx_list(tracks: list[TimelineTrack]) -> str:
        return ", ".join(str(t.index) for t in tracks)

    def _binned_slices(
        self, tracks: list[TimelineTrack], params: dict[str, float]
    ) -> dict[int, list[list[Any]]]:
        """One scan: per track and bin, the count, busy time and the longest slice's name."""
        rows = self.con.execute(
            f"""
            SELECT idx, floor((greatest(start_us, $start) - $start) / $bin) AS b, count(*),
                   sum({_TIME_IN_WINDOW}), arg_max(name_id, dur_us)
            FROM tl_slices
            WHERE idx IN ({self._idx_list(tracks)}) AND start_us < $end AND end_us > $start
            GROUP BY ALL ORDER BY idx, b
            """,
            params,
        ).fetchall()
        binned: dict[int, list[list[Any]]] = defaultdict(list)
        start, bin_us = params["start"], params["bin"]
        for index, b, n, busy, top in rows:
            binned[index].append([start + b * bin_us, n, busy, self.names[top]])
        return binned

    def _exact_slices(
        self, tracks: list[TimelineTrack], params: dict[str, float], answer: dict[str, Any]
    ) -> None:
        rows = self.con.execute(
            f"SELECT idx, start_us, dur_us, end_us, name_id, category, rank, correlation "
            f"FROM tl_slices WHERE idx IN ({self._idx_list(tracks)}) "
            f"AND start_us < $end AND end_us > $start ORDER BY idx, start_us, dur_us DESC",
            {"start": params["start"], "end": params["end"]},
        ).fetchall()
        per_track: dict[int, list[Any]] = {t.index: [] for t in tracks}
        for row in rows:
            per_track[row[0]].append(row)
        launches: dict[tuple[int, int], list[Any]] = {}
        activities: list[tuple[tuple[int, int], list[Any]]] = []
        for index, track_rows in per_track.items():
            track_id = self.tracks[index].id
            depths = _depths([r[1] for r in track_rows], [r[3] for r in track_rows])
            answer["tracks"][track_id] = {
                "slices": [
                    [r[1], r[2], d, self.names[r[4]], r[5]]
                    for r, d in zip(track_rows, depths, strict=True)
                ]
            }
            for r in track_rows:
                if r[7] < 0:
                    continue
                if r[5] in _LAUNCH:
                    launches[(r[6], r[7])] = [track_id, r[1]]
                elif r[5] in _GPU_ACTIVITY:
                    activities.append(((r[6], r[7]), [track_id, r[1]]))
        answer["flows"] = [
            {"from": launches[key], "to": end} for key, end in activities if key in launches
        ]

    def _counter_points(
        self, tracks: list[TimelineTrack], params: dict[str, float], answer: dict[str, Any]
    ) -> None:
        # one bin beyond each edge keeps the line continuous where the window cuts it
        rows = self.con.execute(
            f"""
            SELECT idx, min(t), avg(v) FROM tl_counters
            WHERE idx IN ({self._idx_list(tracks)})
              AND t >= $start - $bin AND t < $end + $bin
            GROUP BY idx, floor((t - $start) / $bin) ORDER BY idx, 2
            """,
            params,
        ).fetchall()
        by_index = {t.index: t.id for t in tracks}
        for t in tracks:
            answer["tracks"][t.id] = {"points": []}
        for index, t, v in rows:
            answer["tracks"][by_index[index]]["points"].append([float(t), float(v)])

    def details(self, track: TimelineTrack, start_us: float, name: str) -> dict[str, Any] | None:
        """Everything known of the slice of ``track`` that starts at ``start_us`` named ``name``."""
        _, node, rank, side, gpu, thread = track.key
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
        row = self.con.execute(
            f"SELECT {', '.join(keys)} FROM tl_source WHERE node = ? AND rank = ? AND side = ? "
            "AND gpu = ? AND thread = ? AND name = ? AND abs(start_us - ?) < 0.001 LIMIT 1",
            [node, rank, side, gpu, thread, name, start_us],
        ).fetchone()
        if row is None:
            return None
        details = dict(zip(keys, row, strict=True))
        details["args"] = orjson.loads(details["args"]) if details["args"] else {}
        return details

    def connections(self, details: dict[str, Any]) -> list[dict[str, Any]]:
        """The launch of a GPU activity, or the GPU activities of a launch, with their tracks."""
        if details.get("correlation", -1) < 0:
            return []
        if details["category"] in _LAUNCH:
            other, relation = _GPU_ACTIVITY, "launched"
        elif details["category"] in _GPU_ACTIVITY:
            other, relation = _LAUNCH, "launch"
        else:
            return []
        rows = self.con.execute(
            f"SELECT idx, name, category, start_us, dur_us FROM tl_slices JOIN tl_names USING (name_id) "
            f"WHERE rank = ? AND correlation = ? AND category IN ({_sql_list(other)}) LIMIT 16",
            [details["rank"], details["correlation"]],
        ).fetchall()
        return [
            {
                "relation": relation,
                "track": self.tracks[idx].id,
                "name": name,
                "category": category,
                "start_us": start,
                "dur_us": dur,
            }
            for idx, name, category, start, dur in rows
        ]

    def find(self, text: str, after_us: float) -> dict[str, Any]:
        """The first slice starting after ``after_us`` whose name holds ``text`` (any case),
        else the first of all (the search goes round), and how many slices match.

        :returns: ``{"count": n, "match": {"track", "start_us", "dur_us", "name"} or None}``.
        """
        rows = self.con.execute(
            """
            WITH hits AS (
                SELECT idx, start_us, dur_us, name FROM tl_slices JOIN tl_names USING (name_id)
                WHERE name_id IN (SELECT name_id FROM tl_names WHERE name ILIKE $pattern ESCAPE '\\')
            )
            SELECT (SELECT count(*) FROM hits), * FROM hits
            ORDER BY start_us <= $after, start_us, idx LIMIT 1
            """,
            {"pattern": f"%{_like_escaped(text)}%", "after": after_us},
        ).fetchall()
        if not rows:
            return {"count": 0, "match": None}
        count, idx, start, dur, name = rows[0]
        match = {"track": self.tracks[idx].id, "start_us": start, "dur_us": dur, "name": name}
        return {"count": count, "match": match}

    def statistics(
        self, tracks: list[TimelineTrack], start_us: float, end_us: float, *, top: int = 50
    ) -> list[dict[str, Any]]:
        """Count and time (clipped to the window) per name over the selected slice tracks."""
        chosen = [t for t in tracks if t.kind == "slices"]
        if not chosen:
            return []
        rows = self.con.execute(
            f"""
            SELECT name, category, count(*) AS n,
                   sum({_TIME_IN_WINDOW}) AS total
            FROM tl_slices JOIN tl_names USING (name_id)
            WHERE idx IN ({self._idx_list(chosen)}) AND start_us < $end AND end_us > $start
            GROUP BY ALL ORDER BY total DESC LIMIT {int(top)}
            """,
            {"start": start_us, "end": end_us},
        ).fetchall()
        return [{"name": n, "category": c, "count": k, "total_us": t} for n, c, k, t in rows]


def _like_escaped(text: str) -> str:
    """``text`` matched literally by LIKE (its own % and _ are no wildcards)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _depths(starts: list[float], ends: list[float]) -> list[int]:
    """Nesting depth of each slice (sorted by start, longer first): how many are still open."""
    depths: list[int] = []
    open_ends: list[float] = []
    for start, end in zip(starts, ends, strict=True):
        open_ends = [e for e in open_ends if e > start]
        depths.append(len(open_ends))
        open_ends.append(end)
    return depths
