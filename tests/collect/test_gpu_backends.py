"""GPU backends: NVML without a driver, NVML's semantics against a stand-in library, scripts."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import psutil
import pynvml
import pytest

from stepscope.collect.monitor import (
    GpuInfo,
    GpuSample,
    NvmlGpuBackend,
    ScriptedGpuBackend,
    SystemSampler,
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


#: (total, used) bytes of the two GPUs the driver below answers for
_MEMORY = {0: (16 * 2**30, 4 * 2**30), 1: (80 * 2**30, 60 * 2**30)}


def _driver(
    monkeypatch: pytest.MonkeyPatch, failures: dict[tuple[str, int], int] | None = None
) -> dict[str, int]:
    """The real ``pynvml`` module, its driver calls answered here for two GPUs, with its own
    result structures and errors: ``failures`` maps (function, device index) to the NVML error
    code (``pynvml.NVML_ERROR_*``) that call raises. Returns the init/shutdown call counts."""
    failures = failures if failures is not None else {}
    calls = {"init": 0, "shutdown": 0}

    def answered(function: str, answer: Any) -> Any:
        def call(device: int) -> Any:
            if (function, device) in failures:
                raise pynvml.NVMLError(failures[function, device])
            return answer(device)

        return call

    def init() -> None:
        calls["init"] += 1

    def shutdown() -> None:
        calls["shutdown"] += 1

    def memory_info(device: int) -> Any:
        total, used = _MEMORY[device]
        return pynvml.c_nvmlMemory_t(total=total, free=total - used, used=used)

    # .memory is bandwidth activity: deliberately different from the memory in use
    def utilization(device: int) -> Any:
        return pynvml.c_nvmlUtilization_t(gpu=[35, 90][device], memory=3)

    names = [b"Tesla V100-SXM2-16GB", "NVIDIA A100 80GB"]  # older releases return bytes
    for function, replacement in {
        "nvmlInit": init,
        "nvmlShutdown": shutdown,
        "nvmlDeviceGetCount": lambda: 2,
        "nvmlDeviceGetHandleByIndex": answered("nvmlDeviceGetHandleByIndex", lambda i: i),
        "nvmlDeviceGetName": answered("nvmlDeviceGetName", lambda d: names[d]),
        "nvmlDeviceGetUtilizationRates": answered("nvmlDeviceGetUtilizationRates", utilization),
        "nvmlDeviceGetMemoryInfo": answered("nvmlDeviceGetMemoryInfo", memory_info),
    }.items():
        assert hasattr(pynvml, function), f"pynvml has no {function}"
        monkeypatch.setattr(pynvml, function, replacement)
    return calls


def test_nvml_reads_utilization_and_memory_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _driver(monkeypatch)
    backend = NvmlGpuBackend()
    assert backend.open() == [
        GpuInfo(0, "Tesla V100-SXM2-16GB", 16 * 2**30),
        GpuInfo(1, "NVIDIA A100 80GB", 80 * 2**30),
    ]
    assert backend.sample() == [GpuSample(0, 35.0, 25.0), GpuSample(1, 90.0, 75.0)]
    backend.close()
    assert calls == {"init": 1, "shutdown": 1}


def test_a_metric_one_gpu_does_not_support_leaves_its_other_metric_and_warns_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # utilization is "Not Supported" on some devices (MIG instances): memory still is
    _driver(monkeypatch, {("nvmlDeviceGetUtilizationRates", 1): pynvml.NVML_ERROR_NOT_SUPPORTED})
    backend = NvmlGpuBackend()
    backend.open()
    sampler = SystemSampler(backend)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        first, second = sampler.sample(), sampler.sample()
    backend.close()
    gpu_records = {(r.name, r.dimension): r.value for r in second if r.type == "gpu"}
    assert gpu_records == {
        ("gpu0", "GPUUtilization"): 35.0,
        ("gpu0", "GPUMemoryUtilization"): 25.0,
        ("gpu1", "GPUMemoryUtilization"): 75.0,
    }
    assert [r.name for r in first if r.type == "gpu"] == [name for name, _ in gpu_records]
    assert len(caplog.records) == 1
    assert "GPUUtilization of gpu1 (Not Supported)" in caplog.messages[0]


def test_a_gpu_that_is_lost_is_left_out_and_the_others_go_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _driver(monkeypatch)
    backend = NvmlGpuBackend()
    backend.open()
    assert len(backend.sample()) == 2
    lost = pynvml.NVML_ERROR_GPU_IS_LOST
    _driver(
        monkeypatch,
        {("nvmlDeviceGetUtilizationRates", 1): lost, ("nvmlDeviceGetMemoryInfo", 1): lost},
    )
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        first, second = backend.sample(), backend.sample()
    backend.close()
    assert first == second == [GpuSample(0, 35.0, 25.0)]
    assert caplog.messages and all("gpu1 (GPU is lost)" in m for m in caplog.messages)
    assert len(caplog.messages) <= 2  # not once per sample


def test_a_gpu_that_cannot_be_opened_leaves_the_others_listed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # a container may see a GPU it is not allowed to use
    _driver(monkeypatch, {("nvmlDeviceGetHandleByIndex", 0): pynvml.NVML_ERROR_NO_PERMISSION})
    backend = NvmlGpuBackend()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert backend.open() == [GpuInfo(1, "NVIDIA A100 80GB", 80 * 2**30)]
    assert backend.sample() == [GpuSample(1, 90.0, 75.0)]
    backend.close()
    assert len(caplog.records) == 1 and "gpu0" in caplog.messages[0]


def test_nvml_with_a_broken_library_reports_zero_gpus(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _driver(monkeypatch)

    def broken_init() -> None:
        raise OSError("libnvidia-ml.so.1: undefined symbol")

    monkeypatch.setattr(pynvml, "nvmlInit", broken_init)
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


def test_scripted_backend_plays_unsupported_metrics_and_lost_gpus_as_nvml_does() -> None:
    # None: NVML's "Not Supported" for one metric; both None: a GPU that is lost for a sample
    script = [[(None, 20), (None, None)], [(30, 40), (50, 60)]]
    rebuilt = gpu_backend_from_spec(ScriptedGpuBackend(script).spec())
    assert len(rebuilt.open()) == 2
    sampler = SystemSampler(rebuilt)
    sampler.sample()  # primes, and plays the first entry
    complete = {(r.name, r.dimension) for r in sampler.sample() if r.type == "gpu"}
    partial = {(r.name, r.dimension) for r in sampler.sample() if r.type == "gpu"}
    assert len(complete) == 4
    assert partial == {("gpu0", "GPUMemoryUtilization")}


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
