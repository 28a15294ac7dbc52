"""GPU backends of the system monitor: NVML for real NVIDIA GPUs, a scripted one for tests.

A backend is opened once (:meth:`GpuBackend.open` lists the devices), sampled every interval
(:meth:`GpuBackend.sample`) and closed. The monitor runs in its own process, so a backend is
chosen there from a *spec string* (:func:`gpu_backend_from_spec`):

* ``"nvml"``: :class:`NvmlGpuBackend` (the default);
* ``"none"``: no GPUs (a CPU-only node, or a benchmark that should not probe the driver);
* ``"scripted:<JSON>"`` or ``"scripted:<path to a JSON file>"``: :class:`ScriptedGpuBackend`.

A machine without a GPU, a driver or the ``nvidia-ml-py`` package is normal: the NVML backend then
reports zero GPUs and logs one info line; it never raises.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from stepscope.errors import ConfigError

__all__ = [
    "GpuBackend",
    "GpuInfo",
    "GpuSample",
    "NvmlGpuBackend",
    "ScriptedGpuBackend",
    "gpu_backend_from_spec",
]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class GpuInfo:
    """One GPU as job.json describes it (``hardware.<node>.gpus``)."""

    index: int
    name: str
    memory_bytes: int


@dataclasses.dataclass(frozen=True, slots=True)
class GpuSample:
    """One reading of one GPU.

    :param index: the device index; records are named ``gpu<index>``.
    :param utilization_pct: ``GPUUtilization``: % of the last sample period a kernel ran;
        ``None`` when the device could not report it (NVML's "Not Supported", for one).
    :param memory_pct: ``GPUMemoryUtilization``: % of the device memory in use; ``None`` as above.
    """

    index: int
    utilization_pct: float | None
    memory_pct: float | None


class GpuBackend(ABC):
    """Where the monitor reads GPU metrics from."""

    @abstractmethod
    def open(self) -> list[GpuInfo]:
        """Start using the devices and list them; an unusable backend returns ``[]``."""

    @abstractmethod
    def sample(self) -> list[GpuSample]:
        """Read every device once; a device that cannot be read is left out of this sample, a
        metric it cannot report is ``None``."""

    def close(self) -> None:  # noqa: B027 - most backends hold nothing to release
        """Release the devices."""

    @abstractmethod
    def spec(self) -> str:
        """The spec string that rebuilds this backend in another process."""


class NvmlGpuBackend(GpuBackend):
    """NVIDIA GPUs through NVML (``pynvml`` from the ``nvidia-ml-py`` package, imported lazily).

    ``GPUUtilization`` is NVML's ``utilization.gpu``: the percentage of the last sample period
    during which a kernel was running. ``GPUMemoryUtilization`` is the percentage of device memory
    *in use* (``nvmlDeviceGetMemoryInfo``: used / total), not NVML's ``utilization.memory``, which
    is the share of time the memory was being read or written (bandwidth activity). The rules that
    read it (GPUMemoryIncrease, BatchSize, OverallSystemUsage) are about memory filling up, and a
    leak is invisible in bandwidth activity.

    Devices are NVML's: every GPU of the node with NVML's index, whatever
    ``CUDA_VISIBLE_DEVICES`` says, since the monitor describes the node, not one process.
    """

    def __init__(self) -> None:
        self._nvml: Any = None
        self._handles: list[tuple[int, Any]] = []
        self._failed_reads: set[tuple[int, str]] = set()

    def spec(self) -> str:
        return "nvml"

    def open(self) -> list[GpuInfo]:
        try:
            import pynvml
        except ImportError:
            logger.info("nvidia-ml-py is not installed: no GPU metrics on this node.")
            return []
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            logger.info("NVML is not available (%s): no GPU metrics on this node.", exc)
            return []
        except Exception:  # a broken driver install must not stop the job: no GPUs, logged
            logger.warning("NVML failed to start: no GPU metrics on this node.", exc_info=True)
            return []
        self._nvml = pynvml
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            logger.warning("NVML could not count the GPUs (%s): no GPU metrics on this node.", exc)
            return []
        devices = []
        for index in range(count):
            # one GPU that cannot be opened (no permission in this container, lost) leaves the
            # others measured
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                name = pynvml.nvmlDeviceGetName(handle)
                if isinstance(name, bytes):  # older nvidia-ml-py releases return bytes
                    name = name.decode(errors="replace")
                total_bytes = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
            except pynvml.NVMLError as exc:
                logger.warning("NVML could not open gpu%d (%s): no metrics of it.", index, exc)
                continue
            self._handles.append((index, handle))
            devices.append(GpuInfo(index, str(name), total_bytes))
        return devices

    def sample(self) -> list[GpuSample]:
        samples = []
        for index, handle in self._handles:
            # each metric on its own: a GPU that does not support one (utilization under MIG,
            # say) still reports the other
            utilization_pct = self._read(index, "GPUUtilization", self._utilization_pct, handle)
            memory_pct = self._read(index, "GPUMemoryUtilization", self._memory_pct, handle)
            if utilization_pct is not None or memory_pct is not None:
                samples.append(GpuSample(index, utilization_pct, memory_pct))
        return samples

    def _utilization_pct(self, handle: Any) -> float:
        return float(self._nvml.nvmlDeviceGetUtilizationRates(handle).gpu)

    def _memory_pct(self, handle: Any) -> float:
        memory = self._nvml.nvmlDeviceGetMemoryInfo(handle)
        return round(100.0 * memory.used / memory.total, 2) if memory.total else 0.0

    def _read(
        self, index: int, metric: str, read: Callable[[Any], float], handle: Any
    ) -> float | None:
        """One metric of one GPU, or ``None`` with one warning per GPU and metric."""
        try:
            return read(handle)
        except self._nvml.NVMLError as exc:
            if (index, metric) not in self._failed_reads:
                self._failed_reads.add((index, metric))
                logger.warning(
                    "NVML could not read %s of gpu%d (%s); it is left out while this lasts.",
                    metric,
                    index,
                    exc,
                )
            return None

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError as exc:
                logger.debug("nvmlShutdown failed: %s", exc)
            self._nvml = None
            self._handles = []


class ScriptedGpuBackend(GpuBackend):
    """GPUs whose readings come from a script: for tests and demos on machines without GPUs.

    :param samples: one entry per sample call, each a list with one ``(utilization_pct,
        memory_pct)`` pair per GPU; after the last entry the script starts again. An empty list
        means no GPUs. ``None`` (JSON ``null``) is a metric the GPU cannot report, as NVML's
        "Not Supported"; a GPU with both ``None`` is left out of that sample, as a lost GPU is.
    :param names: device names (default ``"Scripted GPU"``).
    :param memory_bytes: the memory size reported for every device (default 16 GiB).
    :raises ConfigError: when entries have different GPU counts or a value is outside 0-100.
    """

    def __init__(
        self,
        samples: Sequence[Sequence[Sequence[float | None]]],
        *,
        names: Sequence[str] | None = None,
        memory_bytes: int = 16 * 1024**3,
    ) -> None:
        self._samples = [[(_number(u), _number(m)) for u, m in entry] for entry in samples]
        counts = {len(entry) for entry in self._samples}
        if len(counts) > 1:
            raise ConfigError(
                "ScriptedGpuBackend.samples", samples, "entries with the same number of GPUs"
            )
        for entry in self._samples:
            for pair in entry:
                if not all(value is None or 0.0 <= value <= 100.0 for value in pair):
                    raise ConfigError("ScriptedGpuBackend.samples", pair, "percentages in 0-100")
        self._count = counts.pop() if counts else 0
        self._names = list(names) if names is not None else ["Scripted GPU"] * self._count
        if len(self._names) != self._count:
            raise ConfigError("ScriptedGpuBackend.names", names, f"{self._count} names")
        self._memory_bytes = memory_bytes
        self._position = 0

    def spec(self) -> str:
        document = {
            "samples": self._samples,
            "names": self._names,
            "memory_bytes": self._memory_bytes,
        }
        return "scripted:" + json.dumps(document)

    def open(self) -> list[GpuInfo]:
        return [GpuInfo(i, self._names[i], self._memory_bytes) for i in range(self._count)]

    def sample(self) -> list[GpuSample]:
        if not self._samples:
            return []
        entry = self._samples[self._position % len(self._samples)]
        self._position += 1
        return [
            GpuSample(index, u, m)
            for index, (u, m) in enumerate(entry)
            if u is not None or m is not None
        ]


def _number(value: float | None) -> float | None:
    return None if value is None else float(value)


_SPEC_ALLOWED = "'nvml', 'none', 'scripted:<JSON>' or 'scripted:<path to a JSON file>'"


def gpu_backend_from_spec(spec: str | GpuBackend) -> GpuBackend:
    """Build the backend a spec string names (see the module docstring); a backend passes through.

    A scripted spec holds ``{"samples": [...], "names": [...], "memory_bytes": n}`` (only
    ``samples`` required), inline or in a file.

    :raises ConfigError: for an unknown spec or an unreadable or invalid script.
    """
    if isinstance(spec, GpuBackend):
        return spec
    if spec == "nvml":
        return NvmlGpuBackend()
    if spec == "none":
        return ScriptedGpuBackend([])
    if not isinstance(spec, str) or not spec.startswith("scripted:"):
        raise ConfigError("gpu_backend", spec, _SPEC_ALLOWED)
    text = spec.removeprefix("scripted:")
    try:
        if not text.lstrip().startswith(("{", "[")):
            text = Path(text).read_text()
        document = json.loads(text)
        if isinstance(document, list):
            document = {"samples": document}
        return ScriptedGpuBackend(
            document["samples"],
            names=document.get("names"),
            memory_bytes=int(document.get("memory_bytes", 16 * 1024**3)),
        )
    except ConfigError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            "gpu_backend", spec, _SPEC_ALLOWED, f"The script is unusable: {exc}."
        ) from exc
