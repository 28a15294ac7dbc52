"""Analyses of stored data: DataFrames, step, data-loader, Python-profile and kernel analyses."""

from __future__ import annotations

from stepscope.analysis.annotations import annotation_durations, annotation_names
from stepscope.analysis.dataloader import (
    BatchTimeAnalysis,
    DurationSummary,
    IteratorInitialization,
    PT_dataloader_analysis,
)
from stepscope.analysis.gpu_activity import gpu_activity, memory_operations
from stepscope.analysis.gpu_time import (
    gpu_active_time,
    gpu_utilization,
    gpu_utilization_timeline,
    sm_efficiency_timeline,
)
from stepscope.analysis.kernel_types import kernel_type_breakdown
from stepscope.analysis.kernels import kernel_summary
from stepscope.analysis.launches import launch_delays
from stepscope.analysis.memory import memory_timeline
from stepscope.analysis.overlap import comm_compute_overlap
from stepscope.analysis.pandas_frame import PandasFrame
from stepscope.analysis.precision import kernel_precision, kernel_precision_by_name
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
from stepscope.analysis.step_breakdown import step_time_breakdown
from stepscope.analysis.temporal import temporal_breakdown
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
    "annotation_durations",
    "annotation_names",
    "cProfileAnalysis",
    "cProfileStats",
    "comm_compute_overlap",
    "device_usage_statistics",
    "gpu_active_time",
    "gpu_activity",
    "gpu_utilization",
    "gpu_utilization_timeline",
    "job_statistics",
    "kernel_precision",
    "kernel_precision_by_name",
    "kernel_summary",
    "kernel_type_breakdown",
    "launch_delays",
    "memory_operations",
    "memory_timeline",
    "plot_the_window",
    "sm_efficiency_timeline",
    "step_statistics",
    "step_time_breakdown",
    "system_active_time",
    "system_utilization_timeline",
    "temporal_breakdown",
    "training_phase_intervals",
    "utilization_statistics",
]
