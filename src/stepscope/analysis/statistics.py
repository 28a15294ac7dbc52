"""Job, step, utilization and device-usage statistics (SageMaker's ``PandasFrameAnalysis``).

One set of SQL queries serves two entry points:

* :class:`PandasFrameAnalysis` takes the two DataFrames of :class:`PandasFrame` (SageMaker's API)
  and runs the queries on them through an in-memory DuckDB connection;
* :func:`job_statistics`, :func:`step_statistics`, :func:`utilization_statistics`,
  :func:`device_usage_statistics` and :func:`training_phase_intervals` take a job (path, ``JobData``
  or DuckDB connection) and run the same queries on the store, without building any frame; the
  report and the UI use these.

Where we differ from SageMaker, on purpose:

* An event without a step that lies outside every step keeps ``step == -1`` (SageMaker raised
  ``IndexError`` on it, e.g. on data-loader worker events); per-step statistics ignore such events.
  A step is one Step event of one phase and one rank: SageMaker merged TRAIN step 3 and EVAL
  step 3 into one interval, though each mode counts its steps from zero, and each rank of a
  distributed job runs its own step 3. Statistics by name or phase time each name within one
  such step: an event belongs to the step of its number on its rank that began last before it.
* Utilization statistics are per resource **and dimension** and node: ``cpu`` CPUUtilization and
  ``cpu`` I/OWaitPercentage are separate rows (SageMaker pooled them), and so are the ``i/o``
  metrics, whose dimension is empty: their ``dimension`` is their name (``IOPS``,
  ``ReadThroughputInBytesPerSecond``, ...). Resources match ``type`` exactly, not by substring.
* ``initialization`` is measured from the job start (first system sample), not from the minute of
  the first system file; the training-loop start falls back to the first TRAIN/GLOBAL step when
  there is no step 0; all job statistics are plain numbers (SageMaker returned a Series for
  ``training_loop_duration``), and absolute ``*_epoch_us`` values are added.
* A rank without Step events (a bare PyTorch profiler trace) has its ``ProfilerStep#N`` ranges as
  ``Step:ModeKeys.TRAIN`` steps, so a trace has step and training-loop statistics.
* A wrong argument raises :class:`~stepscope.errors.ConfigError` instead of logging and returning
  None.
"""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any

from stepscope.analysis.pandas_frame import (
    FRAMEWORK_METRIC_SQL,
    connect_source,
    dimension_sql,
    first_minute_us,
    text_time_sql,
)
from stepscope.errors import ConfigError

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

__all__ = [
    "JobStats",
    "PandasFrameAnalysis",
    "Resource",
    "StatsBy",
    "device_usage_statistics",
    "job_statistics",
    "step_statistics",
    "training_phase_intervals",
    "utilization_statistics",
]

logger = logging.getLogger(__name__)

_STEP_PHASE_PATTERN = "%Step:ModeKeys%"
_LOOP_START_PHASES = ("Step:ModeKeys.TRAIN", "Step:ModeKeys.GLOBAL")
_DEFAULT_RANGES = ((90, 100), (10, 90), (0, 10))

# A PyTorch profiler trace marks its steps with ``ProfilerStep#N`` ranges, not Step events: on a
# rank without Step events they are its TRAIN steps, as the rules and the export count them (on
# a rank with both, the ranges repeat steps its Step events already count). Their GPU mirror
# (``gpu_user_annotation``) is not a step.
_TRACE_STEPS_AS_TRAIN = (
    "step_ranks AS (SELECT DISTINCT node AS step_node, rank AS step_rank FROM fw0 "
    f"WHERE framework_metric LIKE '{_STEP_PHASE_PATTERN}'), "
    "fw AS (SELECT * EXCLUDE (trace_step) REPLACE ("
    "CASE WHEN trace_step THEN 'Step:ModeKeys.TRAIN' ELSE process END AS process, "
    "CASE WHEN trace_step THEN 'Step:ModeKeys.TRAIN' ELSE framework_metric END "
    "AS framework_metric) FROM (SELECT *, framework_metric LIKE 'ProfilerStep#%' "
    "AND process IS DISTINCT FROM 'gpu_user_annotation' AND NOT EXISTS (SELECT 1 FROM step_ranks "
    "WHERE step_node IS NOT DISTINCT FROM node AND step_rank IS NOT DISTINCT FROM rank) "
    "AS trace_step FROM fw0))"
)


