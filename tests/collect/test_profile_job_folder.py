"""``stepscope.profile()`` without a job folder names a new one that commands can be given."""

from __future__ import annotations

import calendar
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stepscope.cli import main

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
