"""Profiler configuration: SageMaker's configuration objects, their validation and files.

The objects keep the SageMaker Python SDK's names, parameters, defaults and precedence
(:class:`FrameworkProfile` explains the three scenarios); they are immutable values. This stage
imports no other stage, so every other stage may use it.
"""

from __future__ import annotations

from stepscope.config.framework import (
    DETAILED_STEPS_WARNING,
    MAX_RECOMMENDED_DETAILED_STEPS,
    OPTIONS,
    FrameworkProfile,
    ProfilingOption,
    detailed_range_warned_before,
    option_class,
)
from stepscope.config.job import JOB_CONFIG_FILENAME, job_config_path, update_job_config
from stepscope.config.options import (
    DataloaderProfilingConfig,
    DetailedProfilingConfig,
    DistributedProfilingConfig,
    HorovodProfilingConfig,
    ProfilingOptionConfig,
    PythonProfiler,
    PythonProfilingConfig,
    SMDataParallelProfilingConfig,
    cProfileTimer,
)
from stepscope.config.profiler import (
    CONFIG_ENV_VAR,
    SAGEMAKER_CONFIG_ENV_VAR,
    SYSTEM_MONITOR_INTERVALS_MS,
    ProfilerConfig,
)
from stepscope.config.ranges import ProfileRange
from stepscope.config.sagemaker_profiler import Profiler
from stepscope.config.watcher import ConfigWatcher

__all__ = [
    "CONFIG_ENV_VAR",
    "DETAILED_STEPS_WARNING",
    "JOB_CONFIG_FILENAME",
    "MAX_RECOMMENDED_DETAILED_STEPS",
    "OPTIONS",
    "SAGEMAKER_CONFIG_ENV_VAR",
    "SYSTEM_MONITOR_INTERVALS_MS",
    "ConfigWatcher",
    "DataloaderProfilingConfig",
    "DetailedProfilingConfig",
    "DistributedProfilingConfig",
    "FrameworkProfile",
    "HorovodProfilingConfig",
    "ProfileRange",
    "Profiler",
    "ProfilerConfig",
    "ProfilingOption",
    "ProfilingOptionConfig",
    "PythonProfiler",
    "PythonProfilingConfig",
    "SMDataParallelProfilingConfig",
    "cProfileTimer",
    "detailed_range_warned_before",
    "job_config_path",
    "option_class",
    "update_job_config",
]
