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

from stepscope.rules.steps import step_conditions_of

__all__ = ["SNAPSHOT_GAP_US", "ScanWindow", "earliest_event_start", "split_by"]

#: Records of one node closer than this belong to the same snapshot (SageMaker used 20 ms too).
SNAPSHOT_GAP_US = 20_000

#: Windows up to this long (live scans) copy their events into a temporary table once.
_COPY_WINDOW_US = 600_000_000

#: The metrics of the snapshot tables, as the codes the window's records carry (numbers, not
#: text: NumPy compares them fast).
_CPU, _IOWAIT, _GPU, _GPU_MEMORY, _MEMORY, _NETWORK = range(6)

#: Arrow number types of the window's records -> NumPy types.
_NUMPY_TYPES = {"int8": "i1", "int16": "i2", "int32": "i4", "int64": "i8", "double": "f8"}

# The window's system records the snapshot tables use, with their metric (and GPU): per-core
# CPU and I/O wait, per-GPU utilization and memory, memory used, network traffic. Unsorted:
# NumPy sorts them several times faster than SQL.
_RECORDS_SQL = """
SELECT node, timestamp_us, value,
        CASE dimension WHEN 'CPUUtilization' THEN {cpu} WHEN 'I/OWaitPercentage' THEN {iowait}
                       WHEN 'GPUUtilization' THEN {gpu} WHEN 'GPUMemoryUtilization' THEN {gpu_memory}
             ELSE CASE WHEN type = 'memory' AND name = 'MemoryUsedPercent' THEN {memory}
                       ELSE {network} END END AS metric,
        CASE WHEN type = 'gpu' THEN name ELSE '' END AS gpu
    FROM {system}
    WHERE (dimension IN ('CPUUtilization', 'I/OWaitPercentage', 'GPUUtilization',
                         'GPUMemoryUtilization')
           OR (type = 'memory' AND name = 'MemoryUsedPercent')
           OR (type = 'network' AND dimension <> 'Platform'))
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
        self._step_conditions: dict[str, str] | None = None

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
        """Run ``sql`` into numpy columns; SQL NULLs become NaN in numeric columns.

        ``sql`` may use ``{events}`` for this window's events, and ``{steps}`` and
        ``{repeated_steps}`` for the conditions of :meth:`step_conditions`.
        """
        columns = self.con.execute(self._filled(sql)).fetchnumpy()
        return {name: _plain(values) for name, values in columns.items()}

    def query_row(self, sql: str) -> tuple[Any, ...]:
        """Run ``sql`` (as :meth:`query`) and return its first row (None for NULL)."""
        row = self.con.execute(self._filled(sql)).fetchone()
        return tuple(row) if row is not None else ()

    def _filled(self, sql: str) -> str:
        if "{steps}" in sql or "{repeated_steps}" in sql:
            return sql.format(events=self.events_sql(), **self.step_conditions())
        return sql.format(events=self.events_sql())

    def step_conditions(self) -> dict[str, str]:
        """SQL conditions on an event: ``steps``, it is one of the job's steps, and
        ``repeated_steps``, it is a trace's range of a step that a step event counts already
        (:mod:`stepscope.rules.steps`); decided once per window from its events."""
        if self._step_conditions is None:
            self._step_conditions = step_conditions_of(self.con, self.events_sql())
        return self._step_conditions

    def snapshots(self) -> dict[str, np.ndarray]:
        """One row per (node, snapshot), ordered: core and GPU counts, CPU (mean, max), I/O wait
        (mean, max), GPU utilization (mean, min), GPU memory, memory (means, %) and network
        (bytes/s); NaN where the snapshot has no such sample."""
        self._aggregate()
        return self._cache["snapshots"]

    def gpu_samples(self) -> dict[str, np.ndarray]:
        """One row per (node, gpu, snapshot), ordered: ``util_pct``, ``memory_pct`` and the node's
        ``cpu_mean_pct`` at that snapshot (NaN where absent)."""
        self._aggregate()
        return self._cache["gpus"]

    def _aggregate(self) -> None:
        """Both tables from one read of the window's records, grouped with NumPy."""
        if "snapshots" in self._cache:
            return
        sql = _RECORDS_SQL.format(
            system=self.system_sql(),
            cpu=_CPU,
            iowait=_IOWAIT,
            gpu=_GPU,
            gpu_memory=_GPU_MEMORY,
            memory=_MEMORY,
            network=_NETWORK,
        )
        self.con.complete()  # a rule's query read with fetchone() leaves its result open
        records = _Records(self.con.sql(sql).to_arrow_table())
        self._cache["snapshots"] = records.per_snapshot()
        self._cache["gpus"] = records.per_gpu(self._cache["snapshots"]["cpu_mean_pct"])

    def close(self) -> None:
        """Drop the temporary tables this window created."""
        if "events" in self._cache:
            self.con.execute("DROP TABLE IF EXISTS stepscope_window_events")
        self._cache.clear()


