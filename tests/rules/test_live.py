"""The live engine: a separate process that follows a job as its files appear, then finishes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from stepscope.errors import ConfigError
from stepscope.rules import rule_configs, run_rules, start_rule_engine
from stepscope.store.layout import job_end_marker_paths
from stepscope.testing import generate_job

RULES = [rule_configs.ProfilerReport(scan_interval_us=1_000_000, StepOutlier_n_outliers=0)]


def wait_for(predicate, timeout_s: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def status(job: Path, rule: str) -> dict:
    try:
        return json.loads((job / "rule-output" / rule / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def files_by_close_time(output: Path) -> list[Path]:
    """The job's raw files in the order their writers closed them, as a live job produces them.

    A system file is named after its minute and closed at its end; a framework file is named
    after its last event's end.
    """
    closed = [
        (int(p.name.split(".")[0]) + 60.0, p) for p in (output / "system").rglob("*.algo-*.json")
    ]
    closed += [
        (int(p.name.split("_")[0]) / 1e6, p) for p in (output / "framework").rglob("*_*.json")
    ]
    return [path for _, path in sorted(closed)]


def publish(source_root: Path, target_root: Path, path: Path) -> None:
    """Copy one raw file into the live job atomically, as a closing writer would."""
    target = target_root / path.relative_to(source_root)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target_root.parent / f".{path.name}.partial"
    shutil.copyfile(path, temporary)
    os.replace(temporary, target)


@pytest.mark.timeout(300)
def test_live_engine_follows_a_job_and_agrees_with_the_offline_run(tmp_path):
    recorded = generate_job(
        tmp_path / "recorded", minutes=4, gpus=2, cpus=4, dataloader_starved=True
    )
    live = tmp_path / "live"
    (live / "profiler-output").mkdir(parents=True)
    shutil.copyfile(recorded / "job.json", live / "job.json")
    files = files_by_close_time(recorded / "profiler-output")
    first = files[: len(files) * 3 // 4]

    handle = start_rule_engine(live, RULES, report_hook=None)
    try:
        # three of four minutes: more than the two minutes the live scans stay behind
        for path in first:
            publish(recorded / "profiler-output", live / "profiler-output", path)
        assert wait_for(lambda: status(live, "StepOutlier").get("datapoints", 0) > 0)
        early = status(live, "ProfilerReport")
        assert early["status"] in ("InProgress", "IssuesFound")
        for path in files[len(first) :]:
            publish(recorded / "profiler-output", live / "profiler-output", path)
        (live / "profiler-output" / "training_job_end.ts").touch()
        assert handle.finish(timeout_s=120)
    finally:
        handle.stop()
    assert not handle.is_alive()

    offline = run_rules(recorded, RULES, output_dir=tmp_path / "offline")
    for name, result in offline.items():
        seen = status(live, name)
        assert seen["status"] == result.status, name
        assert (seen["violations"], seen["datapoints"]) == (result.violations, result.datapoints), (
            name
        )
    # the starved loader keeps the CPUs busy while the GPUs wait
    assert status(live, "CPUBottleneck")["status"] == "IssuesFound"


def test_finish_on_a_finished_job_makes_the_final_pass_and_writes_the_report(tmp_path):
    job = generate_job(tmp_path / "done", minutes=2, gpus=1, cpus=4)
    handle = start_rule_engine(job, ["StepOutlier"])
    assert handle.finish(timeout_s=120)
    assert status(job, "StepOutlier")["status"] in ("NoIssuesFound", "IssuesFound")
    report = job / "rule-output" / "profiler-report.html"
    assert 'id="rule-StepOutlier"' in report.read_text()


def test_finish_without_the_report_makes_the_final_pass_and_leaves_the_report_to_its_caller(
    tmp_path,
):
    # stepscope run writes the last report itself, once it has recorded the job's end
    job = generate_job(tmp_path / "running", minutes=2, gpus=1, cpus=4)
    for marker in job_end_marker_paths(job / "profiler-output"):
        marker.unlink(missing_ok=True)
    handle = start_rule_engine(job, ["StepOutlier"], scan_interval_us=3_600_000_000)
    assert handle.finish(timeout_s=120, report=False)
    assert status(job, "StepOutlier")["status"] in ("NoIssuesFound", "IssuesFound")
    assert not (job / "rule-output" / "profiler-report.html").exists()


def test_a_report_that_cannot_be_written_is_one_line_in_the_terminal(tmp_path, capfd):
    # a full disk or an unwritable folder while the job trains: no traceback in the user's way
    job = generate_job(tmp_path / "done", minutes=2, gpus=1, cpus=4)
    (job / "rule-output" / "profiler-report.html").mkdir(parents=True)
    handle = start_rule_engine(job, ["StepOutlier"])
    assert handle.finish(timeout_s=120)
    err = capfd.readouterr().err
    assert "the profiling report could not be updated: [Errno" in err
    assert "profiler-report.html" in err and "Traceback" not in err
    assert status(job, "StepOutlier")["status"] in ("NoIssuesFound", "IssuesFound")


def test_results_that_cannot_be_written_are_one_line_in_the_terminal(tmp_path, capfd):
    job = generate_job(tmp_path / "done", minutes=2, gpus=1, cpus=4)
    (job / "rule-output" / "StepOutlier" / "status.json").mkdir(parents=True)
    handle = start_rule_engine(job, ["StepOutlier"], report_hook=None)
    assert not handle.finish(timeout_s=120)  # the final pass could not write its verdicts
    err = capfd.readouterr().err
    assert "the rules' final pass failed: [Errno" in err and "status.json" in err
    assert "Traceback" not in err


def test_a_ctrl_c_leaves_the_engine_to_its_final_pass(tmp_path):
    # a terminal's Ctrl-C reaches every process of the group, the engine included, at any moment
    job = generate_job(tmp_path / "interrupted", minutes=2, gpus=1, cpus=4)
    handle = start_rule_engine(job, ["StepOutlier"], report_hook=None)
    assert handle.pid is not None
    os.kill(handle.pid, signal.SIGINT)  # while it is still starting up
    time.sleep(0.5)
    os.kill(handle.pid, signal.SIGINT)
    assert handle.finish(timeout_s=120)
    assert status(job, "StepOutlier")["status"] in ("NoIssuesFound", "IssuesFound")


def test_bad_rules_fail_before_the_process_starts(tmp_path):
    with pytest.raises(ValueError):
        start_rule_engine(tmp_path, [rule_configs.ProfilerReport(CPUBottleneck_patience=-1)])


@pytest.mark.parametrize("interval", [10, 0, -5, "soon"])
def test_a_scan_interval_the_rules_would_refuse_fails_before_the_process_starts(tmp_path, interval):
    # 10 µs made the engine poll without pause; 0 fell back to the default unsaid
    with pytest.raises(ConfigError, match="start_rule_engine.scan_interval_us must be"):
        start_rule_engine(tmp_path, scan_interval_us=interval)


def test_finish_after_the_engine_was_killed_returns_instead_of_waiting_for_ever(tmp_path):
    # a SIGTERM to the whole process group (a scheduler, `timeout`) kills the engine as it waits
    # between scans; the launcher must still get through finish() to its report
    job = generate_job(tmp_path / "killed", minutes=2, gpus=1, cpus=4)
    (job / "profiler-output" / "training_job_end.ts").unlink()  # still training
    handle = start_rule_engine(
        job, ["StepOutlier"], scan_interval_us=3_600_000_000, report_hook=None
    )
    assert wait_for(lambda: status(job, "StepOutlier").get("status") is not None)
    time.sleep(2)  # its first scan done, it waits for the next one
    assert handle.pid is not None
    os.kill(handle.pid, signal.SIGTERM)
    assert wait_for(lambda: not handle.is_alive())
    finished: list[bool] = []
    caller = threading.Thread(target=lambda: finished.append(handle.finish()), daemon=True)
    caller.start()
    caller.join(60)
    assert finished == [False]


_LAUNCHER = """
import sys
from stepscope.rules import start_rule_engine
handle = start_rule_engine(sys.argv[1], ["StepOutlier"], scan_interval_us=3_600_000_000,
                           report_hook=None)
print(handle.pid, flush=True)
sys.stdin.read()  # until killed
"""


def test_the_engine_makes_its_final_pass_when_its_launcher_is_killed(tmp_path):
    # a launcher killed with SIGKILL cannot call finish(): the engine must not outlive it,
    # waiting for an hour between scans of a job that will never end
    job = generate_job(tmp_path / "orphan", minutes=2, gpus=1, cpus=4)
    (job / "profiler-output" / "training_job_end.ts").unlink()  # still training
    with subprocess.Popen(
        [sys.executable, "-c", _LAUNCHER, str(job)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as launcher:
        try:
            engine_pid = int(launcher.stdout.readline())
            assert wait_for(lambda: status(job, "StepOutlier").get("status") is not None)
        finally:
            launcher.kill()
    assert wait_for(lambda: not psutil.pid_exists(engine_pid) or _zombie(engine_pid), 60)
    assert status(job, "StepOutlier")["status"] in ("NoIssuesFound", "IssuesFound")


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