class StatsBy(Enum):
    """How step statistics are grouped."""

    #: the ``Step:ModeKeys.*`` events: TRAIN, EVAL, PREDICT, GLOBAL
    TRAINING_PHASE = "training_phase"
    #: the event name (``framework_metric``)
    FRAMEWORK_METRICS = "framework_metric"
    #: the event phase (``process``)
    PROCESS = "process"


class Resource(Enum):
    """A system-metric ``type``."""

    CPU = "cpu"
    GPU = "gpu"
    IO = "i/o"
    NETWORK = "network"
    MEMORY = "memory"


class JobStats(dict):  # type: ignore[type-arg]
    """SageMaker's job statistics: a dict that also allows attribute access (``stats.job_duration``).

    Keys: ``start_time``, ``end_time``, ``training_loop_start``, ``training_loop_end`` (text, UTC)
    and their ``*_epoch_us``; ``job_duration``, ``training_loop_duration``, ``initialization``,
    ``finalization`` (µs); ``initialization_%``, ``training_loop_%``, ``finalization_%``.
    """

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _pct(part: float, whole: float) -> float:
    return part / whole * 100 if whole else math.nan


def _nan(value: Any) -> float:
    return math.nan if value is None else float(value)


def _resources(
    resource: Resource | Sequence[Resource] | None,
    default: Sequence[Resource],
    parameter: str = "resource",
) -> list[str]:
    """The ``type`` values of the chosen resources.

    :param parameter: the caller's parameter, named in the error.
    """
    if resource is None:
        chosen: Sequence[Any] = default
    elif isinstance(resource, (Resource, str)):  # a string is one wrong value, not its letters
        chosen = [resource]
    else:
        chosen = list(resource)
    bad = [r for r in chosen if not isinstance(r, Resource)]
    if bad:
        allowed = ", ".join(f"Resource.{r.name}" for r in Resource)
        raise ConfigError(parameter, bad[0], f"a Resource or a list of them ({allowed})")
    return [r.value for r in chosen]


def _stats_by(by: Any, *, allow_none: bool, allowed: Sequence[StatsBy]) -> StatsBy | None:
    if by is None and allow_none:
        return None
    if isinstance(by, StatsBy) and by in allowed:
        return by
    names = ", ".join(f"StatsBy.{b.name}" for b in allowed)
    raise ConfigError("by", by, f"one of {names}" + (" or None" if allow_none else ""))


