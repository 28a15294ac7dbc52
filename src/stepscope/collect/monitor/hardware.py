"""The node's hardware as job.json records it: CPU model and count, memory, GPUs."""

from __future__ import annotations

import dataclasses
import platform
from pathlib import Path
from typing import Any

import psutil

from stepscope.collect.monitor.gpu import GpuBackend, gpu_backend_from_spec

__all__ = ["describe_hardware"]

_CPUINFO = Path("/proc/cpuinfo")


def describe_hardware(gpu_backend: str | GpuBackend = "nvml") -> dict[str, Any]:
    """``{"cpu_model", "cpu_count", "memory_bytes", "gpus": [{"index", "name", "memory_bytes"}]}``.

    :param gpu_backend: where GPUs are listed from (a spec or a backend, see
        :func:`~stepscope.collect.monitor.gpu.gpu_backend_from_spec`); it is opened and closed
        here. Without a driver the list is empty.
    """
    backend = gpu_backend_from_spec(gpu_backend)
    try:
        gpus = [dataclasses.asdict(gpu) for gpu in backend.open()]
    finally:
        backend.close()
    return {
        "cpu_model": _cpu_model(),
        "cpu_count": psutil.cpu_count(logical=True) or 0,
        "memory_bytes": int(psutil.virtual_memory().total),
        "gpus": gpus,
    }


def _cpu_model() -> str:
    """The CPU's marketing name (Linux ``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        text = _CPUINFO.read_text()
    except OSError:  # not Linux: fall back below
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "cpu model"):
            return value.strip()
    return platform.processor() or platform.machine()
