"""The job generator: exact record and event counts, determinism, and what each knob changes."""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import time
from pathlib import Path

import pytest

from stepscope.errors import ConfigError
from stepscope.testing import TINY_JOB, generate_job


def _system_records(job: Path) -> list[dict]:
    return [
        json.loads(line)
        for path in sorted(job.glob("profiler-output/system/incremental/*/*.json"))
        for line in path.read_text().splitlines()
    ]


def _events(job: Path, suffix: str = "") -> list[dict]:
    """X events with their phase name added, read with plain json."""
    found = []
    for path in sorted(job.glob(f"profiler-output/framework/pevents/*/*{suffix}.json")):
        phases = {}
        for event in json.loads(path.read_text()):
            if event["ph"] == "M" and "name" in event["args"]:
                phases[event["pid"]] = event["args"]["name"]
            elif event["ph"] == "X":
                found.append({**event, "phase": phases[event["pid"]], "file": path.name})
    return found


def _digest(job: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(job.rglob("*")):
        if path.is_file() and path.name != "job.json":
            digest.update(path.relative_to(job).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def test_reference_job_has_the_documented_counts(tmp_path: Path) -> None:
    job = generate_job(tmp_path / "ref")
    system_files = list(job.glob("profiler-output/system/incremental/*/*.algo-1.json"))
    assert len(system_files) == 60
    records = sum(len(p.read_text().splitlines()) for p in system_files)
    assert records == 633_600  # 7,200 snapshots x 88 records
    spans = 0
    steps = 0
    for path in job.glob("profiler-output/framework/pevents/*/*.json"):
        for line in path.read_text().splitlines():
            spans += '"ph": "X"' in line
            steps += line.startswith('{"name": "Step:ModeKeys.TRAIN"')
    assert (spans, steps) == (281_694, 11_736)


def test_small_configuration_counts_are_exact(tmp_path: Path) -> None:
    job = generate_job(
        tmp_path / "small", nodes=2, gpus=2, cpus=3, minutes=2, step_s=0.5, interval_ms=1000
    )
    records = _system_records(job)
    # per node: 120 snapshots x (3 cores x 2 + 2 GPUs x 2 + memory + 3 i/o + 4 network)
    assert len(records) == 2 * 120 * 18
    assert {r["NodeId"] for r in records} == {"algo-1", "algo-2"}
    per_snapshot = {(r["Type"], r["Name"], r["Dimension"]) for r in records}
    assert ("network", "ReceiveBytesPerSecond", "Platform") in per_snapshot
    assert len(per_snapshot) == 18
    events = _events(job)
    # the documented model: (120 s - 5 s init - 1.25 s end) / (0.5 s x (1 + 4 x 1 %) + 15 ms)
    steps_per_node = math.floor((120 - 6.25) / (0.5 * 1.04 + 0.015))
    for node_id in ("0-algo-1", "1-algo-2"):
        mine = [e for e in events if f"_{node_id}_" in e["file"]]
        step_nums = [
            int(e["args"]["step_num"]) for e in mine if e["phase"] == "Step:ModeKeys.TRAIN"
        ]
        assert step_nums == list(range(steps_per_node))
        assert len(mine) == steps_per_node * 24 + 5  # one data-loader start (step 0) + 4 workers
        assert sum(e["phase"] == "DataLoaderWorker" for e in mine) == 4
    assert sorted(p.name for p in job.glob("profiler-output/framework/ranks/*.json")) == [
        "0-algo-1.json",
        "1-algo-2.json",
    ]
    assert (job / "profiler-output" / "training_job_end.ts").exists()
    job_json = json.loads((job / "job.json").read_text())
    assert job_json["nodes"] == ["algo-1", "algo-2"] and job_json["status"] == "Completed"


def test_pevents_files_rotate_every_minute_and_are_named_by_their_last_event(
    tmp_path: Path,
) -> None:
    job = generate_job(tmp_path / "j", **TINY_JOB)
    files = sorted(job.glob("profiler-output/framework/pevents/*/*_pythontimeline.json"))
    assert len(files) == 2
    for path in files:
        array = json.loads(path.read_text())
        start = array[0]["args"]["start_time_since_epoch_in_micros"]
        ends = [start + e["ts"] + e["dur"] for e in array if e["ph"] == "X"]
        assert int(path.name.split("_")[0]) == max(ends)
        assert path.parent.name == time.strftime("%Y%m%d%H", time.gmtime(max(ends) / 1e6))


def test_the_same_seed_writes_the_same_bytes(tmp_path: Path) -> None:
    a = generate_job(tmp_path / "a", **TINY_JOB, seed=3)
    b = generate_job(tmp_path / "b", **TINY_JOB, seed=3)
    c = generate_job(tmp_path / "c", **TINY_JOB, seed=4)
    assert _digest(a) == _digest(b) != _digest(c)


def _mean(records: list[dict], name: str, dimension: str) -> float:
    return statistics.fmean(
        r["Value"] for r in records if r["Name"] == name and r["Dimension"] == dimension
    )


def test_low_gpu_and_memory_growth_knobs(tmp_path: Path) -> None:
    default = _system_records(generate_job(tmp_path / "d", **TINY_JOB))
    assert _mean(default, "gpu0", "GPUUtilization") < 35 < 60 < _mean(default, "gpu1", "GPUUtilization")  # fmt: skip
    low = _system_records(generate_job(tmp_path / "l", **TINY_JOB, low_gpu={1: 10.0}))
    assert _mean(low, "gpu0", "GPUUtilization") > 60 > 15 > _mean(low, "gpu1", "GPUUtilization")
    grow = _system_records(generate_job(tmp_path / "g", **TINY_JOB, gpu_memory_growth=True))
    memory = [r for r in grow if r["Dimension"] == "GPUMemoryUtilization"]
    first_minute = statistics.fmean(r["Value"] for r in memory[: len(memory) // 2])
    last_minute = statistics.fmean(r["Value"] for r in memory[len(memory) // 2 :])
    assert last_minute - first_minute > 25


def test_slow_steps_and_data_loader_starvation(tmp_path: Path) -> None:
    job = generate_job(tmp_path / "s", **TINY_JOB, slow_step_fraction=0.0, slow_steps=[10, 20])
    steps = {
        int(e["args"]["step_num"]): e["dur"]
        for e in _events(job)
        if e["phase"] == "Step:ModeKeys.TRAIN"
    }
    typical = statistics.median(steps.values())
    assert sorted(s for s, d in steps.items() if d > 3 * typical) == [10, 20]
    calm = _events(generate_job(tmp_path / "c", **TINY_JOB), "model_timeline")
    starved_job = generate_job(tmp_path / "st", **TINY_JOB, dataloader_starved=True)
    starved = _events(starved_job, "model_timeline")
    wait = statistics.fmean(e["dur"] for e in starved if e["phase"] == "DataLoaderIter")
    forward = statistics.fmean(e["dur"] for e in _events(starved_job) if e["phase"] == "Forward")
    assert wait > forward
    assert wait > 10 * statistics.fmean(e["dur"] for e in calm if e["phase"] == "DataLoaderIter")
    cpu = _system_records(starved_job)
    assert _mean(cpu, "cpu0", "CPUUtilization") > 50


def test_minutes_must_be_a_positive_integer(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="generate_job.minutes must be an integer >= 1"):
        generate_job(tmp_path / "x", minutes=0)
