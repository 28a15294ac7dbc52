"""``stepscope.profile()`` without a job folder names a new one that commands can be given."""

from __future__ import annotations

import calendar
import contextlib
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.collect.torch.torchjob import run_under_stepscope_run

from stepscope.cli import main
from stepscope.config import DetailedProfilingConfig, FrameworkProfile, ProfilerConfig

CODE = "import stepscope\nwith stepscope.profile():\n    pass\n"


@pytest.mark.parametrize("source", ["-c", "stdin"])
def test_code_without_a_script_file_gets_a_folder_that_is_no_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSCOPE_")}
    argv = [sys.executable, "-c", CODE] if source == "-c" else [sys.executable, "-"]
    subprocess.run(
        argv,
        input=None if source == "-c" else CODE,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    [job] = (tmp_path / "stepscope-jobs").iterdir()
    assert job.name.startswith("python-")
    monkeypatch.chdir(job.parent)
    assert main(["rules", job.name, "--rule", "MaxInitializationTime"]) == 0


KILLED = """
import os, signal, sys
from pathlib import Path
import torch
import stepscope

job_dir = Path(sys.argv[1])
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with stepscope.profile(job_dir=job_dir):
    for step in range(100_000):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if any((job_dir / "profiler-output" / "framework").glob("*.tmp")):  # events written
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would, mid-training
"""


def test_a_profiled_script_killed_mid_training_leaves_a_failed_job(tmp_path: Path) -> None:
    from stepscope.store import open_job
    from stepscope.ui.discovery import discover_jobs

    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSCOPE_")}
    job_dir = tmp_path / "jobs" / "killed"
    result = subprocess.run(
        [sys.executable, "-c", KILLED, str(job_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == -signal.SIGKILL, result.stderr
    metadata = open_job(job_dir).metadata
    assert metadata["status"] == "Failed"
    assert "rank 0" in metadata["status_reason"]
    assert [entry.status for entry in discover_jobs([tmp_path / "jobs"])] == ["failed"]


@pytest.mark.parametrize("how", ["profile", "run"])
def test_a_new_job_folder_is_named_by_its_start_in_utc(tmp_path: Path, how: str) -> None:
    # on a machine 13:45 h ahead of UTC, the folder's time agrees with the start every page gives
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSCOPE_")}
    env["TZ"] = "Pacific/Chatham"
    script = [sys.executable, "-c", CODE]
    argv = script if how == "profile" else [sys.executable, "-m", "stepscope", "run", *script]
    before_s = int(time.time())
    subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, timeout=240, check=True)
    after_s = time.time()
    [job] = (tmp_path / "stepscope-jobs").iterdir()
    stamp = "-".join(job.name.split("-")[-2:])
    named_s = calendar.timegm(time.strptime(stamp, "%Y%m%d-%H%M%S"))
    assert before_s <= named_s <= after_s


#: steps marked by the script; after its second it waits for the test to change its
#: configuration, then lets a configuration poll's interval pass, so that the next step's end
#: reads the file again
LIVE = """
import sys, time
from pathlib import Path
import torch
import stepscope
from stepscope.collect.session import CONFIG_POLL_INTERVAL_S
from stepscope.config import DetailedProfilingConfig, FrameworkProfile, ProfilerConfig

job_dir = Path(sys.argv[1])
ready, go = job_dir.parent / "ready", job_dir.parent / "go"
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
detailed_later = DetailedProfilingConfig(start_step=100, num_steps=1)
config = ProfilerConfig(framework_profile_params=FrameworkProfile(detailed_profiling_config=detailed_later))
with stepscope.profile(config, job_dir=job_dir):
    for step in range(10):
        with stepscope.step():
            loss = model(torch.randn(4, 8)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if step == 1:
            ready.touch()
            deadline = time.monotonic() + 120
            while not go.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(CONFIG_POLL_INTERVAL_S)
"""


@contextlib.contextmanager
def _waiting_script(tmp_path: Path, job_dir: Path, **env: str) -> Iterator[None]:
    """:data:`LIVE` running into ``job_dir``, waiting after its second step for the block to
    end; it then runs to its end, successfully."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("STEPSCOPE_")}
    script = subprocess.Popen(
        [sys.executable, "-c", LIVE, str(job_dir)],
        env={**environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while not (tmp_path / "ready").exists() and script.poll() is None:
            time.sleep(0.05)
        assert script.poll() is None, script.communicate()[1]
        yield
        (tmp_path / "go").touch()
        _, stderr = script.communicate(timeout=120)
    finally:
        script.kill()
        script.communicate()
    assert script.returncode == 0, stderr


def test_update_opens_a_detailed_window_in_a_running_profile_block(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job_dir = tmp_path / "job"
    with _waiting_script(tmp_path, job_dir):
        assert main(["update", str(job_dir), "--detailed", "5:3"]) == 0
        assert "step 100 -> steps 5-7" in capsys.readouterr().out
    [trace] = (job_dir / "profiler-output").rglob("*.pt.trace.json.gz")
    metadata = json.loads(gzip.decompress(trace.read_bytes()))["stepscope"]
    assert (metadata["first_step"], metadata["last_step"]) == (5, 7)
    # ended, the job has no process to read a change: refused, its file left as it was
    config_file = job_dir / "profiler-config.json"
    before = config_file.read_bytes()
    assert main(["update", str(job_dir), "--detailed", "8:1"]) == 2
    assert "The job is Completed" in capsys.readouterr().err
    assert config_file.read_bytes() == before


def test_a_rank_starting_late_follows_the_configuration_as_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import stepscope

    job_dir = tmp_path / "job"
    config_file = job_dir / "profiler-config.json"
    ranks = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    with _waiting_script(tmp_path, job_dir, RANK="0", LOCAL_RANK="0", **ranks):
        assert main(["update", str(job_dir), "--detailed", "5:3"]) == 0
        changed = config_file.read_bytes()
        # torchrun's rank 1, done loading its model, enters profile() with the script's config
        for name, value in {"RANK": "1", "LOCAL_RANK": "1", **ranks}.items():
            monkeypatch.setenv(name, value)
        with stepscope.profile(job_dir=job_dir) as session:
            assert session is not None
            assert session.config == ProfilerConfig.from_file(config_file)
            framework = session.config.framework_profile_params
            assert framework is not None
            detailed = framework.effective_config("detailed")
            assert detailed is not None
            assert (detailed.start_step, detailed.num_steps) == (5, 3)
        assert config_file.read_bytes() == changed


def test_a_new_run_in_the_folder_replaces_the_configuration_of_the_last(tmp_path: Path) -> None:
    import stepscope

    job_dir = tmp_path / "job"
    for start in (3, 8):  # a notebook cell run again with another window
        detailed = DetailedProfilingConfig(start_step=start, num_steps=1)
        config = ProfilerConfig(
            framework_profile_params=FrameworkProfile(detailed_profiling_config=detailed)
        )
        with stepscope.profile(config, job_dir=job_dir):
            pass
        assert ProfilerConfig.from_file(job_dir / "profiler-config.json") == config


TRAINED_IN_A_BLOCK = """
import torch, stepscope
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with stepscope.profile() as session:
    print("profiled:", session is not None)
    for _ in range(6):
        optimizer.zero_grad()
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
"""


@pytest.mark.parametrize(
    ("run_config", "steps"),
    [({"system_monitor_interval_millis": 500}, 6), ({"disable_profiler": True}, 0)],
    ids=["system-only", "disabled"],
)
def test_a_profile_block_under_a_run_that_profiles_no_framework_stays_in_the_run(
    tmp_path: Path, run_config: dict[str, object], steps: int
) -> None:
    # The ranks of such a run have no session, and profile() started one of its own, in
    # ./stepscope-jobs/<script>-<time> with a second system monitor: the run's folder (its
    # report, its UI) held no framework data, and a disabled run was profiled all the same.
    result = run_under_stepscope_run(tmp_path, TRAINED_IN_A_BLOCK, run_config)
    assert f"profiled: {steps > 0}" in result.stdout
    assert not (tmp_path / "stepscope-jobs").exists()
    assert _step_names(tmp_path / "job").count("Step:ModeKeys.TRAIN") == steps


def test_a_profile_block_under_a_run_says_that_its_config_and_folder_are_not_used(
    tmp_path: Path,
) -> None:
    # the block joins the run's session: its detailed step 2 and its folder were dropped silently
    block = "stepscope.profile(config, job_dir='elsewhere')"
    source = TRAINED_IN_A_BLOCK.replace("stepscope.profile()", block).replace(
        "with ",
        "from stepscope import DetailedProfilingConfig, FrameworkProfile, ProfilerConfig\n"
        "detailed = DetailedProfilingConfig(start_step=2, num_steps=1)\n"
        "config = ProfilerConfig(\n"
        "    framework_profile_params=FrameworkProfile(detailed_profiling_config=detailed)\n"
        ")\n"
        "with ",
    )
    result = run_under_stepscope_run(tmp_path, source, {"framework_profile_params": {}})
    assert "profiled: True" in result.stdout
    assert not (tmp_path / "elsewhere").exists()
    assert "the config and job_dir given to profile() are not used" in result.stderr
    assert str(tmp_path / "job" / "profiler-output") in result.stderr
    assert _step_names(tmp_path / "job").count("Step:ModeKeys.TRAIN") == 6


def _step_names(job_dir: Path) -> list[str | None]:
    timelines = (job_dir / "profiler-output").glob("framework/pevents/*/*.json")
    return [event.get("name") for path in timelines for event in json.loads(path.read_text())]


UNWRITABLE = """
import logging, sys
import torch
import stepscope
from stepscope.config import FrameworkProfile, ProfilerConfig

logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
how, folder = sys.argv[1:]
given = (
    {"job_dir": folder}
    if how == "job_dir"
    else {"config": ProfilerConfig(framework_profile_params=FrameworkProfile(local_path=folder))}
)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with stepscope.profile(**given) as session:
    for step in range(5):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
print("trained", session)
"""


@pytest.mark.parametrize(
    ("how", "where"),
    [("job_dir", "through a file"), ("local_path", "through a file"), ("local_path", "read-only")],
)
def test_a_folder_that_cannot_be_written_costs_one_warning_and_an_unprofiled_run(
    tmp_path: Path, how: str, where: str
) -> None:
    if where == "read-only":
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
    else:
        (tmp_path / "a-file").write_text("x")
        folder = tmp_path / "a-file" / "job"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSCOPE_")}
    done = subprocess.run(
        [sys.executable, "-c", UNWRITABLE, how, str(folder)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "trained None"
    [warning] = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    assert str(folder) in warning
    assert "unprofiled" in warning
    assert "Traceback" not in done.stderr
    if where == "read-only":
        assert list(folder.iterdir()) == []