class _Statistics:
    """The statistics queries over one framework relation and one system relation.

    :param con: the DuckDB connection to run on.
    :param framework_sql: a query with columns ``process``, ``framework_metric``, ``step``,
        ``s``, ``e`` (start and end, µs since the epoch), ``node`` and ``rank`` (each rank counts
        its own steps, so a step is timed and back-filled within its rank).
    :param system_sql: a query with columns ``t`` (µs since the epoch), ``type``, ``dimension``,
        ``nodeID``, ``value``.
    :param offset_us: what the relative ``*_us`` output columns count from.
    """

    def __init__(
        self, con: duckdb.DuckDBPyConnection, framework_sql: str, system_sql: str, offset_us: int
    ) -> None:
        self.con = con
        self.offset_us = offset_us
        self._with = (
            f"WITH fw0 AS ({framework_sql}), {_TRACE_STEPS_AS_TRAIN}, sysr AS ({system_sql}), "
            "steps AS (SELECT node AS snode, rank AS srank, framework_metric AS sphase, "
            "step AS sstep, min(s) AS ss, "
            f"max(e) AS se FROM fw WHERE framework_metric LIKE '{_STEP_PHASE_PATTERN}' "
            "AND step <> -1 GROUP BY node, rank, framework_metric, step), "
            "filled AS (SELECT fw.* EXCLUDE (step), CASE "
            "WHEN fw.step <> -1 THEN fw.step WHEN st.se > fw.e THEN st.sstep ELSE -1 END AS step "
            "FROM fw ASOF LEFT JOIN steps st "
            "ON fw.node = st.snode AND fw.rank = st.srank AND fw.s > st.ss), "
            # Each mode numbers its steps from 0: an event belongs to the step of its number on
            # its rank that began last at or before it (the first of that number when none did).
            "phased AS (SELECT f.*, coalesce(latest.sphase, first.sphase) AS step_phase "
            "FROM filled f ASOF LEFT JOIN steps latest ON f.node = latest.snode "
            "AND f.rank = latest.srank AND f.step = latest.sstep AND f.s >= latest.ss "
            "LEFT JOIN (SELECT snode, srank, sstep, arg_min(sphase, ss) AS sphase FROM steps "
            "GROUP BY ALL) first ON f.node = first.snode AND f.rank = first.srank "
            "AND f.step = first.sstep) "
        )

    def _df(self, sql: str, params: Sequence[Any] = ()) -> pd.DataFrame:
        relation = self.con.sql(self._with + sql, params=list(params) or None)
        frame: pd.DataFrame = relation.to_arrow_table().to_pandas()  # pyarrow is untyped
        return frame

    def _row(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...]:
        return self.con.sql(self._with + sql, params=list(params) or None).fetchall()[0]

    def _texts(self, *moments_us: float) -> list[str]:
        """Each moment as text, ``""`` when missing (NaN), made by the SQL of the frames' text
        columns so that the job's start reads the same as its first event's."""
        row = self._row(
            "SELECT " + ", ".join(text_time_sql("?") for _ in moments_us),
            [None if math.isnan(us) else us for us in moments_us],
        )
        return [text or "" for text in row]

    # -- job ------------------------------------------------------------------------------------

    def job(self) -> JobStats:
        sys_lo, sys_hi, fw_lo, fw_hi, step0, first_step = self._row(
            "SELECT (SELECT min(t) FROM sysr), (SELECT max(t) FROM sysr), "
            "(SELECT min(s) FROM fw), (SELECT max(e) FROM fw), "
            "(SELECT min(s) FROM fw WHERE list_contains(?, framework_metric) AND step = 0), "
            "(SELECT arg_min(s, step) FROM fw WHERE list_contains(?, framework_metric) "
            "AND step >= 0)",
            [list(_LOOP_START_PHASES), list(_LOOP_START_PHASES)],
        )
        # The job spans all of its data, not its system samples alone (SageMaker's): the frames
        # of a window (get_profiler_data_by_time) hold events that began before its first
        # sample or end after its last, which made initialization or finalization negative.
        start = _nan(min((t for t in (sys_lo, fw_lo) if t is not None), default=None))
        end = _nan(max((t for t in (sys_hi, fw_hi) if t is not None), default=None))
        loop_start = _nan(step0 if step0 is not None else first_step)
        loop_end = _nan(fw_hi)
        if math.isnan(loop_start):
            logger.warning(
                "No Step:ModeKeys.TRAIN or .GLOBAL event found: the training-loop statistics are "
                "missing values."
            )
        duration = end - start
        initialization = loop_start - start
        loop = loop_end - loop_start
        finalization = end - loop_end
        start_text, end_text, loop_start_text, loop_end_text = self._texts(
            start, end, loop_start, loop_end
        )
        stats = JobStats(
            start_time=start_text,
            end_time=end_text,
            job_duration=duration,
            training_loop_start=loop_start_text,
            training_loop_end=loop_end_text,
            training_loop_duration=loop,
            initialization=initialization,
            finalization=finalization,
        )
        stats["initialization_%"] = _pct(initialization, duration)
        stats["training_loop_%"] = _pct(loop, duration)
        stats["finalization_%"] = _pct(finalization, duration)
        stats.update(
            start_time_epoch_us=start,
            end_time_epoch_us=end,
            training_loop_start_epoch_us=loop_start,
            training_loop_end_epoch_us=loop_end,
        )
        return stats

    # -- steps ----------------------------------------------------------------------------------

    def steps(self, by: StatsBy) -> pd.DataFrame:
        if by is StatsBy.TRAINING_PHASE:
            key, where = "framework_metric", f"framework_metric LIKE '{_STEP_PHASE_PATTERN}'"
        else:
            key, where = by.value, "TRUE"
        return self._df(
            f'SELECT {key} AS "{by.value}", avg(d) AS duration_mean_us, '
            "min(d) AS duration_min_us, max(d) AS duration_max_us, "
            "quantile_cont(d, 0.5) AS duration_p50_us, quantile_cont(d, 0.95) AS duration_p95_us, "
            "quantile_cont(d, 0.99) AS duration_p99_us FROM ("
            f"SELECT {key}, node, rank, step_phase, step, max(e) - min(s) AS d FROM phased "
            f"WHERE step <> -1 AND {where} GROUP BY {key}, node, rank, step_phase, step) "
            "GROUP BY 1 ORDER BY 1"
        )

    # -- training phases ------------------------------------------------------------------------

    def phase_intervals(self, phase: str | Sequence[str] | None) -> pd.DataFrame:
        import pandas as pd

        available = [
            row[0]
            for row in self.con.sql(
                self._with + "SELECT DISTINCT process FROM fw ORDER BY 1"
            ).fetchall()
        ]
        if phase is None:
            phases = [p for p in available if "Step:ModeKeys" in p]
        elif isinstance(phase, str):
            phases = [phase]
        elif isinstance(phase, Sequence):
            phases = list(phase)
        else:
            raise ConfigError("phase", phase, "a phase name, a list of them, or None")
        phases = [p for p in phases if p in available]
        columns = [
            "start_time_us",
            "end_time_us",
            "phase",
            "start_time_epoch_us",
            "end_time_epoch_us",
        ]
        if not phases:
            logger.warning(
                "No training phase to split the timeline by (phases with Step events: %s).",
                ", ".join(p for p in available if "Step:ModeKeys" in p) or "none",
            )
            return pd.DataFrame(columns=columns)
        # Runs are cut by the steps of every phase, also those not asked for: EVAL steps
        # before and after a TRAIN epoch are two EVAL intervals, not one spanning the epoch.
        runs = self.con.sql(
            self._with + "SELECT any_value(phase) AS phase, min(s) AS lo, max(e) AS hi FROM ("
            "SELECT phase, s, e, sum(new_run) OVER (ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS run "
            "FROM (SELECT framework_metric AS phase, s, e, CASE WHEN framework_metric IS NOT "
            "DISTINCT FROM lag(framework_metric) OVER (ORDER BY s, e) THEN 0 ELSE 1 END AS new_run "
            f"FROM fw WHERE list_contains(?, framework_metric) "
            f"OR framework_metric LIKE '{_STEP_PHASE_PATTERN}')) "
            "WHERE list_contains(?, phase) GROUP BY run ORDER BY run",
            params=[phases, phases],
        ).fetchall()
        sys_lo, sys_hi = self._row("SELECT min(t), max(t) FROM sysr")
        rows: list[tuple[float, float, str]] = []
        if sys_lo is not None:
            rows.append((sys_lo, runs[0][1] - 1, f"Before {runs[0][0]}"))
        for index, (name, lo, hi) in enumerate(runs):
            if index:
                previous = runs[index - 1]
                between = " and ".join(sorted([previous[0], name]))
                rows.append((previous[2] + 1, lo - 1, f"Between {between}"))
            rows.append((lo, hi, name))
        if sys_hi is not None:
            rows.append((runs[-1][2] + 1, sys_hi, f"After {runs[-1][0]}"))
        rows = [r for r in rows if r[1] >= r[0]]
        return pd.DataFrame(
            [(lo - self.offset_us, hi - self.offset_us, name, lo, hi) for lo, hi, name in rows],
            columns=columns,
        )

    # -- system ---------------------------------------------------------------------------------

    def utilization(
        self, resources: list[str], by: StatsBy | None, phase: str | Sequence[str] | None
    ) -> pd.DataFrame:
        import pyarrow as pa

        aggregates = (
            "avg(value) AS utilization_mean, min(value) AS utilization_min, "
            "max(value) AS utilization_max, quantile_cont(value, 0.5) AS utilization_p50, "
            "quantile_cont(value, 0.95) AS utilization_p95, "
            "quantile_cont(value, 0.99) AS utilization_p99"
        )
        if by is None:
            return self._df(
                f"SELECT type AS Resource, dimension, nodeID, {aggregates} FROM sysr "
                "WHERE list_contains(?, type) GROUP BY ALL ORDER BY ALL",
                [resources],
            )
        intervals = self.phase_intervals(phase)
        table = pa.table(
            {
                "lo": pa.array(intervals["start_time_epoch_us"].tolist(), pa.float64()),
                "hi": pa.array(intervals["end_time_epoch_us"].tolist(), pa.float64()),
                "phase": pa.array(intervals["phase"].tolist(), pa.string()),
                "ord": pa.array(range(len(intervals)), pa.int64()),
            }
        )
        self.con.register("_stepscope_phases", table)
        try:
            return self._df(
                "SELECT type AS Resource, p.phase AS Training_phase, dimension, nodeID, "
                f"{aggregates} FROM sysr JOIN _stepscope_phases p ON sysr.t BETWEEN p.lo AND p.hi "
                "WHERE list_contains(?, type) GROUP BY type, p.ord, p.phase, dimension, nodeID "
                "ORDER BY type, p.ord, dimension, nodeID",
                [resources],
            ).reset_index(drop=True)
        finally:
            self.con.unregister("_stepscope_phases")

    def device_usage(
        self, resources: list[str], ranges: Sequence[tuple[float, float]]
    ) -> pd.DataFrame:
        import pandas as pd

        cases = " ".join(
            f"WHEN value BETWEEN {float(lo)} AND {float(hi)} THEN {index}"
            for index, (lo, hi) in enumerate(ranges)
        )
        counts = self._df(
            f"SELECT type, dimension, nodeID, CASE {cases} END AS bucket, count(*) AS n "
            "FROM sysr WHERE list_contains(?, type) GROUP BY ALL HAVING bucket IS NOT NULL",
            [resources],
        )
        labels = [_range_label(r) for r in ranges]
        if counts.empty:
            return pd.DataFrame(columns=["type", "dimension", "nodeID", *labels])
        wide = counts.pivot_table(
            index=["type", "dimension", "nodeID"],
            columns="bucket",
            values="n",
            aggfunc="sum",
            fill_value=0,
        )
        wide = wide.reindex(columns=range(len(ranges)), fill_value=0).astype("int64")
        wide.columns = labels
        return wide.reset_index()


