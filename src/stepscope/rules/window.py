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

from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["SNAPSHOT_GAP_US", "ScanWindow", "split_by"]

#: Records of one node closer than this belong to the same snapshot (SageMaker used 20 ms too).
SNAPSHOT_GAP_US = 20_000

_SNAPSHOT_SQL = """
WITH raw AS (
    SELECT * FROM system WHERE timestamp_us >= {start} AND timestamp_us < {end}
), stamps AS (
    SELECT node, timestamp_us,
           CASE WHEN timestamp_us - lag(timestamp_us) OVER w <= {gap} THEN 0 ELSE 1 END AS fresh
    FROM (SELECT DISTINCT node, timestamp_us FROM raw)
    WINDOW w AS (PARTITION BY node ORDER BY timestamp_us)
), groups AS (
    SELECT node, timestamp_us,
           sum(fresh) OVER (PARTITION BY node ORDER BY timestamp_us ROWS UNBOUNDED PRECEDING) AS gid
    FROM stamps
), snap AS (
    SELECT node, timestamp_us, min(timestamp_us) OVER (PARTITION BY node, gid) AS snapshot_us
    FROM groups
)
SELECT raw.node, snap.snapshot_us, raw.type, raw.name, raw.dimension, raw.value
FROM raw JOIN snap USING (node, timestamp_us)
"""

_PER_SNAPSHOT_SQL = """
SELECT node, snapshot_us,
    count(DISTINCT name) FILTER (WHERE dimension = 'CPUUtilization') AS cores,
    avg(value) FILTER (WHERE dimension = 'CPUUtilization') AS cpu_mean_pct,
    max(value) FILTER (WHERE dimension = 'CPUUtilization') AS cpu_max_pct,
    avg(value) FILTER (WHERE dimension = 'I/OWaitPercentage') AS iowait_mean_pct,
    max(value) FILTER (WHERE dimension = 'I/OWaitPercentage') AS iowait_max_pct,
    count(DISTINCT name) FILTER (WHERE dimension = 'GPUUtilization') AS gpus,
    avg(value) FILTER (WHERE dimension = 'GPUUtilization') AS gpu_mean_pct,
    min(value) FILTER (WHERE dimension = 'GPUUtilization') AS gpu_min_pct,
    avg(value) FILTER (WHERE dimension = 'GPUMemoryUtilization') AS gpu_memory_mean_pct,
    avg(value) FILTER (WHERE type = 'memory' AND name = 'MemoryUsedPercent') AS memory_pct,
    sum(value) FILTER (WHERE type = 'network' AND dimension <> 'Platform') AS network_bytes_per_s
FROM samples
GROUP BY node, snapshot_us
ORDER BY node, snapshot_us
"""

_PER_GPU_SQL = """
WITH cpu AS (
    SELECT node, snapshot_us, avg(value) AS cpu_mean_pct
    FROM samples WHERE dimension = 'CPUUtilization' GROUP BY node, snapshot_us
), gpu AS (
    SELECT node, name AS gpu, snapshot_us,
        avg(value) FILTER (WHERE dimension = 'GPUUtilization') AS util_pct,
        avg(value) FILTER (WHERE dimension = 'GPUMemoryUtilization') AS memory_pct
    FROM samples
    WHERE type = 'gpu'
    GROUP BY node, name, snapshot_us
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
    """

    def __init__(self, con: Any, start_us: int, end_us: int, *, final: bool = False) -> None:
        self.con = con
        self.start_us = int(start_us)
        self.end_us = int(end_us)
        self.final = final
        self._cache: dict[str, dict[str, np.ndarray]] = {}

    def events_sql(self, where: str = "TRUE") -> str:
        """A subquery over the events that end in this window and satisfy ``where``."""
        return (
            f"(SELECT * FROM events WHERE start_us + dur_us >= {self.start_us} "
            f"AND start_us + dur_us < {self.end_us} AND ({where}))"
        )

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
            self._materialize_samples()
            columns = dict(self.con.execute(sql).fetchnumpy())
            self._cache[key] = {name: _plain(values) for name, values in columns.items()}
        return self._cache[key]

    def _materialize_samples(self) -> None:
        if "samples" in self._cache:
            return
        self.con.execute(
            "CREATE OR REPLACE TEMP TABLE samples AS "
            + _SNAPSHOT_SQL.format(start=self.start_us, end=self.end_us, gap=SNAPSHOT_GAP_US)
        )
        self._cache["samples"] = {}

    def close(self) -> None:
        """Drop the temporary table this window created."""
        if "samples" in self._cache:
            self.con.execute("DROP TABLE IF EXISTS samples")
        self._cache.clear()


def _plain(values: Any) -> np.ndarray:
    """A numpy column with SQL NULLs as NaN (numbers) instead of a masked array."""
    if isinstance(values, np.ma.MaskedArray):
        if values.dtype.kind in "fiu":
            return values.astype(np.float64).filled(np.nan)
        return values.filled("")
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
