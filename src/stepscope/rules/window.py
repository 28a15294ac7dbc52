"""One scan window: the slice of a job's data a rule consumes in one call, and its shared aggregates.

A window is ``[start_us, end_us)`` in data time. A system sample belongs to the window holding its
timestamp and an event to the window holding its *end*, so no sample or event is ever seen twice
(SageMaker's windows counted events that straddle a boundary in both). Events are assigned by
their end because that is when they are written: a span is recorded when it completes, so a
data-loader worker's span that lasts the whole job appears in the last file, long after its
start. By its end, every event arrives within a file-close interval of its window.

System records of one snapshot carry timestamps a few microseconds apart (the monitor's threads
wake separately), so records are grouped into *snapshots* per node: a new snapshot starts when the
gap to the node's previous timestamp exceeds 20 ms, and its time is its first record's. The
per-snapshot and per-GPU tables are computed once per window, in SQL, and shared by the rules.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["SNAPSHOT_GAP_US", "ScanWindow", "earliest_event_start", "split_by"]

#: Records of one node closer than this belong to the same snapshot (SageMaker used 20 ms too).
SNAPSHOT_GAP_US = 20_000

#: Windows up to this long (live scans) copy their events into a temporary table once.
_COPY_WINDOW_US = 600_000_000

# One pass over the window's system records: per node, timestamp, metric (and GPU), the count,
# sum, max and min (a few rows per snapshot instead of ~90 records), each with its snapshot: each
# node's timestamps -> the snapshot they belong to (a new one after a gap of more than 20 ms).
_SUMS_SQL = """
CREATE OR REPLACE TEMP TABLE stepscope_metric_sums AS
WITH sums AS (
SELECT node, timestamp_us,
    CASE WHEN dimension IN ('CPUUtilization', 'I/OWaitPercentage', 'GPUUtilization',
                            'GPUMemoryUtilization') THEN dimension
         WHEN type = 'memory' AND name = 'MemoryUsedPercent' THEN 'memory'
         ELSE 'network' END AS metric,
    CASE WHEN type = 'gpu' THEN name ELSE '' END AS gpu,
    count(*) AS n, sum(value) AS total, max(value) AS peak, min(value) AS low
FROM {system}
WHERE (dimension IN ('CPUUtilization', 'I/OWaitPercentage', 'GPUUtilization', 'GPUMemoryUtilization')
         OR (type = 'memory' AND name = 'MemoryUsedPercent')
         OR (type = 'network' AND dimension <> 'Platform'))
GROUP BY ALL
), stamps AS (
    SELECT node, timestamp_us,
           CASE WHEN timestamp_us - lag(timestamp_us) OVER w <= {gap} THEN 0 ELSE 1 END AS fresh
    FROM (SELECT DISTINCT node, timestamp_us FROM sums)
    WINDOW w AS (PARTITION BY node ORDER BY timestamp_us)
), groups AS (
    SELECT node, timestamp_us,
           sum(fresh) OVER (PARTITION BY node ORDER BY timestamp_us ROWS UNBOUNDED PRECEDING) AS gid
    FROM stamps
), snapshots AS (
    SELECT node, timestamp_us, min(timestamp_us) OVER (PARTITION BY node, gid) AS snapshot_us
    FROM groups
)
SELECT * FROM sums JOIN snapshots USING (node, timestamp_us)
"""

_PER_SNAPSHOT_SQL = """
SELECT node, snapshot_us,
    coalesce(sum(n) FILTER (WHERE metric = 'CPUUtilization'), 0) AS cores,
    sum(total) FILTER (WHERE metric = 'CPUUtilization')
        / sum(n) FILTER (WHERE metric = 'CPUUtilization') AS cpu_mean_pct,
    max(peak) FILTER (WHERE metric = 'CPUUtilization') AS cpu_max_pct,
    sum(total) FILTER (WHERE metric = 'I/OWaitPercentage')
        / sum(n) FILTER (WHERE metric = 'I/OWaitPercentage') AS iowait_mean_pct,
    max(peak) FILTER (WHERE metric = 'I/OWaitPercentage') AS iowait_max_pct,
    coalesce(sum(n) FILTER (WHERE metric = 'GPUUtilization'), 0) AS gpus,
    sum(total) FILTER (WHERE metric = 'GPUUtilization')
        / sum(n) FILTER (WHERE metric = 'GPUUtilization') AS gpu_mean_pct,
    min(low) FILTER (WHERE metric = 'GPUUtilization') AS gpu_min_pct,
    sum(total) FILTER (WHERE metric = 'GPUMemoryUtilization')
        / sum(n) FILTER (WHERE metric = 'GPUMemoryUtilization') AS gpu_memory_mean_pct,
    sum(total) FILTER (WHERE metric = 'memory')
        / sum(n) FILTER (WHERE metric = 'memory') AS memory_pct,
    sum(total) FILTER (WHERE metric = 'network') AS network_bytes_per_s
