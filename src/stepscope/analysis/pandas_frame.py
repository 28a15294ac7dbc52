"""``PandasFrame``: SageMaker's DataFrame access to system and framework metrics.

The column names and meanings are SageMaker's (``smdebug`` 1.0.34 ``PandasFrame``), computed by
DuckDB over the job's columnar store instead of re-parsing JSON files in Python. Where we differ,
on purpose:

* ``use_in_memory_cache`` and ``scan_interval`` are accepted and ignored: the columnar store
  already reads each raw file once, and the database streams its scans, so there is nothing to
  cache and no need to read in time chunks. ``cache_metrics`` is accepted and ignored the same
  way: every call returns exactly its own window.
* Each table also carries absolute times (``timestamp_epoch_us``, ``start_time_epoch_us``,
  ``end_time_epoch_us``, µs since the epoch), since the SageMaker ``*_us`` columns are relative
  to :attr:`PandasFrame.start_time` (the minute of the first system sample, as SageMaker's first
  system file) and the text timestamps are slow to compare.
* Framework tables carry ``rank`` and ``source`` (``pythontimeline``, ``model_timeline``,
  ``kineto`` ...); ``nodeID`` is the host-level node (``algo-1``) in both tables, so system and
  framework rows of a node compare equal (SageMaker's never did).
* No duplicate-dropping pass: the store holds every event once.
* ``get_profiler_data_by_step`` selects in the database instead of loading everything first.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import numbers
import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from stepscope.config.validation import check_int, check_mode, plain_number
from stepscope.errors import ConfigError

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

__all__ = [
    "FRAMEWORK_METRIC_SQL",
    "PandasFrame",
    "connect_source",
    "dimension_sql",
    "first_minute_us",
    "regex_any",
    "text_time_sql",
    "to_epoch_us",
    "warn_if_outside_the_data",
    "window_bound_us",
]

logger = logging.getLogger(__name__)

#: SageMaker's text timestamp format (UTC).
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S:%f"


def _arg(key: str) -> str:
    """An argument of the event's ``args`` JSON as text, NULL when absent.

    Guarded by ``json_valid`` rather than ``try()``: DuckDB's ``try`` costs an exception per
    row and made a 280,000-event table 100x slower.
    """
    return f"CASE WHEN args LIKE '{{%' AND json_valid(args) THEN json_extract_string(args, '$.{key}') END"


def _arg_int(key: str) -> str:
    return f"coalesce(TRY_CAST({_arg(key)} AS BIGINT), -1)"


#: The SageMaker ``framework_metric`` of an event: ``args.layer_name``, else ``args.name``, else
#: the event name. Reused by the statistics so both agree on what a metric is called.
FRAMEWORK_METRIC_SQL = f"coalesce({_arg('layer_name')}, {_arg('name')}, name)"


#: The steps of a range (two parameters: the first and last step) with their mode: the
#: ``Step:ModeKeys.<MODE>`` events, and a trace's ``ProfilerStep#N`` ranges as TRAIN steps on a
#: rank without them (there they repeat steps the Step events count).
_STEP_MARKS_SQL = """
    SELECT node, rank, step, start_us,
           CASE WHEN category LIKE 'Step:ModeKeys.%' THEN substr(category, 15) ELSE 'TRAIN' END
               AS mode
    FROM events
    WHERE ph = 'X' AND step BETWEEN ? AND ?
      AND (category LIKE 'Step:ModeKeys.%'
           OR (name LIKE 'ProfilerStep#%' AND category <> 'gpu_user_annotation'
               AND (node, rank) NOT IN (SELECT DISTINCT node, rank FROM events
                                        WHERE category LIKE 'Step:ModeKeys.%')))
