"""Data-loader events of a real script: iterator init, every GetNext, every worker's life."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from tests.collect.torch.torchjob import (
    TRAIN_SCRIPT,
    in_phase,
    loader_pids,
    losses,
    read_events,
    run_script,
    steps,
)

from stepscope.config import (
    DataloaderProfilingConfig,
    FrameworkProfile,
    ProfilerConfig,
    PythonProfilingConfig,
)


def _config(start_step: int = 0, num_steps: int = 1000, regex: str = ".*") -> ProfilerConfig:
    return ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            dataloader_profiling_config=DataloaderProfilingConfig(
                start_step=start_step, num_steps=num_steps, metrics_regex=regex
            )
        )
    )


@pytest.mark.parametrize(
    ("workers", "persistent"), [(0, False), (2, False), (2, True)], ids=["0", "2", "2 persistent"]
)
def test_iterator_getnext_and_worker_events(tmp_path: Path, workers: int, persistent: bool) -> None:
    # persistent workers live to the end of the script, past the session: they are recorded as
    # living until the session stopped
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
        *(["--persistent-workers"] if persistent else []),
    )
    events = read_events(job_dir, "model_timeline.json")
    inits = in_phase(events, "DataLoaderIterInitialize")
    getnexts = in_phase(events, "DataLoaderIter")
    worker_events = in_phase(events, "DataLoaderWorker")
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
    getnexts = in_phase(events, "DataLoaderIter")
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
    assert not in_phase(events, "DataLoaderIterInitialize")


def _time_range_from(start_s: float) -> ProfilerConfig:
    """Data-loader profiling in a time range from ``start_s`` with no duration: one step."""
    return ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            dataloader_profiling_config=DataloaderProfilingConfig(start_unix_time=start_s)
        )
    )


def test_a_time_range_that_starts_while_the_job_trains_records_the_step_it_chose(
    tmp_path: Path,
) -> None:
    # The start falls in the job's steps, almost surely in a sleep after the optimizer step,
    # where the data loading of the next step happens.
    start_s = time.time() + 3.0
    config = _time_range_from(start_s)
    job_dir, _ = run_script(tmp_path, TRAIN_SCRIPT, config, "--steps", "24", "--sleep-s", "0.25")
    events = read_events(job_dir, "model_timeline.json")
    getnexts = in_phase(events, "DataLoaderIter")
    starts = [s["start_us"] for s in steps(read_events(job_dir))]
    assert len(getnexts) == 1
    # it is the GetNext of the first step that starts at or after the range's start
    first = next(i for i, start in enumerate(starts) if start >= start_s * 1e6)
    assert starts[first] <= getnexts[0]["start_us"] < starts[first + 1]


def test_a_time_range_that_starts_before_the_first_epoch_records_its_first_step_whole(
    tmp_path: Path,
) -> None:
    # The range starts while the script waits to train: its one step is the first one, data
    # loading included (the iterator is made after the start, before the first step begins).
    start_s = time.time() + 3.0
    config = _time_range_from(start_s)
    job_dir, _ = run_script(
        tmp_path, TRAIN_SCRIPT, config, "--steps", "4", "--start-at", str(start_s + 0.5)
    )
    events = read_events(job_dir, "model_timeline.json")
    starts = [s["start_us"] for s in steps(read_events(job_dir))]
    assert [e["phase"] for e in events] == ["DataLoaderIterInitialize", "DataLoaderIter"]
    assert starts[0] <= events[1]["start_us"] < starts[1]


def test_metrics_regex_keeps_only_matching_events(tmp_path: Path) -> None:
    job_dir, _ = run_script(tmp_path, TRAIN_SCRIPT, _config(regex="GetNext"), "--steps", "3")
    events = read_events(job_dir, "model_timeline.json")
    assert {e["phase"] for e in events} == {"DataLoaderIter"}
    assert len(events) == 3


#: Two epochs of a DataLoader whose workers are started by ``sys.argv[1]`` (a start method that
#: pickles the worker's loop) and run a model of their own; prints the pids of the workers that
#: loaded the data and the losses.
SPAWN_SCRIPT = """
import os, sys
import torch
from torch.utils.data import DataLoader, Dataset

class Data(Dataset):
    def __init__(self):
        self.augment = torch.nn.Linear(8, 8)  # a model that runs in the worker processes
    def __len__(self):
        return 16
    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        with torch.no_grad():
            x = self.augment(torch.randn(8, generator=g))
        return x, torch.randn(1, generator=g), os.getpid()

if __name__ == "__main__":
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(Data(), batch_size=4, num_workers=2, multiprocessing_context=sys.argv[1])
    pids = set()
    for epoch in range(2):
        for x, y, pid in loader:
            pids.update(pid.tolist())
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print("loss", repr(loss.item()), flush=True)
    print("pids", " ".join(str(p) for p in sorted(pids)), flush=True)