FROM stepscope_metric_sums
GROUP BY node, snapshot_us
ORDER BY node, snapshot_us
"""

_PER_GPU_SQL = """
WITH cpu AS (
    SELECT node, snapshot_us, sum(total) / sum(n) AS cpu_mean_pct
    FROM stepscope_metric_sums
    WHERE metric = 'CPUUtilization'
    GROUP BY node, snapshot_us
), gpu AS (
    SELECT node, gpu, snapshot_us,
        sum(total) FILTER (WHERE metric = 'GPUUtilization')
            / sum(n) FILTER (WHERE metric = 'GPUUtilization') AS util_pct,
        sum(total) FILTER (WHERE metric = 'GPUMemoryUtilization')
            / sum(n) FILTER (WHERE metric = 'GPUMemoryUtilization') AS memory_pct
    FROM stepscope_metric_sums
    WHERE gpu <> ''
    GROUP BY node, gpu, snapshot_us
)
SELECT gpu.node, gpu.gpu, gpu.snapshot_us, gpu.util_pct, gpu.memory_pct, cpu.cpu_mean_pct
FROM gpu LEFT JOIN cpu USING (node, snapshot_us)
ORDER BY gpu.node, gpu.gpu, gpu.snapshot_us
"""


class ScanWindow:
    """The data of ``[start_us, end_us)`` on a DuckDB connection with ``system`` and ``events`` views.

    :param con: a connection with the two views (``JobData.connect()``).
    :param start_us: first microsecond of the window (inclusive).
    :param end_us: end of the window (exclusive).
    :param final: True for the last window of a finished job.
    :param events_from_us: no event of the window starts before this (see
        :func:`earliest_event_start`); None when unknown. It only lets the reads skip older data.
    """

    def __init__(
        self,
        con: Any,
        start_us: int,
        end_us: int,
        *,
        final: bool = False,
        events_from_us: float | None = None,
    ) -> None:
        self.con = con
        self.start_us = int(start_us)
        self.end_us = int(end_us)
        self.final = final
        # An event belongs to the window holding its end; its start can be bounded only from
        # below, by the files that hold such events, and only a filter on the start (a column,
        # unlike the end) lets the Parquet statistics skip row groups.
        self._events_where = (
            f"start_us + dur_us >= {self.start_us} AND start_us + dur_us < {self.end_us} "
            f"AND start_us < {self.end_us}"
        )
        if events_from_us is not None:
            self._events_where += f" AND start_us >= {math.floor(events_from_us)}"
        self._cache: dict[str, dict[str, np.ndarray]] = {}

    def events_sql(self, where: str = "TRUE") -> str:
        """A subquery over the events that end in this window and satisfy ``where``.

        A short window (a live scan) copies its events once into a temporary table, so every
        rule's query reads only those instead of filtering the job's events again; a long window
        (an offline pass) is read in place.
        """
        if self._short() and "events" not in self._cache:
            self.con.execute(
                "CREATE OR REPLACE TEMP TABLE stepscope_window_events AS "
                f"SELECT * FROM events WHERE {self._events_where}"
            )
            self._cache["events"] = {}
        if "events" in self._cache:
            return f"(SELECT * FROM stepscope_window_events WHERE ({where}))"
        return f"(SELECT * FROM events WHERE {self._events_where} AND ({where}))"

    def system_sql(self) -> str:
        """A subquery over the system samples of this window.

        Read in place: the filter is on a column, so the Parquet statistics skip the rest of the
        job, and the snapshot tables below read it once for every rule.
        """
        return (
            f"(SELECT * FROM system WHERE timestamp_us >= {self.start_us} "
            f"AND timestamp_us < {self.end_us})"
        )

    def _short(self) -> bool:
        return self.end_us - self.start_us <= _COPY_WINDOW_US

    def query(self, sql: str) -> dict[str, np.ndarray]:
        """Run ``sql`` (which may use ``{events}`` for this window's events) into numpy columns;
        SQL NULLs become NaN in numeric columns."""
        columns = self.con.execute(sql.format(events=self.events_sql())).fetchnumpy()
        return {name: _plain(values) for name, values in columns.items()}

    def query_row(self, sql: str) -> tuple[Any, ...]:
        """Run ``sql`` (as :meth:`query`) and return its first row (None for NULL)."""
        row = self.con.execute(sql.format(events=self.events_sql())).fetchone()
        return tuple(row) if row is not None else ()

    def snapshots(self) -> dict[str, np.ndarray]:
        """One row per (node, snapshot): core/GPU counts and CPU, I/O-wait, GPU, memory, network."""
        return self._aggregate("snapshots", _PER_SNAPSHOT_SQL)

    def gpu_samples(self) -> dict[str, np.ndarray]:
        """One row per (node, gpu, snapshot), ordered: ``util_pct``, ``memory_pct`` and the node's
        ``cpu_mean_pct`` at that snapshot (NaN where absent)."""
        return self._aggregate("gpus", _PER_GPU_SQL)

    def _aggregate(self, key: str, sql: str) -> dict[str, np.ndarray]:
        if key not in self._cache:
            if "metric-sums" not in self._cache:
                self.con.execute(_SUMS_SQL.format(system=self.system_sql(), gap=SNAPSHOT_GAP_US))
                self._cache["metric-sums"] = {}
            columns = dict(self.con.execute(sql).fetchnumpy())
            self._cache[key] = {name: _plain(values) for name, values in columns.items()}
        return self._cache[key]

    def close(self) -> None:
        """Drop the temporary tables this window created."""
        if "events" in self._cache:
            self.con.execute("DROP TABLE IF EXISTS stepscope_window_events")
        if "metric-sums" in self._cache:
            self.con.execute("DROP TABLE IF EXISTS stepscope_metric_sums")
        self._cache.clear()


def earliest_event_start(
    spans: list[tuple[float, float]] | None, start_us: int, end_us: int
) -> float | None:
    """A lower bound of the start of every event that ends in ``[start_us, end_us)``.

    :param spans: ``(first_us, last_us)`` of every raw file of events (``JobData.time_spans``),
        or None when unknown (then so is the bound). An event ending in the window lies in a
        file with ``last_us >= start_us`` and ``first_us < end_us``, and starts no earlier than
        that file's ``first_us``; with no such file the window holds no event.
    """
    if spans is None:
        return None
    firsts = [first for first, last in spans if last >= start_us and first < end_us]
    return min(firsts) if firsts else float(end_us)


def _plain(values: Any) -> np.ndarray:
    """A numpy column with SQL NULLs as NaN (numbers) instead of a masked array."""
    if isinstance(values, np.ma.MaskedArray):
        if values.dtype.kind in "fiu":
            return np.asarray(np.ma.filled(values.astype(np.float64), np.nan))
        return np.asarray(np.ma.filled(values, ""))
    return np.asarray(values)


def split_by(
    columns: dict[str, np.ndarray], *keys: str
) -> Iterator[tuple[tuple[str, ...], dict[str, np.ndarray]]]:
    """Yield ``(key values, rows)`` for each run of equal ``keys`` in columns sorted by them."""
    if not keys or len(columns[keys[0]]) == 0:
        return
    n = len(columns[keys[0]])
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for key in keys:
        values = columns[key]
        change[1:] |= values[1:] != values[:-1]
    starts = np.flatnonzero(change).tolist() + [n]
    for start, end in zip(starts[:-1], starts[1:], strict=False):
        group = tuple(str(columns[key][start]) for key in keys)
        yield group, {name: values[start:end] for name, values in columns.items()}


def gpu_series(
    window: ScanWindow, column: str
) -> Iterator[tuple[tuple[str, ...], np.ndarray, np.ndarray]]:
    """Yield ``((node, gpu), values, snapshot times)`` of one GPU metric, missing samples dropped.

    A GPU with no sample of ``column`` in the window is skipped.
    """
    for key, rows in split_by(window.gpu_samples(), "node", "gpu"):
        values = rows[column]
        keep = ~np.isnan(values)
        if keep.any():
            yield key, values[keep], rows["snapshot_us"][keep]
