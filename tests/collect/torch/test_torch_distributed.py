"""A real two-rank torchrun (gloo) job: both ranks instrument themselves and align their clocks."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from tests.collect.torch.torchjob import in_phase, read_events, run_script, steps
from tests.servers import free_port

from stepscope.config import (
    DataloaderProfilingConfig,
    FrameworkProfile,
    ProfilerConfig,
    PythonProfilingConfig,
    SMDataParallelProfilingConfig,
)
from stepscope.store import open_job

DDP_SCRIPT = """
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.utils.data.TensorDataset(torch.randn(32, 8), torch.randn(32, 1))
sampler = torch.utils.data.distributed.DistributedSampler(data, shuffle=False)
loader = torch.utils.data.DataLoader(data, batch_size=4, sampler=sampler, num_workers=1)
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    total = loss.detach().clone()
    dist.all_reduce(total)
    work = dist.all_reduce(total.clone(), async_op=True)
    work.wait()
dist.barrier()
del model, optimizer, work  # before the group ends: see DDP_LOSS_SCRIPT
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_two_ranks_write_their_steps_collectives_and_clock_offsets(tmp_path: Path) -> None:
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(
            smdataparallel_profiling_config=SMDataParallelProfilingConfig(
                start_step=0, num_steps=100
            ),
            dataloader_profiling_config=DataloaderProfilingConfig(start_step=0, num_steps=100),
            python_profiling_config=PythonProfilingConfig(start_step=1, num_steps=1),
        )
    )
    launcher = ("-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2")
    job_dir, _ = run_script(tmp_path, DDP_SCRIPT, config, launcher=launcher, timeout_s=240)
    ranks_dir = job_dir / "profiler-output" / "framework" / "ranks"
    ranks = {p.stem: json.loads(p.read_text()) for p in ranks_dir.glob("*.json")}
    assert sorted(ranks) == ["0-algo-1", "1-algo-1"]
    for node_id, info in ranks.items():
        assert (info["node_id"], info["world_size"], info["node"]) == (node_id, 2, "algo-1")
        assert isinstance(info["clock_offset_us"], float)
    assert ranks["0-algo-1"]["clock_offset_us"] == 0.0
    assert ranks["0-algo-1"]["pid"] != ranks["1-algo-1"]["pid"]
    events = read_events(job_dir)
    for node_id in ranks:
        mine = [e for e in events if e["node_id"] == node_id]
        # 32 samples over 2 ranks in batches of 4: 4 steps each
        assert [e["args"]["step_num"] for e in steps(mine)] == ["0", "1", "2", "3"]
        collectives = in_phase(mine, "Collective")
        reduces = [e for e in collectives if e["name"] == "all_reduce"]
        assert len(reduces) == 8
        assert {e["args"]["bytes"] for e in reduces} == {4}  # one float32
        assert {e["args"]["dtype"] for e in reduces} == {"float32"}
        assert sorted(e["args"]["async_op"] for e in reduces) == [False] * 4 + [True] * 4
        assert [e["name"] for e in collectives if e["name"] == "barrier"] == ["barrier"]
        assert all(e["end_us"] >= e["start_us"] for e in collectives)
    # data-loader workers carry their rank's node id (they report through their rank)
    loader_events = read_events(job_dir, "model_timeline.json")
    for node_id, info in ranks.items():
        workers = [
            e for e in loader_events if e["node_id"] == node_id and e["phase"] == "DataLoaderWorker"
        ]
        assert len(workers) == 1 and workers[0]["args"]["pid"] != info["pid"]
        getnexts = [
            e for e in loader_events if e["node_id"] == node_id and e["phase"] == "DataLoaderIter"
        ]
        assert len(getnexts) == 4 and {e["args"]["pid"] for e in getnexts} == {info["pid"]}
    # each rank profiles its own Python; torchrun's launcher process profiles nothing
    cprofile = job_dir / "profiler-output" / "framework" / "pytorch" / "cprofile"
    assert sorted(p.name for p in cprofile.iterdir()) == sorted(ranks)
    for node_id in ranks:
        windows = sorted(p.name.split("-", 1)[0] for p in (cprofile / node_id).iterdir())
        assert windows == ["posthookclose", "prestepzero", "train"]


