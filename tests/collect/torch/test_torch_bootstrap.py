"""The bootstrap: ``stepscope run``'s environment profiles a script that does not know about us."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest
from tests.collect.torch.torchjob import TRAIN_SCRIPT, profiled_env, read_events, run_script, steps

from stepscope.collect.bootstrap import BOOTSTRAP_DIR
from stepscope.config import DetailedProfilingConfig, FrameworkProfile, ProfilerConfig

QUIET = ProfilerConfig(
    framework_profile_params=FrameworkProfile(
        detailed_profiling_config=DetailedProfilingConfig(start_step=10_000, num_steps=1)
    )
)


def _run(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT)
    return subprocess.run(
        [sys.executable, str(script), *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_users_own_sitecustomize_still_runs(tmp_path: Path) -> None:
    own = tmp_path / "own-site"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = 'yes'\n")
    env = profiled_env(tmp_path / "job", QUIET)
    env["PYTHONPATH"] += os.pathsep + str(own)
    script = tmp_path / "train.py"
    script.write_text(
        TRAIN_SCRIPT + "\nimport os\nprint('user site', os.environ.get('USER_SITE_RAN'))\n"
    )
    result = subprocess.run(
        [sys.executable, str(script), "--steps", "3"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "user site yes" in result.stdout
    assert len(steps(read_events(tmp_path / "job"))) == 3


def test_a_bad_configuration_warns_and_the_script_runs_unprofiled(tmp_path: Path) -> None:
    env = profiled_env(tmp_path / "job", QUIET)
    Path(env["STEPSCOPE_CONFIG"]).write_text('{"framework_profile_params": {"num_steps": -3}}')
    result = _run(tmp_path, env, "--steps", "2")
    assert result.returncode == 0, result.stderr
    assert "not profiling this process" in result.stderr
    assert result.stdout.count("loss ") == 2
    assert not (tmp_path / "job" / "profiler-output").exists()


def test_a_disabled_profiler_records_nothing(tmp_path: Path) -> None:
    config = ProfilerConfig(framework_profile_params=FrameworkProfile(), disable_profiler=True)
    env = profiled_env(tmp_path / "job", config)
    result = _run(tmp_path, env, "--steps", "2")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "job" / "profiler-output").exists()


#: Trains two steps, and between them has a pool of workers started by ``spawn`` (a
#: ``multiprocessing`` pool and a ``concurrent.futures`` one) run a model's training forward and
#: backward; the pools end gracefully, so a worker's files would be written
POOL_SCRIPT = """
import concurrent.futures, multiprocessing
import torch

def work(seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 1)
    model(torch.randn(2, 4)).sum().backward()
    return seed

