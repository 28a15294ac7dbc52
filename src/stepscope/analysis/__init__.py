"""Analyses of stored data: DataFrames, step, data-loader, Python-profile and kernel analyses."""

from __future__ import annotations

from stepscope.analysis.dataloader import (
    BatchTimeAnalysis,
    DurationSummary,
    IteratorInitialization,
    PT_dataloader_analysis,
)
from stepscope.analysis.pandas_frame import PandasFrame
from stepscope.analysis.python_profile import (
    Metrics,
    PyinstrumentAnalysis,
    PyinstrumentStats,
    PyinstrumentStepStats,
    cProfileAnalysis,
    cProfileStats,
)
from stepscope.analysis.statistics import (
    JobStats,
    PandasFrameAnalysis,
    Resource,
    StatsBy,
    device_usage_statistics,
    job_statistics,
    step_statistics,
    training_phase_intervals,
    utilization_statistics,
)
from stepscope.analysis.utilization import system_active_time, system_utilization_timeline
from stepscope.analysis.window_plot import plot_the_window

__all__: list[str] = [
    "BatchTimeAnalysis",
    "DurationSummary",
    "IteratorInitialization",
    "JobStats",
    "Metrics",
    "PT_dataloader_analysis",
    "PandasFrame",
    "PandasFrameAnalysis",
    "PyinstrumentAnalysis",
    "PyinstrumentStats",
    "PyinstrumentStepStats",
    "Resource",
    "StatsBy",
    "cProfileAnalysis",
    "cProfileStats",
    "device_usage_statistics",
    "job_statistics",
    "plot_the_window",
    "step_statistics",
    "system_active_time",
    "system_utilization_timeline",
    "training_phase_intervals",
    "utilization_statistics",
]