"""
#: An event's mode (see ``get_profiler_data_by_step``): that of the latest step of its number on
#: its rank that began at or before it, else of the first.
_STEP_MODE_SQL = f"""(
    SELECT coalesce(arg_max(mode, start_us) FILTER (WHERE start_us <= events.start_us),
                    arg_min(mode, start_us))
    FROM ({_STEP_MARKS_SQL}) AS marks
    WHERE marks.node = events.node AND marks.rank = events.rank AND marks.step = events.step
)"""


def dimension_sql(name_column: str | None) -> str:
    """What a system sample measures, as the statistics' ``dimension``: its dimension, else its
    name. The ``i/o`` metrics (IOPS, read and write throughput) share an empty dimension and
    differ in unit, so grouped by dimension alone they would be averaged together."""
    if name_column is None:
        return "dimension"
    return f"coalesce(nullif(dimension, ''), {name_column}, '') AS dimension"


def first_minute_us(con: duckdb.DuckDBPyConnection) -> int | None:
    """The minute of the job's first system sample (of its first event without system metrics,
    as in a PyTorch profiler trace): what the relative ``*_us`` columns count from, as SageMaker
    counted from the minute of its first system file."""
    value = con.sql("SELECT min(timestamp_us) FROM system").fetchall()[0][0]
    if value is None:
        value = con.sql("SELECT min(start_us) FROM events").fetchall()[0][0]
    if value is None:
        return None
    return int(value) // 60_000_000 * 60_000_000


def connect_source(source: Any) -> tuple[Any, duckdb.DuckDBPyConnection]:
    """Resolve what the analyses accept into ``(job or None, connection)``.

    :param source: a path (job folder, SageMaker profiler output, trace), a ``JobData`` from
        :func:`stepscope.store.open_job`, a :class:`PandasFrame` (its job and connection), or a
        DuckDB connection that has ``system`` and ``events`` views in the store's schemas.
    """
    import duckdb

    if isinstance(source, duckdb.DuckDBPyConnection):
        return None, source
    if isinstance(source, PandasFrame):
        return source._job, source.connection()
    job = source
    if isinstance(source, (str, os.PathLike)):
        from stepscope.store import open_job

        job = open_job(source)
    job.refresh()
    return job, job.connect()


def to_epoch_us(timestamp: Any, parameter: str = "timestamp") -> int:
    """A SageMaker text timestamp (``%Y-%m-%dT%H:%M:%S:%f``, UTC), a datetime (Python's,
    ``numpy.datetime64`` or ``pandas.Timestamp``, UTC unless it says its zone) or a finite
    number of µs since the epoch, as integer µs since the epoch (a finer time is cut to its µs).

    Every time argument of the analysis API comes through here, so each takes the same kinds.

    :param parameter: the caller's parameter, named in the error.
    :raises ConfigError: ``timestamp`` is none of these, or a missing time (NaN, ``NaT``).
    """
    import numpy as np

    allowed = (
        "µs since the epoch, a datetime (datetime, numpy.datetime64, pandas.Timestamp) or text "
        "like '2023-11-14T22:14:05:000000' (UTC)"
    )
    given = timestamp  # named in the error as the caller gave it
    if isinstance(timestamp, (bool, np.timedelta64)):  # numpy counts a timedelta as an integer
        raise ConfigError(parameter, timestamp, allowed)
    if isinstance(timestamp, (float, numbers.Integral)):  # Integral: numpy's too
        if not math.isfinite(timestamp):  # a missing value (NaN) is no time
            raise ConfigError(parameter, timestamp, allowed)
        return int(timestamp)
    if isinstance(timestamp, str):
        try:
            timestamp = _dt.datetime.strptime(timestamp, TIMESTAMP_FORMAT)
        except ValueError:
            raise ConfigError(parameter, timestamp, allowed) from None
    if hasattr(timestamp, "to_datetime64"):  # pandas' Timestamp (and NaT): its UTC time, in ns
        timestamp = timestamp.to_datetime64()
    if isinstance(timestamp, np.datetime64):
        if np.isnat(timestamp):  # a missing time
            raise ConfigError(parameter, given, allowed)
        return int(timestamp.astype("datetime64[us]").astype(np.int64))
    if isinstance(timestamp, _dt.datetime):
        if timestamp.tzinfo is None:
            timestamp = timestamp.replace(tzinfo=_dt.timezone.utc)
        delta: _dt.timedelta = timestamp - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
        return delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds
    raise ConfigError(parameter, given, allowed)


def window_bound_us(timestamp: Any, parameter: str, *, end: bool) -> float:
    """One bound of an inclusive time window as µs since the epoch, as exact as it was given.

    A number is kept as it is: events start at fractions of a µs, so cutting the
    ``start_time_epoch_us`` of an event to whole µs would leave that event out of a window
    ending there. A text timestamp (or a datetime of any kind) shows a time cut to the µs, so
    it stands for that whole µs: the window reaches half a µs beyond it, and the event it was
    read from is in.

    :param end: whether this is the window's end (else its start).
    :raises ConfigError: ``timestamp`` is not a timestamp (see :func:`to_epoch_us`).
    """
    us = to_epoch_us(timestamp, parameter)
    if isinstance(timestamp, numbers.Real):
        return float(timestamp)
    return us + 0.5 if end else us - 0.5


def _names(selected: Sequence[str] | str) -> list[str]:
    """The names to keep as a list; a string is one name (``list()`` would split it into
    characters). Any iterable works: a Series or an array of names, which cannot be asked
    whether it is empty, comes as it is when picked from a frame."""
    return [selected] if isinstance(selected, str) else list(selected)


def regex_any(con: duckdb.DuckDBPyConnection, patterns: Sequence[str] | str, parameter: str) -> str:
    """One DuckDB regular expression matching any of ``patterns`` (a string is one pattern; none
    matches everything).

    Each pattern is compiled by ``con``'s own engine (RE2), so a typo is reported here, naming
    the parameter, rather than as a DuckDB error out of the query that uses it.

    :raises ConfigError: a pattern is not a regular expression.
    """
    import duckdb

    items = [patterns] if isinstance(patterns, str) else list(patterns)
    for pattern in items:
        try:
            con.execute("SELECT regexp_matches('', ?)", [pattern]).fetchall()
        except duckdb.Error as exc:
            raise ConfigError(
                parameter, pattern, "regular expressions in RE2 syntax", str(exc)
            ) from None
    return "|".join(f"(?:{p})" for p in items) or ".*"


def text_time_sql(column: str) -> str:
    """SQL for µs since the epoch as SageMaker text; every text timestamp is made by it, so a
    fractional µs (Kineto's) rounds the same way everywhere (the cast rounds to nearest)."""
    return f"strftime(make_timestamp(CAST({column} AS BIGINT)), '{TIMESTAMP_FORMAT}')"


def data_span_us(con: duckdb.DuckDBPyConnection) -> tuple[float, float] | None:
    """The first and last instant of the job's data (system samples, events' starts and ends)
    in µs since the epoch; None when it holds none."""
    first, last = con.sql(
        "SELECT min(t), max(t) FROM (SELECT timestamp_us AS t FROM system "
        "UNION ALL SELECT start_us FROM events WHERE ph <> 'C' "
        "UNION ALL SELECT start_us + dur_us FROM events WHERE ph <> 'C')"
    ).fetchall()[0]
    return None if first is None else (first, last)


def warn_if_outside_the_data(
    con: duckdb.DuckDBPyConnection,
    start_timestamp: Any,
    end_timestamp: Any,
    start_us: float,
    end_us: float,
) -> None:
    """Warn when the window lies outside all of the job's data, saying where the data is: bounds
    in seconds, or taken from the relative ``*_us`` columns, select nothing and would otherwise
    read as a quiet window.

    :param start_timestamp: the window's start as the caller gave it (for the message).
    :param end_timestamp: likewise for its end.
    :param start_us: the start in µs since the epoch.
    :param end_us: the end in µs since the epoch.
    """
    span = data_span_us(con)
    if span is None or (start_us <= span[1] and end_us >= span[0]):
        return
    first, last = span
    logger.warning(
        "The window %s .. %s holds none of the job's data (bounds are µs since the epoch, e.g. "
        "the *_epoch_us columns, or text timestamps); its data runs from %.0f to %.0f µs since "
        "the epoch.",
        start_timestamp,
        end_timestamp,
        first,
        last,
    )


class PandasFrame:
    """System and framework metrics of one job as pandas DataFrames (SageMaker's API).

    :param path: a job folder, a SageMaker Debugger profiler output (local or ``s3://``), a
        Kineto trace, a ``JobData``, or a DuckDB connection with ``system`` and ``events`` views.
    :param use_in_memory_cache: accepted for compatibility, ignored (see the module docstring).
    :param scan_interval: accepted for compatibility, ignored.
    """

    def __init__(
        self,
        path: Any,
        use_in_memory_cache: bool = False,
        scan_interval: int = 5_000_000_000,
    ) -> None:
        self.path = path
        self.use_in_memory_cache = use_in_memory_cache
        self.interval = scan_interval
        self._job, self._con = connect_source(path)
        self._start_time = first_minute_us(self.connection())

    @property
    def start_time(self) -> int:
        """µs since the epoch that the SageMaker ``*_us`` columns count from: the minute of the
        first system sample (of the first event when there is none). Fixed by the first data
        seen, so a frame made before a job wrote anything counts from that job's start too
        (0 while there is no data)."""
        if self._start_time is None:
            self._start_time = first_minute_us(self.connection())
        return self._start_time or 0

    # -- access ----------------------------------------------------------------------------------

    def connection(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection (``system`` and ``events`` views), refreshed with new data.

        A job's connection is asked for again after every refresh, also one that added no rows:
        a compaction (by this process or another reading the job) replaces the segments the
        views read, and the replaced ones are deleted a few minutes later.
        """
        if self._job is not None:
            self._job.refresh()
            self._con = self._job.connect()
        return self._con

    def _query(self, sql: str, params: Sequence[Any] = ()) -> pd.DataFrame:
        relation = self.connection().sql(sql, params=list(params) or None)
        frame: pd.DataFrame = relation.to_arrow_table().to_pandas()  # pyarrow is untyped
        return frame

    # -- system ----------------------------------------------------------------------------------

    def _system_sql(self, where: str) -> str:
        return (
            f"SELECT {text_time_sql('timestamp_us')} AS timestamp, "
            f"timestamp_us - {self.start_time} AS timestamp_us, value, name AS system_metric, "
            "dimension, node AS nodeID, type, timestamp_us AS timestamp_epoch_us "
            f"FROM system WHERE {where} "
            "ORDER BY timestamp_epoch_us"
        )

    def get_all_system_metrics(
        self, selected_system_metrics: Sequence[str] | str = ()
    ) -> pd.DataFrame:
        """Every system sample: ``timestamp`` (text), ``timestamp_us`` (relative to
        :attr:`start_time`), ``value``, ``system_metric`` (e.g. ``cpu0``), ``dimension``,
        ``nodeID``, ``type``, ``timestamp_epoch_us``.

        :param selected_system_metrics: metric names to keep (``system_metric``), or one name;
            empty keeps all.
        """
        where, params = self._names_filter("name", selected_system_metrics)
        return self._query(self._system_sql(where), params)

    @staticmethod
    def _names_filter(column: str, selected: Sequence[str] | str) -> tuple[str, list[Any]]:
        names = _names(selected)
        if not names:
            return "TRUE", []
        return f"list_contains(?, {column})", [names]

    # -- framework -------------------------------------------------------------------------------

    def _framework_sql(self, where: str) -> str:
        return (
            f"SELECT {text_time_sql('start_us')} AS start_time, "
            f"{text_time_sql('start_us + dur_us')} AS end_time, "
            f"start_us - {self.start_time} AS start_time_us, "
            f"start_us + dur_us - {self.start_time} AS end_time_us, "
            f"tid, pid, {FRAMEWORK_METRIC_SQL} AS framework_metric, step, "
            "CASE WHEN bytes >= 0 THEN bytes ELSE "
            f"{_arg_int('bytes_fetched')} END AS bytes, "
            "category AS process, node AS nodeID, rank, source, "
            "start_us AS start_time_epoch_us, start_us + dur_us AS end_time_epoch_us "
            f"FROM events WHERE ph <> 'C' AND ({where}) "
            "ORDER BY start_time_epoch_us"
        )

    @staticmethod
    def _exact_filter(selected: Sequence[str] | str) -> tuple[str, list[Any]]:
        names = _names(selected)
        if not names:
            return "TRUE", []
        return "list_contains(?, name) OR list_contains(?, category)", [names, names]

    def get_all_framework_metrics(
        self, selected_framework_metrics: Sequence[str] | str = ()
    ) -> pd.DataFrame:
        """Every framework event: ``start_time``, ``end_time`` (text), ``start_time_us``,
        ``end_time_us`` (relative to :attr:`start_time`), ``tid``, ``pid``, ``framework_metric``,
        ``step`` (-1 when the event has none), ``bytes`` (-1 when none), ``process`` (the phase,
        e.g. ``Step:ModeKeys.TRAIN``), ``nodeID``, ``rank``, ``source``, ``start_time_epoch_us``,
        ``end_time_epoch_us``.

        :param selected_framework_metrics: event names or phases to keep (exact match), or one;
            empty keeps all.
        """
        where, params = self._exact_filter(selected_framework_metrics)
        return self._query(self._framework_sql(where), params)

    def get_profiler_data_by_time(
        self,
        start_time_us: float,
        end_time_us: float,
        cache_metrics: bool = False,
        selected_framework_metrics: Sequence[str] | str = (),
        selected_system_metrics: Sequence[str] | str = (),
        get_framework_metrics: bool = True,
        get_system_metrics: bool = True,
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """System samples taken in, and framework events overlapping, ``[start_time_us,
        end_time_us]`` (µs since the epoch, or text timestamps as in the frames' ``timestamp``
        column or datetimes (``datetime``, ``numpy.datetime64``, ``pandas.Timestamp``), each
        standing for its whole µs). A table not asked for is empty, with its columns.

        :param cache_metrics: accepted for compatibility, ignored.
        :raises ConfigError: a bound is not a timestamp, or the end is before the start.
        """
        lo = window_bound_us(start_time_us, "get_profiler_data_by_time.start_time_us", end=False)
        hi = window_bound_us(end_time_us, "get_profiler_data_by_time.end_time_us", end=True)
        if hi < lo:
            raise ConfigError(
                "get_profiler_data_by_time.end_time_us",
                end_time_us,
                f"a time at or after start_time_us ({start_time_us!r})",
            )
        # a table not asked for has no rows but keeps its columns, as SageMaker's did: code
        # selecting one of them must not fail on it
        if get_system_metrics:
            names, params = self._names_filter("name", selected_system_metrics)
            system = self._query(
                self._system_sql(f"timestamp_us BETWEEN ? AND ? AND {names}"), [lo, hi, *params]
            )
        else:
            system = self._query(self._system_sql("FALSE"))
        if get_framework_metrics:
            names, params = self._exact_filter(selected_framework_metrics)
            framework = self._query(
                self._framework_sql(f"start_us <= ? AND start_us + dur_us >= ? AND ({names})"),
                [hi, lo, *params],
            )
        else:
            framework = self._query(self._framework_sql("FALSE"))
        if system.empty and framework.empty:
            warn_if_outside_the_data(self.connection(), start_time_us, end_time_us, lo, hi)
        return system, framework

    def get_profiler_data_by_step(
        self, start_step: int, end_step: int, cache_metrics: bool = False, mode: Any = None
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Framework events of steps ``start_step``..``end_step`` (inclusive) and the system samples
        taken between the first of them starting and the last ending.

        Each mode numbers its steps from 0, so without ``mode`` the TRAIN and EVAL steps of the
        same number come back together, as SageMaker's did.

        :param cache_metrics: accepted for compatibility, ignored.
        :param mode: only the steps of this mode: ``"TRAIN"``, ``"EVAL"``, ``"PREDICT"`` or
            ``"GLOBAL"`` (any case), or ``smdebug``'s ``ModeKeys`` member. An event takes the mode
            of the latest step of its number on its rank that began before it (the first one when
            none did); a rank without ``Step:ModeKeys`` events has its ``ProfilerStep#N`` ranges
            as TRAIN steps. Events of a step number no step of their rank has are left out.
        :raises ConfigError: a step is not an integer >= 0 (-1 is how events without a step are
            stored, so a negative start would select all of those), the end is before the start,
            or the mode is none of these.
        """
        start_step, end_step = (
            check_int(f"get_profiler_data_by_step.{parameter}", plain_number(step), minimum=0)
            for parameter, step in (("start_step", start_step), ("end_step", end_step))
        )
        if end_step < start_step:
            raise ConfigError(
                "get_profiler_data_by_step.end_step",
                end_step,
                f"an integer >= start_step ({start_step})",
            )
        where = "step BETWEEN ? AND ?"
        params: list[Any] = [start_step, end_step]
        mode_name = None if mode is None else check_mode("get_profiler_data_by_step.mode", mode)
        if mode_name is not None:
            where += f" AND {_STEP_MODE_SQL} = ?"
            params += [start_step, end_step, mode_name]
        framework = self._query(self._framework_sql(where), params)
        if framework.empty:
            self._say_which_steps_there_are(start_step, end_step, mode_name)
            return self._query(self._system_sql("FALSE")), framework
        lo = framework["start_time_epoch_us"].min()
        hi = framework["end_time_epoch_us"].max()
        system = self._query(self._system_sql("timestamp_us BETWEEN ? AND ?"), [lo, hi])
        return system, framework

    def _say_which_steps_there_are(self, start_step: int, end_step: int, mode: str | None) -> None:
        """Warn that a step range selected nothing, naming the steps each mode has: a range
        past the job's steps, or a mode it never ran, would otherwise read as quiet steps."""
        sql = f"SELECT mode, min(step), max(step) FROM ({_STEP_MARKS_SQL}) GROUP BY ALL"
        ranges = self.connection().sql(sql + " ORDER BY mode DESC", params=[0, 2**62]).fetchall()
        logger.warning(
            "No events of steps %d to %d%s; the job's steps: %s.",
            start_step,
            end_step,
            "" if mode is None else f" of mode {mode}",
            ", ".join(f"{m} {lo} to {hi}" for m, lo, hi in ranges) or "none",
        )

    def get_all_dataloader_metrics(
        self, selected_framework_metrics: Sequence[str] | str = ()
    ) -> pd.DataFrame:
        """Data-loader events: ``start_time``, ``end_time``, ``start_time_us``, ``end_time_us``,
        ``duration_us``, ``pid``, ``framework_metric``, ``step``, ``worker_id``, ``num_workers``
        (-1 when absent), ``pin_memory`` (``"True"``, ``"False"`` or ``"NA"``), ``process``,
        ``node_id``, plus ``rank``, ``start_time_epoch_us`` and ``end_time_epoch_us``.

        :param selected_framework_metrics: regular expressions searched in the event name or phase
            (e.g. ``".*DataLoaderIter::GetNext"``); empty keeps every event.
        """
        patterns = _names(selected_framework_metrics)
        if patterns:
            where = "regexp_matches(name, ?) OR regexp_matches(category, ?)"
            pattern = regex_any(
                self.connection(), patterns, "get_all_dataloader_metrics.selected_framework_metrics"
            )
            params: list[Any] = [pattern, pattern]
        else:
            where, params = "TRUE", []
        sql = (
            f"SELECT {text_time_sql('start_us')} AS start_time, "
            f"{text_time_sql('start_us + dur_us')} AS end_time, "
            f"start_us - {self.start_time} AS start_time_us, "
            f"start_us + dur_us - {self.start_time} AS end_time_us, "
            f"dur_us AS duration_us, pid, {FRAMEWORK_METRIC_SQL} AS framework_metric, step, "
            f"{_arg_int('worker_id')} AS worker_id, {_arg_int('num_workers')} AS num_workers, "
            f"CASE lower({_arg('pin_memory')}) "
            "WHEN 'true' THEN 'True' WHEN 'false' THEN 'False' ELSE 'NA' END AS pin_memory, "
            "category AS process, node AS node_id, rank, "
            "start_us AS start_time_epoch_us, start_us + dur_us AS end_time_epoch_us "
            f"FROM events WHERE ph <> 'C' AND ({where}) "
            "ORDER BY start_time_epoch_us"
        )
        return self._query(sql, params)

    # -- correlation -----------------------------------------------------------------------------

    def convert_datetime_to_timestamp(self, timestamp: Any) -> int:
        """A text timestamp (``%Y-%m-%dT%H:%M:%S:%f``, UTC) or a datetime as µs since the epoch
        (see :func:`to_epoch_us`)."""
        return to_epoch_us(timestamp)

    def _sum_overlaps(
        self,
        intervals: Iterable[tuple[int, int]],
        selected: Sequence[str] | str,
        condition: str,
    ) -> pd.DataFrame:
        """Total event duration per (phase, name) over the given intervals (SQL join)."""
        import pyarrow as pa

        starts, ends = zip(*intervals, strict=True) if intervals else ((), ())
        windows = pa.table({"lo": pa.array(starts, pa.int64()), "hi": pa.array(ends, pa.int64())})
        where, params = self._exact_filter(selected)
        con = self.connection()
        con.register("_stepscope_windows", windows)
        try:
            frame: pd.DataFrame = (  # pyarrow is untyped
                con.sql(
                    "SELECT e.category AS process, e.name AS name, sum(e.dur_us) AS total_us "
                    "FROM events e JOIN _stepscope_windows w ON "
                    f"{condition} WHERE e.ph <> 'C' AND ({where}) GROUP BY ALL",
                    params=params or None,
                )
                .to_arrow_table()
                .to_pandas()
            )
            return frame
        finally:
            con.unregister("_stepscope_windows")

    def get_framework_metrics_by_timesteps(
        self,
        timestep_list: Sequence[Any] = (),
        selected_framework_metrics: Sequence[str] | str = (),
    ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
        """Which framework events were running at the given instants (e.g. system timestamps).

        Each event adds its full duration once per instant it spans. Returns three dicts, as
        SageMaker: per phase other than ``Step:*`` (normalised to the largest), per event name
        other than ``Step*`` (µs), and per ``Step:*`` phase (µs). Instants that all lie outside
        the job's data (seconds, or the relative ``timestamp_us`` column) are warned about.

        :param timestep_list: text timestamps, datetimes (``datetime``, ``numpy.datetime64``,
            ``pandas.Timestamp``), or µs since the epoch.
        """
        instants = sorted(to_epoch_us(t, "timestep_list") for t in timestep_list)
        totals = self._sum_overlaps(
            [(t, t) for t in instants],
            selected_framework_metrics,
            "e.start_us < w.lo AND e.start_us + e.dur_us > w.lo",
        )
        if instants and totals.empty:
            first, last = instants[0], instants[-1]
            warn_if_outside_the_data(self.connection(), first, last, first, last)
        framework_metrics: dict[str, float] = {}
        detailed: dict[str, float] = {}
        training_phase: dict[str, float] = {}
        for process, name, total in totals.itertuples(index=False):
            target = training_phase if "Step" in process else framework_metrics
            target[process] = target.get(process, 0.0) + float(total)
            if "Step" not in name:
                detailed[name] = detailed.get(name, 0.0) + float(total)
        return _normalised(framework_metrics), detailed, training_phase

    def get_framework_metrics_by_begin_and_end_timesteps(
        self,
        begin_timestep_list: Sequence[Any],
        end_timestep_list: Sequence[Any],
        selected_framework_metrics: Sequence[str] | str = (),
    ) -> tuple[dict[str, float], dict[str, float]]:
        """Framework time (events not named ``Step*``) spent in the given intervals, per phase and
        per event name, each normalised to its largest value (SageMaker's semantics: an event
        overlapping several intervals counts once per interval).

        :raises ConfigError: the lists differ in length, hold something not a timestamp, or an
            interval ends before it begins.
        """
        begins, ends = list(begin_timestep_list), list(end_timestep_list)
        if len(ends) != len(begins):
            raise ConfigError(
                "get_framework_metrics_by_begin_and_end_timesteps.end_timestep_list",
                ends,
                f"a list of one end per begin ({len(begins)} in begin_timestep_list)",
            )
        intervals = [
            (to_epoch_us(b, "begin_timestep_list"), to_epoch_us(e, "end_timestep_list"))
            for b, e in zip(begins, ends, strict=True)
        ]
        for (lo, hi), begin, end in zip(intervals, begins, ends, strict=True):
            if hi < lo:
                # Swapped lists would read as intervals in which nothing ran.
                raise ConfigError(
                    "get_framework_metrics_by_begin_and_end_timesteps.end_timestep_list",
                    end,
                    f"an end at or after its begin ({begin!r})",
                )
        totals = self._sum_overlaps(
            intervals,
            selected_framework_metrics,
            "e.start_us + e.dur_us >= w.lo AND e.start_us <= w.hi AND e.name NOT LIKE '%Step%'",
        )
        if intervals and totals.empty:
            first, last = min(lo for lo, _ in intervals), max(hi for _, hi in intervals)
            warn_if_outside_the_data(self.connection(), first, last, first, last)
        # pandas types to_dict() keys as Hashable; here they are the grouped text columns.
        per_phase = cast("dict[str, float]", totals.groupby("process")["total_us"].sum().to_dict())
        per_name = cast("dict[str, float]", totals.groupby("name")["total_us"].sum().to_dict())
        return _normalised(per_phase), _normalised(per_name)


def _normalised(values: dict[str, float]) -> dict[str, float]:
    if not values:
        return {}
    top = max(values.values())
    return {k: (v / top if top else 0.0) for k, v in values.items()}