#: DDP on two torchrun ranks, each printing the loss summed over the ranks at every step
DDP_LOSS_SCRIPT = """
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.Generator().manual_seed(rank)
for _ in range(4):
    x, y = torch.randn(4, 8, generator=data), torch.randn(4, 1, generator=data)
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    total = loss.detach().clone()
    dist.all_reduce(total)
    # one write per line: the ranks share the pipe, and a line written in parts could interleave
    os.write(1, f"rank {rank} loss {total.item()!r}\\n".encode())
# DDP's reducer holds the gloo group: with the model alive, the group outlives
# destroy_process_group and is torn down during the interpreter's exit, which aborts the rank now
# and then ("terminate called without an active exception"), unprofiled too (pytorch/pytorch#75097).
# Freeing the model first ends the group inside destroy_process_group.
del model, optimizer
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_rank_without_stepscope_trains_as_it_would_unprofiled(tmp_path: Path) -> None:
    # Rank 0 measured its clock offset with barriers and gathers that rank 1, not profiled,
    # matched with DDP's own collectives: the job hung.
    wrapper = tmp_path / "rank.sh"
    wrapper.write_text(
        "#!/bin/sh\n"
        'if [ "$LOCAL_RANK" = 1 ]; then unset STEPSCOPE_JOB_DIR; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    torchrun = ("-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2")
    config = ProfilerConfig(framework_profile_params=FrameworkProfile())
    job_dir, profiled = run_script(
        tmp_path, DDP_LOSS_SCRIPT, config, launcher=(*torchrun, "--no-python", str(wrapper))
    )
    _, unprofiled = run_script(tmp_path, DDP_LOSS_SCRIPT, None, launcher=torchrun)
    losses = sorted(line for line in unprofiled.stdout.splitlines() if " loss " in line)
    assert len(losses) == 8
    assert sorted(line for line in profiled.stdout.splitlines() if " loss " in line) == losses
    assert "clock offsets to rank 0 are not measured" in profiled.stderr
    ranks_dir = job_dir / "profiler-output" / "framework" / "ranks"
    assert [p.stem for p in ranks_dir.glob("*.json")] == ["0-algo-1"]


#: PyTorch's DDP tutorial pattern: the script spawns its ranks with ``torch.multiprocessing``,
#: which start without torchrun's ``RANK``; each prints its pid as ``rank <r> pid <pid>``
SPAWN_DDP_SCRIPT = """
import os, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

#: The DDP models, kept to the rank's end: freed when main returns, DDP's reducer destroys the
#: gloo process group it still holds, and that destructor hangs now and then (unprofiled too:
#: pytorch/pytorch#75097). A spawned rank leaves through os._exit, which frees nothing.
MODELS = []

def main(rank, world_size, rendezvous):
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=world_size)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    MODELS.append(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(3):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dist.barrier()
    dist.destroy_process_group()
    os.write(1, f"rank {rank} pid {os.getpid()}\\n".encode())  # one write: the ranks share stdout

if __name__ == "__main__":
    mp.spawn(main, args=(2, f"tcp://127.0.0.1:{sys.argv[1]}"), nprocs=2)
"""


@pytest.mark.slow
def test_ranks_spawned_by_the_script_take_the_rank_their_process_group_gives(
    tmp_path: Path,
) -> None:
    config = ProfilerConfig(framework_profile_params=FrameworkProfile())
    job_dir, result = run_script(tmp_path, SPAWN_DDP_SCRIPT, config, str(free_port()))
    pids = {
        f"{rank}-algo-1": int(pid)
        for rank, pid in re.findall(r"rank (\d) pid (\d+)", result.stdout)
    }
    ranks_dir = job_dir / "profiler-output" / "framework" / "ranks"
    ranks = {p.stem: json.loads(p.read_text()) for p in ranks_dir.glob("*.json")}
    assert sorted(ranks) == ["0-algo-1", "1-algo-1"]
    assert {node_id: info["pid"] for node_id, info in ranks.items()} == pids
    assert {info["world_size"] for info in ranks.values()} == {2}
    events = read_events(job_dir)
    for node_id in ranks:
        mine = [e for e in events if e["node_id"] == node_id]
        assert [e["args"]["step_num"] for e in steps(mine)] == ["0", "1", "2"]
    # the script's own process only waits for its ranks: like torchrun's launcher, it profiles
    # nothing (before, it wrote a second pre-step-zero profile under rank 0's name)
    cprofile = job_dir / "profiler-output" / "framework" / "pytorch" / "cprofile"
    for node_id in ranks:
        windows = sorted(p.name.split("-", 1)[0] for p in (cprofile / node_id).iterdir())
        assert windows == ["posthookclose", "prestepzero"]


#: The same pattern profiled with the explicit API: each rank enters ``stepscope.profile()``
#: once its process group is up, with no ``RANK`` in its environment
SPAWN_PROFILE_SCRIPT = """
import os, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import stepscope

def main(rank, world_size, rendezvous, job_dir):
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=world_size)
    with stepscope.profile(job_dir=job_dir):
        model = torch.nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        for _ in range(3):
            model(torch.randn(4, 8)).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(main, args=(2, f"tcp://127.0.0.1:{sys.argv[1]}", sys.argv[2]), nprocs=2)