def _range_label(bounds: tuple[float, float]) -> str:
    return f"{bounds[0]:g}-{bounds[1]:g}"


def _check_ranges(utilization_ranges: Any) -> list[tuple[float, float]]:
    if utilization_ranges is None:
        return list(_DEFAULT_RANGES)
    allowed = (
        "a non-empty list of (low, high) percent pairs with 0 <= low <= high <= 100, "
        "e.g. [(90, 100), (10, 90), (0, 10)]"
    )
    if not isinstance(utilization_ranges, (list, tuple)) or not utilization_ranges:
        raise ConfigError("utilization_ranges", utilization_ranges, allowed)
    if not all(_is_percent_range(r) for r in utilization_ranges):
        raise ConfigError("utilization_ranges", utilization_ranges, allowed)
    return [(r[0], r[1]) for r in utilization_ranges]


def _is_percent_range(bounds: object) -> bool:
    """Whether ``bounds`` is a (low, high) pair of percentages: an inverted pair would count no
    sample without a word. Ranges are inclusive, so ``(50, 50)`` is exactly 50 %."""
    if not isinstance(bounds, (list, tuple)) or len(bounds) != 2:
        return False
    if any(isinstance(b, bool) or not isinstance(b, numbers.Real) for b in bounds):
        return False
    return bool(0 <= bounds[0] <= bounds[1] <= 100)


