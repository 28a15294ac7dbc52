"""What ``stepscope run`` and ``stepscope demo`` print about a job and its rules."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from stepscope.cli.output import print_job_start, print_job_summary, print_rule_finding
from stepscope.launcher import Job, JobStatus


def _job_with_statuses(path: Path, statuses: dict[str, dict]) -> Job:
    for rule, status in statuses.items():
        folder = path / "rule-output" / rule
        folder.mkdir(parents=True)
        (folder / "status.json").write_text(json.dumps(status))
    return Job(path=path, exit_code=0, status=JobStatus.COMPLETED)


def test_messages_and_paths_are_printed_as_they_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a custom rule's message, a job folder in brackets: text, not markup
    path = tmp_path / "[run 1] a job folder whose name is longer than a terminal line is wide"
    message = "GPU [gpu0] idle [/x] while waiting"
    job = _job_with_statuses(
        path, {"Custom": {"status": "IssuesFound", "message": message, "violations": 1}}
    )
    print_job_start(job)
    print_rule_finding("Custom", {"status": "IssuesFound", "message": message})
    print_job_summary(job)
    lines = capsys.readouterr().err.splitlines()
    assert f"Profiling into {path}" in lines  # whole, on one line, to copy
    assert f"Watch it live:  stepscope ui {tmp_path}" in lines
    assert any(line.startswith("Custom") and line.endswith(message) for line in lines)
    assert f"Job Completed (exit code 0); data in {path}" in lines


def test_the_ui_command_printed_can_be_pasted_whatever_the_folder_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # printed as it was, "stepscope ui my runs #1" ran the UI on "my" and "runs" (# began a
    # comment)
    runs = tmp_path / "my runs #1 it's 名前 $HOME"
    job = _job_with_statuses(runs / "job", {})
    print_job_start(job)
    print_job_summary(job)
    commands = [
        shlex.split(line.split(":  ", 1)[1])
        for line in capsys.readouterr().err.splitlines()
        if line.startswith(("Watch it live:", "Open the Profiler UI:"))
    ]
    assert commands == [["stepscope", "ui", str(runs)]] * 2


@pytest.mark.parametrize(
    ("exit_code", "ending"),
    [
        (3, "exit code 3"),
        (-9, "killed by SIGKILL, exit status 137"),
        (-2, "killed by SIGINT, exit status 130"),
    ],
)
def test_a_command_killed_by_a_signal_is_said_to_be_with_the_exit_status_run_gives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], exit_code: int, ending: str
) -> None:
    # "exit code -2" beside stepscope run's own exit status 130 read as two different endings
    print_job_summary(Job(path=tmp_path, exit_code=exit_code, status=JobStatus.FAILED))
    assert f"Job Failed ({ending}); data in {tmp_path}" in capsys.readouterr().err.splitlines()


def test_only_what_a_rule_finds_is_printed_while_the_job_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for state in ("InProgress", "NoIssuesFound", "NotApplicable"):
        print_rule_finding("StepOutlier", {"status": state, "message": "nothing to say"})
    assert capsys.readouterr().err == ""
    print_rule_finding("StepOutlier", {"status": "IssuesFound", "message": "1 outlier step"})
    print_rule_finding("LowGPUUtilization", {"status": "Error", "message": "no such column"})
    lines = capsys.readouterr().err.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["StepOutlier", "IssuesFound"],
        ["LowGPUUtilization", "Error"],
    ]
