"""GPU backends: NVML without a driver, NVML's semantics against a stand-in library, scripts."""

from __future__ import annotations

import json
import logging
import sys
import types
from pathlib import Path
from typing import Any

import psutil
import pytest

from stepscope.collect.monitor import (
    GpuInfo,
    GpuSample,
    NvmlGpuBackend,
    ScriptedGpuBackend,
    describe_hardware,
    gpu_backend_from_spec,
)
from stepscope.errors import ConfigError

LOGGER = "stepscope.collect.monitor.gpu"


def test_nvml_on_this_machine_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    backend = NvmlGpuBackend()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        devices = backend.open()
        samples = backend.sample()
        backend.close()
    if not devices:  # no driver here: zero GPUs, one info line
        assert samples == []
        assert [r.levelno for r in caplog.records] == [logging.INFO]
        assert "no GPU metrics" in caplog.records[0].getMessage()
    else:  # a real GPU: complete descriptions and readings in range
        assert all(d.name and d.memory_bytes > 0 for d in devices)
        assert {s.index for s in samples} <= {d.index for d in devices}
        assert all(0 <= s.utilization_pct <= 100 and 0 <= s.memory_pct <= 100 for s in samples)


def test_nvml_without_the_package_reports_zero_gpus(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        backend = NvmlGpuBackend()
        assert backend.open() == []
        assert backend.sample() == []
        backend.close()
    assert len(caplog.records) == 1 and "nvidia-ml-py is not installed" in caplog.messages[0]


class _FakeNvmlError(Exception):
    pass


def _fake_pynvml(broken_device: int | None) -> tuple[types.ModuleType, dict[str, Any]]:
    """A stand-in for the pynvml module: two GPUs, one of which can be made to fail."""
    calls: dict[str, Any] = {"init": 0, "shutdown": 0}
    memory = {0: (16 * 2**30, 4 * 2**30), 1: (80 * 2**30, 60 * 2**30)}  # (total, used)
    module = types.ModuleType("pynvml")
    module.NVMLError = _FakeNvmlError  # type: ignore[attr-defined]

    def init() -> None:
        calls["init"] += 1

    def shutdown() -> None:
        calls["shutdown"] += 1

    def utilization(handle: int) -> Any:
        if handle == broken_device:
            raise _FakeNvmlError("GPU is lost")
        # .memory is bandwidth activity: deliberately different from the memory in use
        return types.SimpleNamespace(gpu=[35, 90][handle], memory=3)

    def memory_info(handle: int) -> Any:
        total, used = memory[handle]
        return types.SimpleNamespace(total=total, used=used, free=total - used)

    module.nvmlInit = init  # type: ignore[attr-defined]
    module.nvmlShutdown = shutdown  # type: ignore[attr-defined]
    module.nvmlDeviceGetCount = lambda: 2  # type: ignore[attr-defined]
    module.nvmlDeviceGetHandleByIndex = lambda index: index  # type: ignore[attr-defined]
    module.nvmlDeviceGetName = lambda h: [b"Tesla V100-SXM2-16GB", "NVIDIA A100 80GB"][h]  # type: ignore[attr-defined]
    module.nvmlDeviceGetUtilizationRates = utilization  # type: ignore[attr-defined]
    module.nvmlDeviceGetMemoryInfo = memory_info  # type: ignore[attr-defined]
    return module, calls


def test_nvml_reads_utilization_and_memory_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    module, calls = _fake_pynvml(broken_device=None)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    backend = NvmlGpuBackend()
    assert backend.open() == [
        GpuInfo(0, "Tesla V100-SXM2-16GB", 16 * 2**30),
        GpuInfo(1, "NVIDIA A100 80GB", 80 * 2**30),
    ]
    assert backend.sample() == [GpuSample(0, 35.0, 25.0), GpuSample(1, 90.0, 75.0)]
    backend.close()
    assert calls == {"init": 1, "shutdown": 1}


def test_nvml_skips_a_failing_device_and_warns_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    module, _ = _fake_pynvml(broken_device=1)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    backend = NvmlGpuBackend()
    backend.open()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        first, second = backend.sample(), backend.sample()
    backend.close()
    assert first == second == [GpuSample(0, 35.0, 25.0)]
    assert len(caplog.records) == 1 and "gpu1" in caplog.messages[0]


def test_nvml_with_a_broken_library_reports_zero_gpus(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    module, _ = _fake_pynvml(broken_device=None)

    def broken_init() -> None:
        raise OSError("libnvidia-ml.so.1: undefined symbol")

    module.nvmlInit = broken_init  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", module)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        backend = NvmlGpuBackend()
        assert backend.open() == [] and backend.sample() == []
        backend.close()
    assert len(caplog.records) == 1 and caplog.records[0].exc_info is not None


def test_scripted_backend_cycles_through_its_script() -> None:
    backend = ScriptedGpuBackend([[(10, 20), (30, 40)], [(50, 60), (70, 80)]], names=["a", "b"])
    assert [d.name for d in backend.open()] == ["a", "b"]
    readings = [backend.sample() for _ in range(3)]
    assert readings[0] == [GpuSample(0, 10, 20), GpuSample(1, 30, 40)]
    assert readings[1] == [GpuSample(0, 50, 60), GpuSample(1, 70, 80)]
    assert readings[2] == readings[0]


def test_specs_rebuild_backends_in_another_process(tmp_path: Path) -> None:
    backend = ScriptedGpuBackend([[(10, 20)], [(30, 40)]], names=["x"], memory_bytes=1024)
    rebuilt = gpu_backend_from_spec(backend.spec())
    assert rebuilt.open() == [GpuInfo(0, "x", 1024)]
    assert [rebuilt.sample(), rebuilt.sample()] == [[GpuSample(0, 10, 20)], [GpuSample(0, 30, 40)]]
    script = tmp_path / "gpus.json"
    script.write_text(json.dumps({"samples": [[[1, 2], [3, 4]]]}))
    from_file = gpu_backend_from_spec(f"scripted:{script}")
    assert from_file.sample() == [GpuSample(0, 1, 2), GpuSample(1, 3, 4)]
    assert isinstance(gpu_backend_from_spec("nvml"), NvmlGpuBackend)
    assert gpu_backend_from_spec("none").open() == []


@pytest.mark.parametrize(
    "spec",
    ["cuda", "scripted:/no/such/file.json", "scripted:{not json", "scripted:[[[10, 200]]]"],
)
def test_bad_specs_are_rejected(spec: str) -> None:
    with pytest.raises(ConfigError, match="gpu_backend|ScriptedGpuBackend.samples"):
        gpu_backend_from_spec(spec)


def test_describe_hardware_lists_cpus_memory_and_gpus() -> None:
    backend = ScriptedGpuBackend([[(1, 2), (3, 4)]], names=["g0", "g1"], memory_bytes=2048)
    hardware = describe_hardware(backend)
    assert hardware["cpu_count"] == psutil.cpu_count()
    assert hardware["memory_bytes"] == psutil.virtual_memory().total
    assert isinstance(hardware["cpu_model"], str) and hardware["cpu_model"]
    assert hardware["gpus"] == [
        {"index": 0, "name": "g0", "memory_bytes": 2048},
        {"index": 1, "name": "g1", "memory_bytes": 2048},
    ]
    json.dumps(hardware)  # goes into job.json as it is
