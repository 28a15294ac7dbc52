"""What an exported trace holds, read once from a job for every output format.

Three streams, each bounded by one query at a time so a large job never sits in memory whole:

- :func:`iter_track_slices`: the slices of one track lane at a time, strictly nested
  (see :mod:`stepscope.analysis.tracks`);
- :func:`linked_correlations`: the launch ↔ GPU-activity pairs that become flow arrows;
- :func:`iter_counters`: system metrics (and allocator totals) as counter series.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import duckdb
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.analysis.tracks import UNKNOWN_NODE, Track, assign_lanes, tracked_events_sql
from stepscope.export.window import Window

__all__ = [
    "CounterSeries",
    "LAUNCH_CATEGORIES",
    "SNAPSHOT_US",
    "TrackSlices",
    "flow_ids",
    "iter_counters",
    "iter_track_slices",
    "linked_correlations",
]

#: Host-side calls whose ``correlation`` names the GPU activity they started.
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
#: System records closer than this belong to one snapshot (SageMaker's agent writes them µs apart).
SNAPSHOT_US = 20_000

_GPU_ACTIVITY = ("kernel", "gpu_memcpy", "gpu_memset")


def _sql_list(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


@dataclass
class TrackSlices:
    """The slices of one track lane, sorted by start, nested.

    ``table`` columns: name, category, start_us, end_us (clamped, see
    :func:`~stepscope.analysis.tracks.assign_lanes`), rank, step, correlation, external_id, bytes,
    args (JSON text, ``''`` when none). Writers encode it column-wise, never row by row.
    """

    track: Track
    table: pa.Table

    def __len__(self) -> int:
        rows: int = self.table.num_rows
        return rows

    def column(self, name: str) -> np.ndarray:
        """One column as a NumPy array (numeric columns are copied without conversion)."""
        values: np.ndarray = self.table.column(name).to_numpy()
        return values

    def flow_ids(self, linked: np.ndarray) -> np.ndarray:
        """Per slice, its flow id when its launch ↔ GPU activity pair is linked, else ``-1``.

        :param linked: the sorted flow ids of :func:`linked_correlations`.
        """
        correlation = self.column("correlation")
        ids = flow_ids(self.column("rank"), correlation)
        if len(linked) == 0:
            return np.full(len(ids), -1, dtype=np.int64)
        found = np.minimum(np.searchsorted(linked, ids), len(linked) - 1)
        keep = (correlation >= 0) & (linked[found] == ids)
        return np.where(keep, ids, -1)

    def launches(self) -> np.ndarray:
        """Per slice, whether it is a host-side launch (the source end of a flow)."""
        launch = pc.is_in(self.table.column("category"), pa.array(LAUNCH_CATEGORIES))
        flags: np.ndarray = launch.to_numpy(zero_copy_only=False)
        return flags


@dataclass
class CounterSeries:
    """One counter track: a metric of a node's CPU side or of one of its GPUs."""

    node: str
    gpu: int  # -1 for the CPU side
    name: str
    unit: str
    timestamps_us: np.ndarray
    values: np.ndarray


def flow_ids(rank: npt.ArrayLike, correlation: npt.ArrayLike) -> np.ndarray:
    """Flow ids unique across ranks (correlation ids restart in every process)."""
    ranks = np.asarray(rank, dtype=np.int64)
    correlations = np.asarray(correlation, dtype=np.int64)
    return ((ranks + 1) << 40) | (correlations & 0xFFFFFFFFFF)


def linked_correlations(con: duckdb.DuckDBPyConnection, window: Window) -> np.ndarray:
    """Flow ids of the launches whose GPU activity is in the window too, sorted."""
    rows = con.execute(
        f"""
        SELECT DISTINCT rank, correlation FROM events
        WHERE category IN ({_sql_list(LAUNCH_CATEGORIES)}) AND correlation >= 0 AND ph = 'X'
          AND {window.sql()}
        INTERSECT
        SELECT DISTINCT rank, correlation FROM events
        WHERE category IN ({_sql_list(_GPU_ACTIVITY)}) AND correlation >= 0 AND ph = 'X'
          AND {window.sql()}
        """
    ).fetchnumpy()
    ids = np.sort(flow_ids(rows["rank"], rows["correlation"]))
    return ids[np.append(True, ids[1:] != ids[:-1])] if len(ids) else ids


