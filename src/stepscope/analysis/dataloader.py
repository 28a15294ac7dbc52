"""``PT_dataloader_analysis``: SageMaker's PyTorch data-loader analysis.

It reads the data-loader events of the model timeline (``DataLoaderIterInitialize``,
``DataLoaderWorker``, ``DataLoaderIter::GetNext``) through a :class:`PandasFrame` and answers the
questions of SageMaker's "Profiling Data Loader" page: which iterators were created and how, how
long workers lived, how long GetNext calls and whole batches took, and which of them are outliers
(at least twice the median).

Every method *returns* its findings (a dataclass holding DataFrames) and logs a readable summary
at INFO level; SageMaker's printed text and returned None or only the outliers. Each result's
``summary()`` gives the same text for a notebook. ``analyze_batchtime`` also gathers the system
and framework metrics during each outlier batch, as the SageMaker page describes, and
``plot_the_window`` writes a chart file instead of needing a notebook widget.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepscope.analysis.pandas_frame import (
    FRAMEWORK_METRIC_SQL,
    PandasFrame,
    dimension_sql,
    regex_any,
    window_bound_us,
)
from stepscope.analysis.window_plot import plot_the_window as _plot_the_window
from stepscope.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "BatchTimeAnalysis",
    "DurationSummary",
    "IteratorInitialization",
    "PT_dataloader_analysis",
]

logger = logging.getLogger(__name__)

GETNEXT_REGEX = ".*DataLoaderIter::GetNext"
INITIALIZE_REGEX = "DataLoaderIterInitialize"
WORKER_REGEX = "DataLoaderWorker"
ITERATOR_TYPES = (
    "_MultiProcessingDataLoaderIter.__init__",
    "_SingleProcessDataLoaderIter.__init__",
)
#: Outlier batches whose system and framework metrics ``analyze_batchtime`` gathers, longest first.
MAX_CORRELATED_OUTLIERS = 100
#: The columns of :class:`BatchTimeAnalysis`' tables, which they have also when empty (a window
#: without outliers): code selecting a column must not fail on a healthy job.
OUTLIER_COLUMNS = (
    "outlier",
    "previous_batch_start",
    "start_time",
    "BatchTime_in_seconds",
    "worker_id",
    "node_id",
    "rank",
    "previous_batch_start_epoch_us",
    "start_time_epoch_us",
)
SYSTEM_COLUMNS = ("outlier", "nodeID", "type", "dimension", "mean", "max", "samples")
FRAMEWORK_COLUMNS = ("outlier", "process", "framework_metric", "count", "total_us")


def _empty_frame(columns: Sequence[str] = ()) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(columns=list(columns))


@dataclass
class DurationSummary:
    """Count and durations of one kind of data-loader event, and its outliers (>= 2x median).

    :ivar what: what was measured, in words.
    :ivar events: every event of that kind (the data-loader table of :class:`PandasFrame`).
    :ivar outliers: events lasting at least twice the median, longest first.
    """

    what: str
    count: int = 0
    median_duration_us: float = float("nan")
    max_duration_us: float = float("nan")
    events: pd.DataFrame = field(default_factory=_empty_frame)
    outliers: pd.DataFrame = field(default_factory=_empty_frame)

    @property
    def empty(self) -> bool:
        """True when no such event was recorded."""
        return self.count == 0

    def summary(self) -> str:
        """The findings as a few readable lines."""
        if self.empty:
            return f"No {self.what} events were recorded."
        lines = [
            f"{self.what}: {self.count} events, median {self.median_duration_us:.0f} us, "
            f"max {self.max_duration_us:.0f} us.",
        ]
        if len(self.outliers):
            lines.append(f"{len(self.outliers)} outliers (duration >= 2 x median):")
            lines.append(self.outliers.head(20).to_string(index=False))
        else:
            lines.append("No outliers (duration >= 2 x median).")
        return "\n".join(lines)


@dataclass
class IteratorInitialization(DurationSummary):
    """A :class:`DurationSummary` of one iterator type's initializations, with its settings.

    :ivar pin_memory: the first initialization's ``pin_memory`` (``"True"``, ``"False"``, ``"NA"``).
    :ivar num_workers: the first initialization's ``num_workers``.
    :ivar settings: every distinct (``num_workers``, ``pin_memory``) with its ``count``, most
        frequent first: a training and an evaluation loader often differ.
    """

    pin_memory: str = "NA"
    num_workers: int = -1
    settings: pd.DataFrame = field(default_factory=_empty_frame)

    def summary(self) -> str:
        if len(self.settings) > 1:
            uses = ", ".join(
                f"{count} with pin_memory={pin_memory} and num_workers={workers}"
                for workers, pin_memory, count in self.settings.itertuples(index=False)
            )
            head = f"Training uses {self.what}, initialized {self.count} times: {uses}."
        else:
            head = (
                f"Training uses {self.what} with pin_memory={self.pin_memory} and "
                f"num_workers={self.num_workers}; it was initialized {self.count} times."
            )
        return head + "\n" + super().summary()


@dataclass
class BatchTimeAnalysis:
    """Time between consecutive GetNext calls (one batch of training work) and its outliers.

    :ivar batches: the GetNext calls of the window with ``BatchTime_in_seconds`` (start to next
        start, per node, rank and process) and ``previous_batch_start``.
    :ivar outliers: batches of at least twice the median time, longest first, with ``outlier``
        (their number), ``previous_batch_start``, ``start_time``, ``BatchTime_in_seconds``,
        ``worker_id``, ``node_id``, ``rank`` and the same bounds in µs since the epoch.
    :ivar system_metrics: per outlier (longest :data:`MAX_CORRELATED_OUTLIERS`), type and
        dimension (the name of an ``i/o`` metric, whose dimension is empty): ``mean``, ``max``
        and ``samples`` of the system metrics of the outlier's node during the batch.
    :ivar framework_metrics: per outlier, phase and event name: ``count`` and ``total_us`` of the
        framework events of the outlier's node and rank overlapping the batch (another rank was
        busy with its own batches).
    """

    batches: pd.DataFrame = field(default_factory=_empty_frame)
    median_batch_time_s: float = float("nan")
    outliers: pd.DataFrame = field(default_factory=lambda: _empty_frame(OUTLIER_COLUMNS))
    system_metrics: pd.DataFrame = field(default_factory=lambda: _empty_frame(SYSTEM_COLUMNS))
    framework_metrics: pd.DataFrame = field(default_factory=lambda: _empty_frame(FRAMEWORK_COLUMNS))

    @property
    def empty(self) -> bool:
        """True when fewer than two GetNext calls fell in the window."""
        return len(self.batches) == 0 or bool(self.batches["BatchTime_in_seconds"].isna().all())

    def summary(self) -> str:
        """The findings as a few readable lines."""
        if self.empty:
            return "Fewer than two DataLoaderIter::GetNext calls in the window: no batch times."
        lines = [
            f"Median time spent on each batch of data: {self.median_batch_time_s:.6f} s "
            f"({self.batches['BatchTime_in_seconds'].notna().sum()} batches)."
        ]
        if len(self.outliers):
            lines.append(f"{len(self.outliers)} outlier batches (time >= 2 x median):")
            shown = ["previous_batch_start", "start_time", "BatchTime_in_seconds", "worker_id"]
            lines.append(self.outliers[shown].head(20).to_string(index=False))
        else:
            lines.append("No outlier batches.")
        return "\n".join(lines)


def _summarise(events: pd.DataFrame, what: str, columns: Sequence[str]) -> DurationSummary:
    if events.empty:
        return DurationSummary(what, events=events, outliers=_empty_frame(columns))
    median = float(events["duration_us"].median())
    outliers = (
        events.loc[events["duration_us"] >= 2 * median, list(columns)]
        .sort_values("duration_us", ascending=False, kind="stable")
        .reset_index(drop=True)
    )
    return DurationSummary(
        what,
        count=len(events),
        median_duration_us=median,
        max_duration_us=float(events["duration_us"].max()),
        events=events,
        outliers=outliers,
    )


def _say_where_the_calls_are(calls: pd.DataFrame, start: Any, end: Any) -> None:
    """Warn that a window missed every GetNext call, saying where they are: bounds in seconds,
    or taken from the relative ``*_us`` columns, select nothing and would otherwise pass
    silently."""
    first, last = calls.iloc[0], calls.iloc[-1]
    logger.warning(
        "No DataLoaderIter::GetNext call starts in the window %s .. %s (bounds are µs since "
        "the epoch, e.g. the start_time_epoch_us column, or text timestamps); the job's %d "
        "calls start from %s (%.0f) to %s (%.0f).",
        "the first call" if start is None else start,
        "the last call" if end is None else end,
        len(calls),
        first["start_time"],
        first["start_time_epoch_us"],
        last["start_time"],
        last["start_time_epoch_us"],
    )


class PT_dataloader_analysis:
    """SageMaker's PyTorch data-loader analysis over a :class:`PandasFrame`.

    :param pandas_frame: the job's :class:`PandasFrame` (a path is accepted too).
    """

    def __init__(self, pandas_frame: PandasFrame | Any) -> None:
        if not isinstance(pandas_frame, PandasFrame):
            pandas_frame = PandasFrame(pandas_frame)
        self.pd_data_frame = pandas_frame
        self.dataIter_metric = pandas_frame.get_all_dataloader_metrics([GETNEXT_REGEX])
        self.initialize_metric = pandas_frame.get_all_dataloader_metrics([INITIALIZE_REGEX])
        self.dataWorker_metric = pandas_frame.get_all_dataloader_metrics([WORKER_REGEX])

    def analyze_dataloaderIter_initialization(self) -> dict[str, IteratorInitialization]:
        """Per iterator type initialized: its settings, how often, how long, the outliers."""
        found: dict[str, IteratorInitialization] = {}
        metric = self.initialize_metric
        for itertype in ITERATOR_TYPES:
            events = metric.loc[metric["framework_metric"] == itertype] if len(metric) else metric
            if events.empty:
                continue
            base = _summarise(events, itertype, ["start_time", "end_time", "duration_us"])
            settings = (
                events.groupby(["num_workers", "pin_memory"], sort=False)
                .size()
                .rename("count")
                .reset_index()
                .sort_values("count", ascending=False, kind="stable")
                .reset_index(drop=True)
            )
            found[itertype] = IteratorInitialization(
                **base.__dict__,
                pin_memory=str(events["pin_memory"].iloc[0]),
                num_workers=int(events["num_workers"].iloc[0]),
                settings=settings,
            )
            logger.info("%s", found[itertype].summary())
        if not found:
            logger.info("No DataLoaderIter initialization events were recorded.")
        return found

    def analyze_dataloaderWorkers(self) -> DurationSummary:
        """How many worker processes were started, how long they lived, and the outliers."""
        result = _summarise(
            self.dataWorker_metric,
            "DataLoaderWorker",
            ["start_time", "end_time", "duration_us", "worker_id"],
        )
        logger.info("%s", result.summary())
        return result

    def analyze_dataloader_getnext(self) -> DurationSummary:
        """How many GetNext calls were made, how long they took, and the outliers."""
        result = _summarise(
            self.dataIter_metric,
            "DataLoaderIter::GetNext",
            ["start_time", "end_time", "duration_us", "worker_id"],
        )
        logger.info("%s", result.summary())
        return result

    def analyze_batchtime(
        self,
        start_timestamp: Any = None,
        end_timestamp: Any = None,
        select_events: Sequence[str] | str = (".*",),
        select_dimensions: Sequence[str] | str = (".*",),
    ) -> BatchTimeAnalysis:
        """Time per batch (start of one GetNext to the start of the next, per node, rank and
        process), its outliers (>= 2x median), and what the system and the framework of that node
        and rank did during them.

        :param start_timestamp: window start: µs since the epoch, or a SageMaker text timestamp
            or a datetime (``datetime``, ``numpy.datetime64``, ``pandas.Timestamp``; standing for
            its whole µs); None means the first GetNext.
        :param end_timestamp: window end, likewise; None means the last GetNext.
        :param select_events: regular expressions for the framework events (name or phase) to
            report during outlier batches.
        :param select_dimensions: regular expressions for the system metrics (dimension or name)
            to report during outlier batches.
        :raises ConfigError: a bound is not a timestamp, or the end is before the start.
        """
        calls = self.dataIter_metric
        start_us: float | None = None
        if start_timestamp is not None:
            start_us = window_bound_us(
                start_timestamp, "analyze_batchtime.start_timestamp", end=False
            )
            calls = calls[calls["start_time_epoch_us"] >= start_us]
        if end_timestamp is not None:
            end_us = window_bound_us(end_timestamp, "analyze_batchtime.end_timestamp", end=True)
            if start_us is not None and end_us < start_us:
                # Swapped bounds would read as a window without GetNext calls.
                raise ConfigError(
                    "analyze_batchtime.end_timestamp",
                    end_timestamp,
                    f"a time at or after start_timestamp ({start_timestamp!r})",
                )
            calls = calls[calls["start_time_epoch_us"] <= end_us]
        if len(calls) < 2:
            result = BatchTimeAnalysis(
                batches=calls.assign(
                    BatchTime_in_seconds=float("nan"),
                    previous_batch_start=None,
                    previous_batch_start_epoch_us=float("nan"),
                )
            )
            logger.info("%s", result.summary())
            if calls.empty and len(self.dataIter_metric) >= 2:
                _say_where_the_calls_are(self.dataIter_metric, start_timestamp, end_timestamp)
            return result
        by = ["node_id", "rank", "pid"]
        batches = calls.sort_values([*by, "end_time_epoch_us"], kind="stable").copy()
        grouped = batches.groupby(by, sort=False)
        batches["BatchTime_in_seconds"] = grouped["start_time_epoch_us"].diff() / 1e6
        batches["previous_batch_start"] = grouped["start_time"].shift()
        batches["previous_batch_start_epoch_us"] = grouped["start_time_epoch_us"].shift()
        median = float(batches["BatchTime_in_seconds"].median())
        outliers = (
            batches.loc[batches["BatchTime_in_seconds"] >= 2 * median, list(OUTLIER_COLUMNS[1:])]
            .sort_values("BatchTime_in_seconds", ascending=False, kind="stable")
            .reset_index(drop=True)
        )
        outliers.insert(0, "outlier", range(len(outliers)))
        system, framework = self._during(outliers, select_events, select_dimensions)
        result = BatchTimeAnalysis(batches, median, outliers, system, framework)
        logger.info("%s", result.summary())
        return result

    def _during(
        self,
        outliers: pd.DataFrame,
        select_events: Sequence[str] | str,
        select_dimensions: Sequence[str] | str,
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """System and framework aggregates inside each outlier batch (one SQL join each)."""
        import pyarrow as pa

        if outliers.empty:
            return _empty_frame(SYSTEM_COLUMNS), _empty_frame(FRAMEWORK_COLUMNS)
        if len(outliers) > MAX_CORRELATED_OUTLIERS:
            logger.info(
                "Gathering metrics for the %d longest of %d outlier batches.",
                MAX_CORRELATED_OUTLIERS,
                len(outliers),
            )
        top = outliers.head(MAX_CORRELATED_OUTLIERS)
        windows = pa.table(
            {
                "outlier": pa.array(top["outlier"].tolist(), pa.int64()),
                "node": pa.array(top["node_id"].tolist(), pa.string()),
                "rank": pa.array(top["rank"].tolist(), pa.int64()),
                "lo": pa.array(top["previous_batch_start_epoch_us"].tolist(), pa.float64()),
                "hi": pa.array(top["start_time_epoch_us"].tolist(), pa.float64()),
            }
        )
        con = self.pd_data_frame.connection()
        dimensions = regex_any(con, select_dimensions, "analyze_batchtime.select_dimensions")
        events = regex_any(con, select_events, "analyze_batchtime.select_events")
        con.register("_stepscope_batches", windows)
        try:
            system = con.sql(
                f"SELECT w.outlier, s.node AS nodeID, s.type, {dimension_sql('s.name')}, "
                "avg(s.value) AS mean, "
                "max(s.value) AS max, count(*) AS samples FROM system s "
                "JOIN _stepscope_batches w ON s.node = w.node "
                "AND s.timestamp_us BETWEEN w.lo AND w.hi "
                "WHERE regexp_matches(s.dimension, ?) OR regexp_matches(s.name, ?) "
                "GROUP BY ALL ORDER BY ALL",
                params=[dimensions, dimensions],
            ).df()
            framework = con.sql(
                f"SELECT w.outlier, e.category AS process, {FRAMEWORK_METRIC_SQL} "
                "AS framework_metric, count(*) AS count, sum(e.dur_us) AS total_us FROM events e "
                "JOIN _stepscope_batches w ON e.node = w.node AND e.rank = w.rank "
                "AND e.start_us <= w.hi AND e.start_us + e.dur_us >= w.lo "
                "WHERE e.ph <> 'C' AND (regexp_matches(e.name, ?) OR regexp_matches(e.category, ?)) "
                "GROUP BY ALL ORDER BY w.outlier, total_us DESC",
                params=[events, events],
            ).df()
        finally:
            con.unregister("_stepscope_batches")
        return system, framework

    def plot_the_window(
        self,
        start_timestamp: Any = None,
        end_timestamp: Any = None,
        select_events: Sequence[str] | str = (".*",),
        select_dimensions: Sequence[str] | str = (".*",),
        output: str | Path | None = None,
    ) -> Path:
        """Write a chart of the system metrics and framework events in the window; return its path.

        See :func:`stepscope.analysis.window_plot.plot_the_window` for the parameters.
        """
        return _plot_the_window(
            self.pd_data_frame,
            start_timestamp,
            end_timestamp,
            select_events=select_events,
            select_dimensions=select_dimensions,
            output=output,
        )