def earliest_event_start(
    spans: list[tuple[str, float, float]] | None, start_us: int, end_us: int
) -> float | None:
    """A lower bound of the start of every event that ends in ``[start_us, end_us)``.

    :param spans: ``(stream, first_us, last_us)`` of every raw file of events
        (``JobData.time_spans``), or None when unknown (then so is the bound). An event ending in the window lies in a
        file with ``last_us >= start_us`` and ``first_us < end_us``, and starts no earlier than
        that file's ``first_us``; with no such file the window holds no event.
    """
    if spans is None:
        return None
    firsts = [first for _, first, last in spans if last >= start_us and first < end_us]
    return min(firsts) if firsts else float(end_us)


def _runs(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For rows sorted by ``keys``: each row's group (a run of equal keys), each group's first row."""
    change = np.zeros(len(keys[0]), dtype=bool)
    change[:1] = True
    for key in keys:
        change[1:] |= key[1:] != key[:-1]
    return np.cumsum(change) - 1, np.flatnonzero(change)


def _numbers(array: Any) -> np.ndarray:
    """An Arrow array of numbers without nulls as a NumPy view of its buffer (Arrow's own
    ``to_numpy`` imports pandas, a second or so the rule engine has no use for)."""
    if array.null_count:
        raise ValueError(f"unexpected nulls in a {array.type} column")
    dtype = np.dtype(_NUMPY_TYPES[str(array.type)])
    offset = array.offset * dtype.itemsize
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array), offset=offset)


def _column(table: Any, name: str) -> np.ndarray:
    return _numbers(table.column(name).combine_chunks())


def _codes(column: Any) -> tuple[np.ndarray, np.ndarray]:
    """A text column as integer codes and the sorted texts they stand for (codes sort as the
    texts do)."""
    import pyarrow.compute as pc  # not at import: `stepscope run` imports the rules early

    encoded = pc.dictionary_encode(column.combine_chunks())
    names = np.array(encoded.dictionary.to_pylist(), dtype=object)
    order = np.argsort(names)
    rank = np.empty(len(names), dtype=np.int64)
    rank[order] = np.arange(len(names))
    return rank[_numbers(encoded.indices)], names[order]


class _Records:
    """The window's system records (``_RECORDS_SQL``) grouped into snapshots.

    Each node's timestamps form snapshots: a new one starts after a gap of more than
    ``SNAPSHOT_GAP_US``, and its time is its first record's.
    """

    def __init__(self, table: Any) -> None:
        node, self.node_names = _codes(table.column("node"))
        gpu, self.gpu_names = _codes(table.column("gpu"))
        timestamp_us = _column(table, "timestamp_us")
        # by node, GPU and time: each GPU's records form one run
        by_gpu = np.lexsort((timestamp_us, gpu, node))
        self.node, self.gpu, self.timestamp_us = node[by_gpu], gpu[by_gpu], timestamp_us[by_gpu]
        self.metric = _column(table, "metric")[by_gpu]
        self.value = _column(table, "value").astype(np.float64)[by_gpu]
        # the records by node and time: runs of records close in time are snapshots
        order = np.lexsort((self.timestamp_us, self.node))
        node, stamp = self.node[order], self.timestamp_us[order]
        fresh = np.ones(len(order), dtype=bool)
        fresh[1:] = (node[1:] != node[:-1]) | (np.diff(stamp) > SNAPSHOT_GAP_US)
        run = np.cumsum(fresh) - 1
        self.first_of_snapshot = order[np.flatnonzero(fresh)]
        self.snapshot = np.empty_like(run)
        self.snapshot[order] = run
        self.snapshot_us = self.timestamp_us[self.first_of_snapshot][self.snapshot]

    def per_snapshot(self) -> dict[str, np.ndarray]:
        groups = len(self.first_of_snapshot)

        def of(code: int, how: str) -> np.ndarray:
            return _reduce(self.snapshot, groups, self.value, self.metric == code, how)

        cpu_n, gpu_n = of(_CPU, "count"), of(_GPU, "count")
        first = self.first_of_snapshot
        return {
            "node": self.node_names[self.node[first]],
            "snapshot_us": self.timestamp_us[first],
            "cores": np.nan_to_num(cpu_n),
            "cpu_mean_pct": of(_CPU, "sum") / cpu_n,
            "cpu_max_pct": of(_CPU, "max"),
            "iowait_mean_pct": of(_IOWAIT, "sum") / of(_IOWAIT, "count"),
            "iowait_max_pct": of(_IOWAIT, "max"),
            "gpus": np.nan_to_num(gpu_n),
            "gpu_mean_pct": of(_GPU, "sum") / gpu_n,
            "gpu_min_pct": of(_GPU, "min"),
            "gpu_memory_mean_pct": of(_GPU_MEMORY, "sum") / of(_GPU_MEMORY, "count"),
            "memory_pct": of(_MEMORY, "sum") / of(_MEMORY, "count"),
            "network_bytes_per_s": of(_NETWORK, "sum"),
        }

    def per_gpu(self, cpu_mean_pct: np.ndarray) -> dict[str, np.ndarray]:
        """Per (node, gpu, snapshot), in that order; ``cpu_mean_pct`` is the per-snapshot one."""
        rows = np.flatnonzero(self.gpu_names[self.gpu] != "")
        group, first = _runs(self.node[rows], self.gpu[rows], self.snapshot_us[rows])
        first_row = rows[first]

        def mean(code: int) -> np.ndarray:
            where = self.metric[rows] == code
            total = _reduce(group, len(first), self.value[rows], where, "sum")
            count = _reduce(group, len(first), self.value[rows], where, "count")
            return np.asarray(total / count)

        return {
            "node": self.node_names[self.node[first_row]],
            "gpu": self.gpu_names[self.gpu[first_row]],
            "snapshot_us": self.snapshot_us[first_row],
            "util_pct": mean(_GPU),
            "memory_pct": mean(_GPU_MEMORY),
            "cpu_mean_pct": cpu_mean_pct[self.snapshot[first_row]],
        }


def _reduce(
    group: np.ndarray, groups: int, values: np.ndarray, where: np.ndarray, how: str
) -> np.ndarray:
    """Per group, the ``how`` (count, sum, max or min) of ``values`` where ``where``; NaN for a
    group without such rows (as SQL's NULL)."""
    rows, picked = group[where], values[where]
    count = np.bincount(rows, minlength=groups).astype(np.float64)
    if how == "count":
        out = count
    elif how == "sum":
        out = np.bincount(rows, weights=picked, minlength=groups).astype(np.float64)
    else:
        out = np.full(groups, -np.inf if how == "max" else np.inf)
        (np.maximum if how == "max" else np.minimum).at(out, rows, picked)
    out[count == 0] = np.nan
    return out


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
    starts = _runs(*(columns[key] for key in keys))[1].tolist() + [len(columns[keys[0]])]
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