#: Rows per Arrow batch of the slice stream; a lane is gathered from as many as it spans.
_BATCH_ROWS = 1 << 16


def iter_track_slices(con: duckdb.DuckDBPyConnection, window: Window) -> Iterator[TrackSlices]:
    """Every track of the window, lane by lane, in display order (node, rank, CPU before GPU).

    One sorted query per node and rank streams its tracks' slices in turn (one scan per rank,
    not one per track, and DuckDB sorts one rank at a time); only the current track is held, as
    Arrow columns. ``con`` is busy until the iteration ends: a caller querying meanwhile uses a
    :meth:`~duckdb.DuckDBPyConnection.cursor`.
    """
    con.execute(f"CREATE OR REPLACE TEMP VIEW export_events AS {tracked_events_sql(window.sql())}")
    tracks = con.execute(
        "SELECT DISTINCT node, rank, side, gpu, thread FROM export_events "
        "ORDER BY node, rank, side, gpu, thread"
    ).fetchall()
    for (node, rank), group in itertools.groupby(tracks, key=lambda track: track[:2]):
        yield from _rank_slices([Track(*track) for track in group], con, node, rank)


def _rank_slices(
    tracks: list[Track], con: duckdb.DuckDBPyConnection, node: str, rank: int
) -> Iterator[TrackSlices]:
    """The slices of one node and rank, track after track (``tracks`` in display order)."""
    reader = con.sql(
        """
        WITH t AS (
            SELECT side, gpu, thread,
                   row_number() OVER (ORDER BY side, gpu, thread) - 1 AS track_no
            FROM (SELECT DISTINCT side, gpu, thread FROM export_events
                  WHERE node = $node AND rank = $rank)
        )
        SELECT track_no, name, category, start_us, start_us + dur_us AS end_us, rank, step,
               correlation, external_id, bytes, args
        FROM export_events JOIN t USING (side, gpu, thread)
        WHERE node = $node AND rank = $rank
        ORDER BY track_no, start_us, dur_us DESC, correlation, external_id, name
        """,
        params={"node": node, "rank": rank},
    ).to_arrow_reader(_BATCH_ROWS)
    pending: list[pa.RecordBatch] = []
    current = 0
    for batch in reader:
        if batch.num_rows == 0:
            continue
        numbers = batch.column(0).to_numpy()
        cuts = [0, *(np.flatnonzero(numbers[1:] != numbers[:-1]) + 1).tolist(), len(numbers)]
        for start, stop in zip(cuts[:-1], cuts[1:], strict=True):
            number = int(numbers[start])
            if number != current and pending:
                yield from _split_lanes(tracks[current], _gathered(pending))
                pending = []
            current = number
            pending.append(batch.slice(start, stop - start))
    if pending:
        yield from _split_lanes(tracks[current], _gathered(pending))


def _gathered(batches: list[pa.RecordBatch]) -> pa.Table:
    """One track's rows, without the track number, in contiguous columns."""
    return pa.Table.from_batches(batches).drop_columns(["track_no"]).combine_chunks()


def _split_lanes(track: Track, table: pa.Table) -> Iterator[TrackSlices]:
    lanes, end_us = assign_lanes(
        table.column("start_us").to_numpy(), table.column("end_us").to_numpy()
    )
    table = table.set_column(table.schema.get_field_index("end_us"), "end_us", pa.array(end_us))
    if len(lanes) == 0 or not lanes.any():
        yield TrackSlices(track, table)
        return
    for lane in np.unique(lanes):
        yield TrackSlices(
            Track(track.node, track.rank, track.side, track.gpu, track.thread, int(lane)),
            table.filter(pa.array(lanes == lane)),
        )


