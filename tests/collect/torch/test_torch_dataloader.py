"""Data-loader events of a real script: iterator init, every GetNext, every worker's life."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.collect.torch.torchjob import TRAIN_SCRIPT, loader_pids, read_events, run_script

from stepscope.config import DataloaderProfilingConfig, FrameworkProfile, ProfilerConfig


def _config(start_step: int = 0, num_steps: int = 1000, regex: str = ".*") -> ProfilerConfig:
    return ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            dataloader_profiling_config=DataloaderProfilingConfig(
                start_step=start_step, num_steps=num_steps, metrics_regex=regex
            )
        )
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_iterator_getnext_and_worker_events(tmp_path: Path, workers: int) -> None:
    job_dir, result = run_script(
        tmp_path,
        TRAIN_SCRIPT,
        _config(),
        "--steps",
        "6",
        "--eval-steps",
        "2",
        "--workers",
        str(workers),
    )
    events = read_events(job_dir, "model_timeline.json")
    inits = [e for e in events if e["phase"] == "DataLoaderIterInitialize"]
    getnexts = [e for e in events if e["phase"] == "DataLoaderIter"]
    worker_events = [e for e in events if e["phase"] == "DataLoaderWorker"]
    iterator = "_SingleProcessDataLoaderIter" if workers == 0 else "_MultiProcessingDataLoaderIter"
    assert [e["name"] for e in inits] == [f"{iterator}.__init__"] * 2  # train, then eval
    assert all(e["args"]["num_workers"] == workers for e in inits)
    assert all(e["args"]["pin_memory"] is False for e in inits)
    assert {e["name"] for e in getnexts} == {"DataLoaderIter::GetNext"}
    assert len(getnexts) == 6 + 2  # one per batch; the StopIteration calls are not batches
    main_pid = inits[0]["args"]["pid"]
    assert all(e["args"]["pid"] == main_pid for e in getnexts)
    if workers == 0:
        assert worker_events == []
        assert {e["args"]["worker_id"] for e in getnexts} == {-1}
        return
    # the workers that really produced batches, measured from inside each worker
    assert {e["args"]["pid"] for e in worker_events} == loader_pids(result)
    assert sorted(e["args"]["worker_id"] for e in worker_events) == [0, 0, 1, 1]
    assert {e["args"]["worker_id"] for e in getnexts} == {0, 1}
    train_init, eval_init = inits
    first_workers = [e for e in worker_events if e["start_us"] < eval_init["start_us"]]
    assert len(first_workers) == 2
    train_batches = [g for g in getnexts if g["end_us"] < eval_init["start_us"]]
    for worker in first_workers:
        # a worker starts once its iterator is being created (its process may start running
        # after __init__ returned), before the batch it delivers, and lives past the last batch
        mine = [g for g in train_batches if g["args"]["worker_id"] == worker["args"]["worker_id"]]
        assert train_init["start_us"] <= worker["start_us"] <= mine[0]["end_us"]
        assert worker["end_us"] >= max(g["end_us"] for g in train_batches)


def test_only_the_configured_steps_are_recorded(tmp_path: Path) -> None:
    job_dir, _ = run_script(
        tmp_path, TRAIN_SCRIPT, _config(start_step=2, num_steps=2), "--steps", "6"
    )
    events = read_events(job_dir, "model_timeline.json")
    getnexts = [e for e in events if e["phase"] == "DataLoaderIter"]
    train_steps = [e for e in read_events(job_dir) if e["phase"] == "Step:ModeKeys.TRAIN"]
    assert len(getnexts) == 2
    # each recorded GetNext lies inside step 2 or 3, the configured ones
    inside = {
        s["args"]["step_num"]
        for g in getnexts
        for s in train_steps
        if s["start_us"] <= g["start_us"] <= s["end_us"]
    }
    assert inside == {"2", "3"}
    assert not [e for e in events if e["phase"] == "DataLoaderIterInitialize"]


def test_metrics_regex_keeps_only_matching_events(tmp_path: Path) -> None:
    job_dir, _ = run_script(tmp_path, TRAIN_SCRIPT, _config(regex="GetNext"), "--steps", "3")
    events = read_events(job_dir, "model_timeline.json")
    assert {e["phase"] for e in events} == {"DataLoaderIter"}
    assert len(events) == 3