"""


@pytest.mark.slow
def test_profile_in_ranks_spawned_by_the_script_writes_each_rank_under_its_own_name(
    tmp_path: Path,
) -> None:
    job_dir = tmp_path / "explicit"
    run_script(tmp_path, SPAWN_PROFILE_SCRIPT, None, str(free_port()), str(job_dir))
    ranks_dir = job_dir / "profiler-output" / "framework" / "ranks"
    ranks = {p.stem: json.loads(p.read_text()) for p in ranks_dir.glob("*.json")}
    assert sorted(ranks) == ["0-algo-1", "1-algo-1"]
    assert {info["world_size"] for info in ranks.values()} == {2}
    # the sessions began after their process group: rank 1's offset was never measured, and
    # its rank file used to say 0.0 as if it had been
    assert ranks["0-algo-1"]["clock_offset_us"] == 0.0
    assert ranks["1-algo-1"]["clock_offset_us"] is None
    # the backend of a group that was up before profiling began is known all the same
    assert {info.get("backend") for info in ranks.values()} == {"gloo"}
    events = read_events(job_dir)
    for node_id in ranks:
        mine = [e for e in events if e["node_id"] == node_id]
        assert [e["args"]["step_num"] for e in steps(mine)] == ["0", "1", "2"]


@pytest.mark.slow
def test_ranks_that_profile_before_their_process_group_is_up_name_their_own_rank_files(
    tmp_path: Path,
) -> None:
    # each rank's file is written as profile() starts, as rank 0 (no RANK in the environment),
    # and moves to its rank's name once the process group gives one
    script = SPAWN_PROFILE_SCRIPT.replace(
        '    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=world_size)\n'
        "    with stepscope.profile(job_dir=job_dir):\n",
        "    with stepscope.profile(job_dir=job_dir):\n"
        '        dist.init_process_group("gloo", init_method=rendezvous, rank=rank, '
        "world_size=world_size)\n",
    )
    assert script != SPAWN_PROFILE_SCRIPT
    job_dir = tmp_path / "explicit"
    run_script(tmp_path, script, None, str(free_port()), str(job_dir))
    ranks_dir = job_dir / "profiler-output" / "framework" / "ranks"
    ranks = {p.stem: json.loads(p.read_text()) for p in ranks_dir.glob("*.json")}
    assert sorted(ranks) == ["0-algo-1", "1-algo-1"]
    assert [(info["rank"], info["world_size"]) for _, info in sorted(ranks.items())] == [
        (0, 2),
        (1, 2),
    ]
    assert ranks["0-algo-1"]["pid"] != ranks["1-algo-1"]["pid"]
    assert open_job(job_dir).metadata["status"] == "Completed"


#: Two torchrun ranks each profiling with ``stepscope.profile()``; rank 0 leaves its block first
#: and says whether the job already read as ended while rank 1 was still in its own
TORCHRUN_PROFILE_SCRIPT = """
import sys
import torch
import torch.distributed as dist
import stepscope
from stepscope.store import open_job

job_dir = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()
with stepscope.profile(job_dir=job_dir):
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(3):
        model(torch.randn(4, 8)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    if rank == 1:
        dist.barrier()  # until rank 0 has left its block
if rank == 0:
    print("status after rank 0 ended", open_job(job_dir).metadata["status"])
    dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_job_of_two_ranks_profiling_themselves_ends_when_both_have(tmp_path: Path) -> None:
    # Nothing marked the end of a job profile() wrote: it read as "Running" forever.
    job_dir = tmp_path / "explicit"
    launcher = ("-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2")
    _, result = run_script(
        tmp_path, TORCHRUN_PROFILE_SCRIPT, None, str(job_dir), launcher=launcher, timeout_s=240
    )
    assert "status after rank 0 ended Running" in result.stdout
    metadata = open_job(job_dir).metadata
    assert (metadata["status"], metadata["ended"]) == ("Completed", True)
    assert sorted(metadata["ranks"]) == [0, 1]