def iter_counters(con: duckdb.DuckDBPyConnection, window: Window) -> Iterator[CounterSeries]:
    """System metrics per node as counters, and the PyTorch allocator's totals per GPU.

    A snapshot's records share its first record's time, the time it was taken: snapped to a
    grid instead, the first sample could fall before the export's origin.
    """
    snapshot = f"round(timestamp_us / {SNAPSHOT_US}.0)"
    where = window.sql("timestamp_us", "0")
    query = f"""
        WITH s AS (SELECT node, min(timestamp_us) OVER (PARTITION BY node, {snapshot}) AS t,
                          type, name, dimension, value
                   FROM system WHERE {where})
        SELECT node, -1 AS gpu, 'CPU utilization' AS series, '%' AS unit, t, avg(value) AS v
            FROM s WHERE dimension = 'CPUUtilization' GROUP BY ALL
        UNION ALL SELECT node, -1, name || ' utilization', '%', t, avg(value)
            FROM s WHERE dimension = 'CPUUtilization' GROUP BY ALL
        UNION ALL SELECT node, -1, 'I/O wait', '%', t, avg(value)
            FROM s WHERE dimension = 'I/OWaitPercentage' GROUP BY ALL
        UNION ALL SELECT node, -1, 'Memory used', '%', t, avg(value)
            FROM s WHERE name = 'MemoryUsedPercent' GROUP BY ALL
        UNION ALL SELECT node, -1,
                CASE name WHEN 'ReceiveBytesPerSecond' THEN 'Network receive'
                          WHEN 'TransmitBytesPerSecond' THEN 'Network transmit' ELSE name END,
                'B/s', t, sum(value)
            FROM s WHERE type = 'network' GROUP BY ALL
        UNION ALL SELECT node, -1,
                CASE name WHEN 'ReadThroughputInBytesPerSecond' THEN 'Disk read'
                          WHEN 'WriteThroughputInBytesPerSecond' THEN 'Disk write' ELSE name END,
                CASE name WHEN 'IOPS' THEN 'ops/s' ELSE 'B/s' END, t, avg(value)
            FROM s WHERE type = 'i/o' GROUP BY ALL
        UNION ALL SELECT node, CAST(regexp_extract(name, '[0-9]+$') AS INTEGER), 'utilization',
                '%', t, avg(value)
            FROM s WHERE dimension = 'GPUUtilization' GROUP BY ALL
        UNION ALL SELECT node, CAST(regexp_extract(name, '[0-9]+$') AS INTEGER), 'memory', '%',
                t, avg(value)
            FROM s WHERE dimension = 'GPUMemoryUtilization' GROUP BY ALL
        ORDER BY node, gpu, series, t
    """
    yield from _series(con.sql(query).to_arrow_table())
    yield from _series(_allocator_totals(con, window))


def _allocator_totals(con: duckdb.DuckDBPyConnection, window: Window) -> pa.Table:
    """``[memory]`` instants of PyTorch profiler traces: allocated and reserved bytes per GPU,
    on the node their trace's slices show under (a lone trace names none)."""
    query = f"""
        WITH m AS (
            SELECT CASE WHEN node = '' THEN '{UNKNOWN_NODE}' ELSE node END AS node, rank, device,
                   start_us AS t,
                   TRY_CAST(json_extract_string(args, '$."Total Allocated"') AS DOUBLE) AS allocated,
                   TRY_CAST(json_extract_string(args, '$."Total Reserved"') AS DOUBLE) AS reserved
            FROM events
            WHERE ph = 'i' AND name = '[memory]' AND device >= 0
              AND args LIKE '%Total Allocated%' AND {window.sql()}
        )
        SELECT node, device AS gpu, 'rank ' || rank || ' allocated' AS series, 'bytes' AS unit,
               t, allocated AS v FROM m WHERE allocated IS NOT NULL
        UNION ALL
        SELECT node, device, 'rank ' || rank || ' reserved', 'bytes', t, reserved
            FROM m WHERE reserved IS NOT NULL
        ORDER BY node, gpu, series, t
    """
    return con.sql(query).to_arrow_table()


def _series(table: pa.Table) -> Iterator[CounterSeries]:
    """Cut a table sorted by (node, gpu, series) into one :class:`CounterSeries` per key."""
    if table.num_rows == 0:
        return
    node, gpu, name, unit, t, v = table.columns
    changed = np.zeros(table.num_rows - 1, dtype=bool)
    for key in (node, gpu, name):
        changed |= pc.not_equal(key[1:], key[:-1]).to_numpy(zero_copy_only=False)
    bounds = [0, *(np.flatnonzero(changed) + 1).tolist(), table.num_rows]
    timestamps_us = t.to_numpy().astype(np.float64)
    values = v.to_numpy().astype(np.float64)
    for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
        yield CounterSeries(
            node=str(node[start].as_py()),
            gpu=int(gpu[start].as_py()),
            name=str(name[start].as_py()),
            unit=str(unit[start].as_py()),
            timestamps_us=timestamps_us[start:stop],
            values=values[start:stop],
        )