_SYSTEM_COLUMNS = ("timestamp_us", "value", "dimension", "nodeID", "type")

_FRAMEWORK_COLUMNS = ("start_time_us", "end_time_us", "framework_metric", "step", "process")
_ALL_RESOURCES = list(Resource)
_DEVICES = [Resource.CPU, Resource.GPU]
_STEP_BY = list(StatsBy)


class PandasFrameAnalysis:
    """Statistics over the DataFrames of :class:`~stepscope.analysis.PandasFrame`.

    :param system_df: ``PandasFrame.get_all_system_metrics()`` (or any frame with ``timestamp_us``,
        ``value``, ``dimension``, ``nodeID``, ``type``).
    :param framework_df: ``PandasFrame.get_all_framework_metrics()`` (or any frame with
        ``start_time_us``, ``end_time_us``, ``framework_metric``, ``step``, ``process``; its
        ``nodeID`` and ``rank``, when present, keep the steps of each rank apart).

    The frames are copied; the copies get ``duration_us`` and the back-filled ``step`` as in
    SageMaker (``self.sys_metrics_df``, ``self.framework_metrics_df``).
    """

    def __init__(self, system_df: pd.DataFrame, framework_df: pd.DataFrame) -> None:
        import duckdb

        for parameter, frame, columns in (
            ("system_df", system_df, _SYSTEM_COLUMNS),
            ("framework_df", framework_df, _FRAMEWORK_COLUMNS),
        ):
            missing = [c for c in columns if c not in frame.columns]
            if missing:
                raise ConfigError(
                    f"PandasFrameAnalysis.{parameter}",
                    f"a frame without {', '.join(missing)}",
                    f"a DataFrame with the columns {', '.join(columns)}",
                    "Pass the frames of PandasFrame.get_all_system_metrics() and "
                    "get_all_framework_metrics().",
                )
        self.sys_metrics_df = system_df.copy()
        self.framework_metrics_df = framework_df.copy()
        fw, sm = self.framework_metrics_df, self.sys_metrics_df
        if "start_time_epoch_us" in fw and "start_time_us" in fw and len(fw):
            offset = int(fw["start_time_epoch_us"].iloc[0] - fw["start_time_us"].iloc[0])
        elif "timestamp_epoch_us" in sm and "timestamp_us" in sm and len(sm):
            offset = int(sm["timestamp_epoch_us"].iloc[0] - sm["timestamp_us"].iloc[0])
        else:
            offset = 0
        fw["duration_us"] = fw["end_time_us"] - fw["start_time_us"]
        self._con = duckdb.connect()
        self._con.register("_fw", fw.assign(_row=range(len(fw))))
        self._con.register("_sys", sm)
        t = "timestamp_epoch_us" if "timestamp_epoch_us" in sm else f"timestamp_us + {offset}"
        dimension = dimension_sql("system_metric" if "system_metric" in sm else None)
        node = '"nodeID"' if "nodeID" in fw else "''"
        rank = "rank" if "rank" in fw else "-1"
        self._stats = _Statistics(
            self._con,
            framework_sql=(
                "SELECT process, framework_metric, step, start_time_us + "
                f"{offset} AS s, end_time_us + {offset} AS e, {node} AS node, {rank} AS rank, "
                "_row FROM _fw"
            ),
            system_sql=f"SELECT {t} AS t, type, {dimension}, nodeID, value FROM _sys",
            offset_us=offset,
        )
        if len(fw):
            filled = self._con.sql(self._stats._with + "SELECT step FROM filled ORDER BY _row")
            fw["step"] = filled.to_arrow_table()["step"].to_numpy()

    def get_job_statistics(self) -> JobStats:
        """Start, end and duration of the job and of its training loop; initialization and
        finalization time (µs) and their share of the job (see :class:`JobStats`). The job
        runs from its first system sample or event to its last."""
        return self._stats.job()

    def get_step_statistics(self, by: StatsBy = StatsBy.TRAINING_PHASE) -> pd.DataFrame:
        """Per-step duration statistics: ``duration_{mean,min,max,p50,p95,p99}_us``.

        :param by: ``StatsBy.TRAINING_PHASE`` (the Step events), ``FRAMEWORK_METRICS`` or
            ``PROCESS`` (the span of each name or phase within each step).
        """
        return self._stats.steps(_stats_by(by, allow_none=False, allowed=_STEP_BY))  # type: ignore[arg-type]

    def get_utilization_stats(
        self,
        resource: Resource | Sequence[Resource] | None = None,
        by: StatsBy | None = None,
        phase: str | Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """Mean, min, max, p50, p95 and p99 of ``value`` per resource, dimension and node (a
        metric's name stands for its empty dimension, which the ``i/o`` metrics share).

        :param resource: a :class:`Resource` or a list; None means all five.
        :param by: None, or ``StatsBy.TRAINING_PHASE`` to add a ``Training_phase`` column (each
            sample labelled by :meth:`get_training_phase_intervals`).
        :param phase: the phases for the intervals (see :meth:`get_training_phase_intervals`).
        """
        return self._stats.utilization(
            _resources(resource, _ALL_RESOURCES),
            _stats_by(by, allow_none=True, allowed=[StatsBy.TRAINING_PHASE]),
            phase,
        )

    def get_device_usage_stats(
        self,
        device: Resource | Sequence[Resource] | None = None,
        utilization_ranges: Sequence[tuple[float, float]] | None = None,
    ) -> pd.DataFrame:
        """How many samples fall in each utilization range, per type, dimension and node.

        One column per range, named ``"<low>-<high>"`` (``"90-100"``; SageMaker used tuples,
        which pandas indexing reads as lists).

        :param device: ``Resource.CPU``, ``Resource.GPU`` or a list; None means both.
        :param utilization_ranges: (low, high) pairs, inclusive; a sample counts in the first
            range that holds it. Default ``[(90, 100), (10, 90), (0, 10)]``.
        :raises ConfigError: a range is not two numbers with ``0 <= low <= high <= 100``.
        """
        return self._stats.device_usage(
            _resources(device, _DEVICES, "device"), _check_ranges(utilization_ranges)
        )

    def get_training_phase_intervals(
        self, phase: str | Sequence[str] | None = None
    ) -> pd.DataFrame:
        """Split the timeline into runs of each phase and the gaps around them.

        Consecutive Step events of one phase form one interval, which the steps of any other
        phase end (also of a phase not asked for: EVAL steps on both sides of a TRAIN epoch are
        two EVAL intervals); between two runs comes
        ``"Between A and B"``, before the first ``"Before X"`` (from the first system sample) and
        after the last ``"After X"`` (to the last system sample). Columns ``start_time_us``,
        ``end_time_us`` (relative, as the input frames), ``phase``, ``start_time_epoch_us``,
        ``end_time_epoch_us``.

        :param phase: a phase name (``"Step:ModeKeys.TRAIN"``) or a list; None means every
            ``Step:ModeKeys.*`` phase present.
        """
        return self._stats.phase_intervals(phase)


# -- job-level functions (no DataFrame of raw rows is built) -------------------------------------

_JOB_FRAMEWORK_SQL = (
    f"SELECT category AS process, {FRAMEWORK_METRIC_SQL} AS framework_metric, step, "
    "start_us AS s, start_us + dur_us AS e, node, rank FROM events WHERE ph <> 'C'"
)
_JOB_SYSTEM_SQL = (
    f"SELECT timestamp_us AS t, type, {dimension_sql('name')}, node AS nodeID, value FROM system"
)


def _job(job: Any) -> _Statistics:
    _, con = connect_source(job)
    return _Statistics(con, _JOB_FRAMEWORK_SQL, _JOB_SYSTEM_SQL, first_minute_us(con) or 0)


def job_statistics(job: Any) -> JobStats:
    """:meth:`PandasFrameAnalysis.get_job_statistics` of a job, computed in the store.

    :param job: a path, a ``JobData`` or a DuckDB connection with ``system`` and ``events`` views.
    """
    return _job(job).job()


def step_statistics(job: Any, by: StatsBy = StatsBy.TRAINING_PHASE) -> pd.DataFrame:
    """:meth:`PandasFrameAnalysis.get_step_statistics` of a job (``job`` as in
    :func:`job_statistics`)."""
    return _job(job).steps(_stats_by(by, allow_none=False, allowed=_STEP_BY))  # type: ignore[arg-type]


def utilization_statistics(
    job: Any,
    resource: Resource | Sequence[Resource] | None = None,
    by: StatsBy | None = None,
    phase: str | Sequence[str] | None = None,
) -> pd.DataFrame:
    """:meth:`PandasFrameAnalysis.get_utilization_stats` of a job."""
    return _job(job).utilization(
        _resources(resource, _ALL_RESOURCES),
        _stats_by(by, allow_none=True, allowed=[StatsBy.TRAINING_PHASE]),
        phase,
    )


def device_usage_statistics(
    job: Any,
    device: Resource | Sequence[Resource] | None = None,
    utilization_ranges: Sequence[tuple[float, float]] | None = None,
) -> pd.DataFrame:
    """:meth:`PandasFrameAnalysis.get_device_usage_stats` of a job."""
    return _job(job).device_usage(
        _resources(device, _DEVICES, "device"), _check_ranges(utilization_ranges)
    )


def training_phase_intervals(job: Any, phase: str | Sequence[str] | None = None) -> pd.DataFrame:
    """:meth:`PandasFrameAnalysis.get_training_phase_intervals` of a job (relative columns count
    from the minute of the first system sample, or of the first event without system metrics, as
    :class:`PandasFrame`)."""
    return _job(job).phase_intervals(phase)
