"""Every built-in rule alike: documented defaults, empty input, incremental scans, status files."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from stepscope.rules import RuleSession, write_results
from stepscope.rules.builtin import BUILTIN_RULES
from stepscope.testing import TableJob
from tests.rules.tablejob import T0_US, add_events, machine, training_steps

DOCS = Path(__file__).resolve().parents[2] / "docs" / "rules.md"
STATUSES = {"InProgress", "IssuesFound", "NoIssuesFound", "Error", "NotApplicable"}

#: small patience/window so blocks complete well inside the 10-minute job below
SHORT = {"patience": 20, "window": 60, "n_outliers": 2}


def documented_defaults() -> dict[tuple[str, str], str]:
    rows = re.findall(r"^\| (\w+) \| `(\w+)` \| ([^|]+) \|", DOCS.read_text(), re.MULTILINE)
    return {(rule, parameter): default.strip() for rule, parameter, default in rows}


@pytest.mark.parametrize("name", list(BUILTIN_RULES))
def test_documented_defaults_equal_the_code(name):
    documented = {p: d for (rule, p), d in documented_defaults().items() if rule == name}
    specs = BUILTIN_RULES[name].all_parameter_specs()
    assert set(documented) == set(specs)
    for parameter, spec in specs.items():
        assert documented[parameter] == str(spec.default), parameter


def build(name: str):
    rule_class = BUILTIN_RULES[name]
    specs = rule_class.all_parameter_specs()
    return rule_class(**{k: v for k, v in SHORT.items() if k in specs})


def rich_job(tmp_path: Path) -> TableJob:
    """Ten minutes of two nodes with GPUs, steps with a stall, a data loader and kernels."""
    job = TableJob(tmp_path / "job")
    leak = np.linspace(20, 60, 1200)
    machine(
        job, 600, cores=4, cpu_pct=95, iowait_pct=60, gpu_util_pct=[5, 8], gpu_memory_pct=[leak, 30]
    )
    machine(
        job,
        600,
        node="algo-2",
        cores=4,
        cpu_pct=20,
        gpu_util_pct=[50, 50],
        gpu_memory_pct=[30, 30],
        seed=1,
    )
    start, _ = training_steps(
        job, 2500, step_s=0.2, start_us=T0_US + 30_000_000, slow={500: 3.0, 501: 3.0, 502: 3.0}
    )
    training_steps(job, 100, mode="EVAL", step_s=0.1, start_us=T0_US + 40_000_000, seed=2)
    add_events(
        job,
        "algo-1",
        "DataLoaderIter",
        start - 20_000,
        15_000,
        name="DataLoaderIter::GetNext",
        pid=0,
        args=[{"pid": 100 + i % 2, "worker_id": i % 2} for i in range(len(start))],
    )
    add_events(
        job,
        "algo-1",
        "DataLoaderIterInitialize",
        [T0_US + 29_000_000],
        1000,
        name="_MultiProcessingDataLoaderIter.__init__",
        args={"num_workers": 2, "pin_memory": False},
    )
    add_events(
        job, "algo-1", "kernel", start[:500] + 2000, 50_000, name="volta_sgemm", source="kineto"
    )
    add_events(
        job, "algo-1", "cpu_op", start[:500] + 1000, 20_000, name="aten::mm", source="kineto"
    )
    return job


def comparable(value, other, path="") -> None:
    if isinstance(value, dict):
        assert set(value) == set(other), path
        for key in value:
            comparable(value[key], other[key], f"{path}.{key}")
    elif isinstance(value, list):
        assert len(value) == len(other), path
        for i, (a, b) in enumerate(zip(value, other, strict=True)):
            comparable(a, b, f"{path}[{i}]")
    elif isinstance(value, float) and isinstance(other, float):
        assert (math.isnan(value) and math.isnan(other)) or value == pytest.approx(
            other, rel=1e-6, abs=0.011
        ), path
    else:
        assert value == other, path


@pytest.mark.parametrize("name", list(BUILTIN_RULES))
def test_empty_input_is_not_a_problem(name, job):
    session = RuleSession(job, [build(name)])
    session.advance(final=True)
    result = session.results()[name]
    assert result.status in ("NoIssuesFound", "NotApplicable")
    assert not result.triggered


@pytest.mark.parametrize("name", list(BUILTIN_RULES))
def test_incremental_scans_equal_one_full_scan(name, tmp_path):
    job = rich_job(tmp_path)
    live = RuleSession(job, [build(name)])
    for minute in range(1, 11):
        job.visible_until_us = T0_US + minute * 60_000_000 + 7_300_000  # windows not on minutes
        live.advance()
    job.visible_until_us = None
    live.advance(final=True)
    scanned_windows = live.watermark_us

    offline = RuleSession(job, [build(name)])
    offline.advance(final=True)
    assert offline.watermark_us == scanned_windows
    for rule_name, result in offline.results().items():
        other = live.results()[rule_name]
        assert result.status != "Error", result.message
        assert (other.status, other.triggered, other.violations, other.datapoints) == (
            result.status,
            result.triggered,
            result.violations,
            result.datapoints,
        ), rule_name
        comparable(json.loads(json.dumps(other.details)), json.loads(json.dumps(result.details)))
        assert other.intervals == result.intervals


@pytest.mark.parametrize("name", list(BUILTIN_RULES))
def test_status_and_report_files_are_valid(name, tmp_path):
    job = rich_job(tmp_path)
    session = RuleSession(job, [build(name)])
    session.advance(final=True)
    write_results(tmp_path / "rule-output", session.results())
    status = json.loads((tmp_path / "rule-output" / name / "status.json").read_text())
    assert set(status) == {
        "rule",
        "status",
        "message",
        "updated_us",
        "triggered",
        "violations",
        "datapoints",
    }
    assert status["rule"] == name and status["status"] in STATUSES
    assert status["status"] != "Error", status["message"]
    report = json.loads(
        (tmp_path / "rule-output" / "profiler-reports" / f"{name}.json").read_text()
    )
    for key in ("RuleTriggered", "Violations", "Details", "Datapoints", "RuleParameters"):
        assert key in report
    assert "scan_interval_us:60000000" in report["RuleParameters"]
    if report["Status"] == "IssuesFound":
        assert report["Recommendation"] and report["RuleTriggered"] == report["Violations"] > 0


def test_live_sessions_really_scan_in_pieces(tmp_path):
    job = rich_job(tmp_path)
    session = RuleSession(job, [build("StepOutlier")])
    marks = []
    for minute in (3, 6, 9):
        job.visible_until_us = T0_US + minute * 60_000_000
        assert session.advance()
        marks.append(session.watermark_us)
    assert not session.advance()  # nothing new: no scan
    assert marks == sorted(marks) and len(set(marks)) == 3