"""


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_workers_started_by_spawn_or_forkserver_are_recorded(
    tmp_path: Path, start_method: str
) -> None:
    # these start methods pickle the loop each worker runs: it must survive that, and report
    plain_dir = tmp_path / "plain"
    plain_dir.mkdir()
    _, plain = run_script(plain_dir, SPAWN_SCRIPT, None, start_method)
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            dataloader_profiling_config=DataloaderProfilingConfig(start_step=0, num_steps=1000),
            python_profiling_config=PythonProfilingConfig(start_step=1, num_steps=1),
        )
    )
    job_dir, result = run_script(tmp_path, SPAWN_SCRIPT, config, start_method)
    assert losses(result) == losses(plain)
    events = read_events(job_dir, "model_timeline.json")
    worker_events = in_phase(events, "DataLoaderWorker")
    assert {e["args"]["pid"] for e in worker_events} == loader_pids(result)
    assert sorted(e["args"]["worker_id"] for e in worker_events) == [0, 0, 1, 1]
    # the training process alone profiles: the worker processes, which start a new interpreter,
    # neither write events nor take its name
    main_pid = next(e for e in events if e["phase"] == "DataLoaderIterInitialize")["args"]["pid"]
    rank_file = job_dir / "profiler-output" / "framework" / "ranks" / "0-algo-1.json"
    assert json.loads(rank_file.read_text())["pid"] == main_pid
    assert {e["args"]["pid"] for e in read_events(job_dir) if "pid" in e["args"]} == {main_pid}
    # nor Python profiles: the training process's own windows only
    profiles = job_dir / "profiler-output" / "framework" / "pytorch" / "cprofile" / "0-algo-1"
    windows = sorted(path.name.split("-", 1)[0] for path in profiles.iterdir())
    assert windows == ["posthookclose", "prestepzero", "train"]


#: batches that say which worker made them, from an iterable dataset whose worker 0 runs out
#: first, or from a map-style one delivered as workers finish (``in_order=False``); prints the
#: worker of every batch, in the order the loop got them
WORKER_IDS_SCRIPT = """
import sys
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

class Uneven(IterableDataset):
    def __iter__(self):
        worker = get_worker_info().id
        for _ in range(8 if worker == 0 else 24):
            yield torch.tensor([worker])

class Slow(Dataset):
    def __len__(self):
        return 40
    def __getitem__(self, i):
        worker = get_worker_info().id
        if worker == 0:
            torch.randn(200, 200) @ torch.randn(200, 200)
        return torch.tensor([worker])

dataset = Uneven() if sys.argv[1] == "iterable" else Slow()
loader = DataLoader(dataset, batch_size=4, num_workers=2, in_order=sys.argv[1] == "iterable")
model = torch.nn.Linear(1, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
workers = []
for batch in loader:
    workers.append(int(batch[0, 0]))
    model(batch.float()).sum().backward()
    optimizer.step()
print("workers", *workers)
"""


@pytest.mark.parametrize("dataset", ["iterable", "out of order"])
def test_every_getnext_names_the_worker_that_made_its_batch(tmp_path: Path, dataset: str) -> None:
    job_dir, result = run_script(tmp_path, WORKER_IDS_SCRIPT, _config(), dataset.split()[0])
    made_by = [int(w) for w in result.stdout.split("workers")[1].split()]
    events = read_events(job_dir, "model_timeline.json")
    getnexts = in_phase(events, "DataLoaderIter")
    assert [e["args"]["worker_id"] for e in getnexts] == made_by


def test_an_older_torch_that_does_not_name_the_worker_gets_it_from_torchs_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # torch before worker_idx was passed to _process_data: wrapping it with that argument
    # would raise into the training loop; the worker of an in-order batch is torch's plan
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from stepscope.collect.session import Session
    from stepscope.collect.torch import dataloader, instrument

    class OlderIterator:
        def _process_data(self, data: object) -> object:
            return data

    assert not dataloader.process_data_is_told_the_worker(OlderIterator)
    monkeypatch.setattr(dataloader, "process_data_is_told_the_worker", lambda cls: False)
    session = Session(_config(), tmp_path / "job" / "profiler-output").start()
    try:
        instrument(session)
        loader = DataLoader(TensorDataset(torch.arange(16.0)), batch_size=2, num_workers=2)
        batches = sum(1 for _ in loader)
    finally:
        session.stop()
    getnexts = [
        e
        for e in read_events(tmp_path / "job", "model_timeline.json")
        if e["phase"] == "DataLoaderIter"
    ]
    assert batches == 8
    assert [e["args"]["worker_id"] for e in getnexts] == [0, 1] * 4