def train_step(model, optimizer):
    loss = model(torch.randn(2, 4)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

if __name__ == "__main__":
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train_step(model, optimizer)
    spawn = multiprocessing.get_context("spawn")
    with spawn.Pool(1) as pool:
        assert pool.map(work, range(3)) == [0, 1, 2]
        pool.close()
        pool.join()
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as executor:
        assert list(executor.map(work, range(3))) == [0, 1, 2]
    train_step(model, optimizer)
"""


def test_pool_workers_the_script_spawns_profile_nothing(tmp_path: Path) -> None:
    # they are helpers of the script, not ranks: before, each wrote a pre-step-zero profile and
    # its training steps under the script's own name
    job_dir, _ = run_script(
        tmp_path, POOL_SCRIPT, ProfilerConfig(framework_profile_params=FrameworkProfile())
    )
    assert [e["args"]["step_num"] for e in steps(read_events(job_dir))] == ["0", "1"]
    cprofile = job_dir / "profiler-output" / "framework" / "pytorch" / "cprofile" / "0-algo-1"
    windows = sorted(p.name.split("-", 1)[0] for p in cprofile.iterdir())
    assert windows == ["posthookclose", "prestepzero"]


#: Trains on a thread of its own, which the main thread starts and does not wait for
THREAD_SCRIPT = """
import threading
import torch

def train():
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(12):
        optimizer.zero_grad()
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()

threading.Thread(target=train).start()
"""


def test_a_loop_on_a_thread_the_main_thread_does_not_wait_for_keeps_its_steps(
    tmp_path: Path,
) -> None:
    # the session stopped as the main thread ended, before Python joined the training thread,
    # so none of its steps were recorded
    job_dir, _ = run_script(tmp_path, THREAD_SCRIPT, QUIET)
    assert [e["args"]["step_num"] for e in steps(read_events(job_dir))] == [
        str(n) for n in range(12)
    ]


def test_a_python_without_stepscope_says_which_one_and_runs_unprofiled(tmp_path: Path) -> None:
    # it said only "not profiling this process (No module named 'stepscope')", which named
    # neither the interpreter the command ran (often another environment's) nor what to do
    venv.create(tmp_path / "other-env", with_pip=False)
    other_python = tmp_path / "other-env" / "bin" / "python"
    env = profiled_env(tmp_path / "job", QUIET, PYTHONPATH=str(BOOTSTRAP_DIR))
    result = subprocess.run(
        [str(other_python), "-c", "print('trained')"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "trained\n"
    assert result.stderr == (
        f"stepscope: not profiling this process: {other_python} cannot import stepscope "
        "(No module named 'stepscope'); install stepscope where the command's Python finds it\n"
    )


def _cprofile_windows(job_dir: Path) -> list[str]:
    cprofile = job_dir / "profiler-output" / "framework" / "pytorch" / "cprofile" / "0-algo-1"
    return sorted(p.name.split("-", 1)[0] for p in cprofile.iterdir())


#: Trains two steps, has a Python process of its own train three (an evaluation script, say),
#: then trains two more
SUBPROCESS_SCRIPT = """
import subprocess, sys
import torch

def train_steps(count):
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(count):
        loss = model(torch.randn(2, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

if __name__ == "__main__":
    if sys.argv[1:] == ["--helper"]:
        train_steps(3)
    else:
        train_steps(2)
        subprocess.run([sys.executable, __file__, "--helper"], check=True)
        train_steps(2)
"""


def test_a_python_process_the_training_script_starts_is_not_profiled_as_its_rank(
    tmp_path: Path,
) -> None:
    # it recorded its steps and its Python profiles under the script's name, as rank 0's
    job_dir, result = run_script(
        tmp_path, SUBPROCESS_SCRIPT, ProfilerConfig(framework_profile_params=FrameworkProfile())
    )
    assert result.returncode == 0, result.stderr
    assert [e["args"]["step_num"] for e in steps(read_events(job_dir))] == ["0", "1", "2", "3"]
    assert len({e["args"]["pid"] for e in read_events(job_dir)}) == 1
    assert _cprofile_windows(job_dir) == ["posthookclose", "prestepzero"]


def test_a_script_a_wrapper_starts_before_it_trains_is_profiled(tmp_path: Path) -> None:
    # the wrapper records nothing, so the script it starts is the one that trains
    (tmp_path / "trainer.py").write_text(textwrap.dedent(SUBPROCESS_SCRIPT))
    wrapper = "import subprocess, sys\nsubprocess.run([sys.executable, 'trainer.py', '--helper'], check=True)\n"
    job_dir, result = run_script(
        tmp_path, wrapper, ProfilerConfig(framework_profile_params=FrameworkProfile())
    )
    assert result.returncode == 0, result.stderr
    assert [e["args"]["step_num"] for e in steps(read_events(job_dir))] == ["0", "1", "2"]


def test_accelerate_launch_profiles_the_script_it_starts_and_not_itself(tmp_path: Path) -> None:
    # accelerate's own process wrote a pre-step-zero profile of its whole life beside the
    # script's, under the same name
    pytest.importorskip("accelerate")
    launcher = ("-m", "accelerate.commands.launch", "--cpu", "--num_processes", "1")
    job_dir, result = run_script(
        tmp_path,
        SUBPROCESS_SCRIPT,
        ProfilerConfig(framework_profile_params=FrameworkProfile()),
        "--helper",
        launcher=launcher,
    )
    assert result.returncode == 0, result.stderr
    assert [e["args"]["step_num"] for e in steps(read_events(job_dir))] == ["0", "1", "2"]
    assert _cprofile_windows(job_dir) == ["posthookclose", "prestepzero"]
