"""The system monitor: one process per node sampling CPU, memory, disk, network and GPUs.

:func:`start_monitor` runs it; :class:`GpuBackend` is where GPU metrics come from (NVML, or a
script in tests); :func:`describe_hardware` lists the node's hardware for job.json.
"""

from __future__ import annotations

from stepscope.collect.monitor.gpu import (
    GpuBackend,
    GpuInfo,
    GpuSample,
    NvmlGpuBackend,
    ScriptedGpuBackend,
    gpu_backend_from_spec,
)
from stepscope.collect.monitor.hardware import describe_hardware
from stepscope.collect.monitor.process import MonitorHandle, start_monitor, start_monitor_or_warn
from stepscope.collect.monitor.sampler import SystemSampler

__all__ = [
    "GpuBackend",
    "GpuInfo",
    "GpuSample",
    "MonitorHandle",
    "NvmlGpuBackend",
    "ScriptedGpuBackend",
    "SystemSampler",
    "describe_hardware",
    "gpu_backend_from_spec",
    "start_monitor",
    "start_monitor_or_warn",
]
