"""A job's status read from its processes: real ``profile()`` jobs, running, then killed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from stepscope.store import open_job

#: A profiled script that trains until its rank file is written and its open timeline file
#: holds steps, then waits to be killed.
_WAITING = """
import sys, time
from pathlib import Path
import stepscope

job_dir = Path(sys.argv[1])
framework = job_dir / "profiler-output" / "framework"
with stepscope.profile(job_dir=job_dir):
    while not any(framework.glob("ranks/*.json")) or b'"Step' not in b"".join(
        path.read_bytes() for path in framework.glob("*.tmp")
    ):
        with stepscope.step():
            time.sleep(0.01)
    print("ready", flush=True)
    time.sleep(300)
"""
#: A profiled script that loads its model for long before its first step.
_LOADING = """
import sys, time
import stepscope

with stepscope.profile(job_dir=sys.argv[1]):
    print("ready", flush=True)
    time.sleep(300)
"""


@contextmanager
def _profiled(
    job_dir: Path, prefix: Sequence[str] = (), script: str = _WAITING
) -> Iterator[subprocess.Popen[str]]:
    """``script`` run (after ``prefix``) in a session of its own, once it is ready; killed at
    the end."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSCOPE_")}
    with subprocess.Popen(
        [*prefix, sys.executable, "-c", script, str(job_dir)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            assert process.stdout is not None
            assert process.stdout.readline() == "ready\n", "the script never got ready"
            yield process
        finally:
            with suppress(ProcessLookupError):  # killed by the test already
                os.killpg(process.pid, signal.SIGKILL)


def _rank_file(job_dir: Path) -> Path:
    (path,) = (job_dir / "profiler-output" / "framework" / "ranks").glob("*.json")
    return path


def test_a_running_job_stays_running_when_ntp_steps_the_wall_clock(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    with _profiled(job_dir) as process:
        # NTP steps the wall clock an hour: the start time the system now gives the process
        # (its boot time, read from the wall clock, plus its age) is an hour off the recorded one
        rank_file = _rank_file(job_dir)
        record = json.loads(rank_file.read_text())
        record["start_time"] -= 3600
        rank_file.write_text(json.dumps(record))
        assert open_job(job_dir).metadata["status"] == "Running"
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    metadata = open_job(job_dir).metadata
    assert metadata["status"] == "Failed", metadata["status_reason"]


def test_a_job_in_another_container_of_this_host_is_not_judged_by_this_ones_pids(
    tmp_path: Path,
) -> None:
    # a container with the host's name (``--uts=host``) but pids of its own: its pid means
    # another process here, and the job runs all the same
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-Urpf", "true"]).returncode != 0:
        pytest.skip("no unprivileged pid namespaces here")
    job_dir = tmp_path / "job"
    with _profiled(job_dir, [unshare, "-Urpf", "--mount-proc"]):
        assert json.loads(_rank_file(job_dir).read_text())["pid"] != os.getpid()
        assert open_job(job_dir).metadata["status"] == "Running"


def _whole_records(timeline: Path) -> int:
    """The complete duration events of an open timeline file, counted line by line."""
    count = 0
    for line in timeline.read_bytes().split(b"\n")[1:]:
        try:
            record = json.loads(line.removesuffix(b","))
        except ValueError:
            continue  # the torn tail
        count += record.get("ph") == "X"
    return count


def test_what_a_killed_profiled_script_wrote_to_its_open_timeline_stays_readable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    job_dir = tmp_path / "job"
    with _profiled(job_dir) as process:
        os.killpg(process.pid, signal.SIGKILL)  # as the OOM killer would, its timeline open
        process.wait(timeout=30)
    framework = job_dir / "profiler-output" / "framework"
    (timeline,) = framework.glob("*.tmp")
    assert not list(framework.glob("pevents/*/*")), "a timeline file was closed before the kill"
    with timeline.open("ab") as file:
        file.write(b',\n{"name": "Step:ModeKeys.TRAIN", "ph": "X", "ts": 12')  # killed mid-write
    expected = _whole_records(timeline)
    assert expected > 0
    job = open_job(job_dir)
    assert job.metadata["status"] == "Failed"
    with caplog.at_level("WARNING"):
        events = "SELECT count(*) FROM events WHERE source = 'pythontimeline'"
        (count,) = job.connect().execute(events).fetchone()
    assert count == expected
    assert not caplog.records, caplog.text


def test_an_unreadable_job_json_is_read_as_none_alike_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from stepscope.cli import main
    from stepscope.config import ProfilerConfig, job_config_path
    from stepscope.testing import TINY_JOB, generate_job
    from stepscope.ui.discovery import discover_jobs

    job_dir = generate_job(tmp_path / "jobs" / "job", **TINY_JOB)  # ended, with its end marker
    ProfilerConfig().to_file(job_config_path(job_dir))
    (job_dir / "job.json").write_text('{"name": "job", "status": "Runn')  # cut short
    # its status comes from its profiler output alone, as for a folder without job.json
    (listed,) = discover_jobs([tmp_path / "jobs"])
    assert (open_job(job_dir).metadata["status"], listed.status) == ("Completed", "completed")
    assert main(["update", str(job_dir), "--detailed", "7:2"]) == 2
    assert "The job is Completed" in capsys.readouterr().err


def test_a_profiled_script_killed_before_its_first_step_leaves_a_failed_job(
    tmp_path: Path,
) -> None:
    # the OOM killer, while the model loads: no step, no event was written
    job_dir = tmp_path / "job"
    with _profiled(job_dir, script=_LOADING) as process:
        assert open_job(job_dir).metadata["status"] == "Running"
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    metadata = open_job(job_dir).metadata
    assert metadata["status"] == "Failed"
    assert "rank 0" in metadata["status_reason"]
