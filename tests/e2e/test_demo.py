"""``stepscope demo``: the data-loader problem and the slow step are found and explained."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_the_demo_finds_its_slow_data_loader_and_its_slow_step(tmp_path: Path) -> None:
    job_dir = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, "-m", "stepscope", "demo", "--job-dir", str(job_dir)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # where the job goes and how to watch it, before the training prints anything
    output = result.stderr
    assert output.index(f"Profiling into {job_dir}") < output.index("epoch 0:")
    assert f"stepscope ui {job_dir.parent}" in output
    # what the rules found, each as a line of its own; a rule still waiting says nothing
    assert re.search(r"^StepOutlier +IssuesFound +1 outlier", output, re.MULTILINE), output
    assert "InProgress" not in output
    # a real training run: the model learns (ten classes, so chance is 0.1)
    accuracy = re.search(r"eval accuracy ([0-9.]+)", result.stderr)
    assert accuracy is not None, result.stderr[-3000:]
    assert float(accuracy.group(1)) > 0.25
    statuses = {
        rule: json.loads((job_dir / "rule-output" / rule / "status.json").read_text())
        for rule in ("Dataloader", "StepOutlier", "ProfilerReport")
    }
    assert statuses["Dataloader"]["status"] == "IssuesFound"
    assert statuses["StepOutlier"]["status"] == "IssuesFound"
    assert statuses["ProfilerReport"]["status"] == "IssuesFound"
    outliers = json.loads(
        (job_dir / "rule-output" / "profiler-reports" / "StepOutlier.json").read_text()
    )
    assert "50" in json.dumps(outliers["Details"]), "the injected slow step 50 is not named"
    report = (job_dir / "rule-output" / "profiler-report.html").read_text()
    assert "num_workers" in report  # the data-loader recommendation names the knob
    job = json.loads((job_dir / "job.json").read_text())
    assert job["status"] == "Completed"
    detailed = list((job_dir / "profiler-output").rglob("*.pt.trace.json.gz"))
    assert detailed, "the detailed torch.profiler window wrote no trace"
    python_stats = list((job_dir / "profiler-output").rglob("python_stats"))
    assert python_stats, "the Python profiling window wrote no stats"


def test_a_shorter_demo_still_has_every_window_and_its_slow_step(tmp_path: Path) -> None:
    job_dir = tmp_path / "demo"
    steps = 24
    result = subprocess.run(
        [sys.executable, "-m", "stepscope", "demo", "--job-dir", str(job_dir)]
        + ["--steps-per-epoch", str(steps)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    output = job_dir / "profiler-output"
    assert list(output.rglob("*.pt.trace.json.gz")), "no detailed torch.profiler window"
    windows = [path.parent.name for path in output.rglob("python_stats")]
    assert any(name.startswith("train-") for name in windows), windows
    outliers = json.loads(
        (job_dir / "rule-output" / "profiler-reports" / "StepOutlier.json").read_text()
    )
    train = outliers["Details"]["step_details"]["0-algo-1"]["TRAIN"]
    assert train["steps"] == steps
    # the injected slow step (1.5 s longer than the others, the training script's default)
    assert any(outlier["duration_s"] > 1.5 for outlier in train["outliers"]), train["outliers"]
