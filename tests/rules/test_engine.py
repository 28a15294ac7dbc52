"""The offline engine and the ``stepscope rules`` command on generated jobs, and error isolation."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from stepscope.cli import main as cli_main
from stepscope.errors import ConfigError
from stepscope.rules import ProfilerRule, Rule, Verdict, read_results, rule_configs, run_rules
from stepscope.rules.builtin import ProfilerReport, StepOutlier
from stepscope.testing import TINY_JOB, generate_job


@pytest.fixture(scope="module")
def starved_job(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("jobs") / "starved"
    return generate_job(
        root,
        minutes=4,
        gpus=4,
        cpus=8,
        dataloader_starved=True,
        slow_step_fraction=0.0,
        slow_steps=range(100, 106),
    )


def test_run_rules_writes_every_status_and_report(starved_job):
    results = run_rules(starved_job)
    assert len(results) == 12
    out = starved_job / "rule-output"
    for name, result in results.items():
        status = json.loads((out / name / "status.json").read_text())
        assert status["status"] == result.status != "Error"
        assert (out / "profiler-reports" / f"{name}.json").is_file()
    assert read_results(out)["Dataloader"].status == results["Dataloader"].status


def test_a_starved_data_loader_is_found(starved_job):
    results = run_rules(starved_job, [rule_configs.ProfilerReport(StepOutlier_n_outliers=0)])
    assert results["Dataloader"].status == "IssuesFound"
    assert results["CPUBottleneck"].status == "IssuesFound"  # busy CPUs, idle GPUs meanwhile
    steps = [
        o["step"]
        for o in results["StepOutlier"].details["step_details"]["0-algo-1"]["TRAIN"]["outliers"]
    ]
    assert steps == list(range(100, 106))
    assert results["LoadBalancing"].details["imbalanced"] == ["algo-1/gpu0"]  # gpu0 at 30 %


class Crashing(Rule):
    description = "Always fails."

    def scan(self, window):
        raise RuntimeError("boom")

    def evaluate(self):
        return Verdict()


class StepCounter(Rule):
    description = "Counts TRAIN steps."

    def __init__(self, **parameters):
        super().__init__(**parameters)
        self.steps = 0

    def scan(self, window):
        rows = window.query("SELECT step FROM {events} WHERE category = 'Step:ModeKeys.TRAIN'")
        self.steps += len(rows["step"])

    def evaluate(self):
        return Verdict(datapoints=self.steps, message=f"{self.steps} steps")


def test_a_crashing_rule_is_an_error_and_the_others_go_on(starved_job, tmp_path):
    results = run_rules(
        starved_job, [Crashing, ProfilerRule.stepscope(StepCounter)], output_dir=tmp_path
    )
    assert results["Crashing"].status == "Error"
    assert "boom" in results["Crashing"].message
    assert results["StepCounter"].status == "NoIssuesFound"
    assert results["StepCounter"].datapoints > 100
    status = json.loads((tmp_path / "StepCounter" / "status.json").read_text())
    assert status["message"].endswith("steps")


class OddDetails(Rule):
    description = "Finds something, and keeps a set among its details."

    def scan(self, window):
        pass

    def evaluate(self):
        return Verdict(triggered=True, violations=1, message="found", details={"seen": {1, 2}})


def test_a_verdict_json_cannot_hold_is_an_error_and_the_others_are_written(starved_job, tmp_path):
    # the set made writing the results raise: no rule's files were written, and the command
    # ended in a traceback
    results = run_rules(starved_job, [OddDetails, StepCounter], output_dir=tmp_path)
    assert results["OddDetails"].status == "Error"
    assert "cannot be written as JSON" in results["OddDetails"].message
    status = json.loads((tmp_path / "OddDetails" / "status.json").read_text())
    assert status["status"] == "Error"
    assert read_results(tmp_path)["StepCounter"].status == "NoIssuesFound"


class ReturnsTrue(Rule):
    description = "Returns True, as SageMaker's rules did when their condition was met."

    def scan(self, window):
        pass

    def evaluate(self):
        return True


def test_an_evaluate_that_returns_no_verdict_is_an_error_and_the_others_go_on(
    starved_job, tmp_path
):
    results = run_rules(starved_job, [ReturnsTrue, StepCounter], output_dir=tmp_path)
    assert results["ReturnsTrue"].status == "Error"
    assert results["ReturnsTrue"].message == (
        "TypeError: evaluate() must return a Verdict, got True"
    )
    assert read_results(tmp_path)["StepCounter"].status == "NoIssuesFound"


def test_a_rule_instance_given_twice_starts_afresh_each_time(starved_job, tmp_path):
    # the second run added its steps to the first's: twice the steps, twice the outliers
    rule = StepOutlier(n_outliers=0)
    first = run_rules(starved_job, [rule], output_dir=tmp_path)["StepOutlier"]
    second = run_rules(starved_job, [rule], output_dir=tmp_path)["StepOutlier"]
    assert (second.datapoints, second.violations) == (first.datapoints, first.violations)
    assert second.parameters["n_outliers"] == 0
    report = ProfilerReport(StepOutlier_stddev=3)
    run_rules(starved_job, [report], output_dir=tmp_path)
    again = run_rules(starved_job, [report], output_dir=tmp_path)["StepOutlier"]
    assert again.datapoints == first.datapoints and again.parameters["stddev"] == 3


def test_read_only_input_asks_for_an_output_dir(starved_job, tmp_path):
    # a folder without write bits is read-only input even to root, who may write anywhere
    # (recorded data must not get a rule-output folder)
    os.chmod(starved_job, 0o555)
    try:
        with pytest.raises(ConfigError, match="output_dir is required"):
            run_rules(starved_job, ["StepOutlier"])
    finally:
        os.chmod(starved_job, 0o755)


def test_kineto_trace_file_needs_an_output_dir(shared_fixtures, tmp_path):
    trace = shared_fixtures / "kineto" / "v100_single_ns_resolution.pt.trace.json.gz"
    with pytest.raises(ConfigError, match="output_dir is required"):
        run_rules(trace, ["StepOutlier"])
    results = run_rules(trace, ["StepOutlier", "OverallFrameworkMetrics"], output_dir=tmp_path)
    assert results["StepOutlier"].datapoints == 5  # ProfilerStep#101-105
    assert results["OverallFrameworkMetrics"].details["ratio"]["GPU"] > 0
    # five steps of a few tens of ms each: said in ms, not rounded to "0.4 s"
    steps_ms = (
        sum(
            v
            for k, v in results["OverallFrameworkMetrics"].details["phase"].items()
            if k != "others"
        )
        * 1e3
    )
    assert f"{steps_ms:.1f} ms in steps" in results["OverallFrameworkMetrics"].message


def test_smdebug_fixture_runs_every_rule(shared_fixtures, tmp_path):
    results = run_rules(shared_fixtures / "smdebug" / "merge_traces", output_dir=tmp_path)
    assert {r.status for r in results.values()} <= {"NoIssuesFound", "NotApplicable", "IssuesFound"}
    steps = results["StepOutlier"].details["step_details"]
    modes = {mode for node in steps.values() for mode in node}
    assert modes == {"TRAIN", "EVAL"}
    assert results["LowGPUUtilization"].status == "NotApplicable"  # no GPU metrics recorded


def test_smdebug_system_fixture(shared_fixtures, tmp_path):
    results = run_rules(shared_fixtures / "smdebug" / "test_traces", output_dir=tmp_path)
    usage = results["OverallSystemUsage"]
    assert usage.status == "NoIssuesFound" and usage.datapoints > 0
    assert usage.details["nodes"]["algo-1"]["hardware"]["cores"] == 32


def test_cli_rules_with_parameters(starved_job, tmp_path, capsys):
    code = cli_main(
        [
            "rules",
            str(starved_job),
            "--rule",
            "stepoutlier",
            "--param",
            "StepOutlier.n_outliers=0",
            "--output-dir",
            str(tmp_path),
        ]
    )
    assert code == 0
    report = json.loads((tmp_path / "profiler-reports" / "StepOutlier.json").read_text())
    assert "n_outliers:0" in report["RuleParameters"]
    assert report["Status"] == "IssuesFound"
    assert not (tmp_path / "CPUBottleneck").exists()
    # the statuses are the command's result: on stdout, for `| grep IssuesFound`
    assert capsys.readouterr().out.split()[:2] == ["StepOutlier", "IssuesFound"]


def test_cli_param_of_a_sub_rule_goes_through_profiler_report(starved_job, tmp_path):
    assert (
        cli_main(
            [
                "rules",
                str(starved_job),
                "--param",
                "Dataloader.min_threshold=1",
                "--output-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    report = json.loads((tmp_path / "profiler-reports" / "Dataloader.json").read_text())
    assert report["Parameters"]["min_threshold"] == 1.0


@pytest.mark.parametrize(
    "argv",
    [
        ["--rule", "NoSuchRule"],
        ["--param", "StepOutlier.stdev=3", "--rule", "StepOutlier"],
        ["--param", "StepOutlier.stddev"],
        ["--param", "CPUBottleneck.threshold=5", "--rule", "StepOutlier"],
        ["--rule", "os:path"],
        ["--rule", "stepscope.config:ProfilerConfig"],
    ],
)
def test_cli_rejects_bad_rules_and_parameters(starved_job, tmp_path, argv, capsys):
    assert cli_main(["rules", str(starved_job), *argv, "--output-dir", str(tmp_path)]) == 2
    assert "must be" in capsys.readouterr().err


def test_cli_custom_rule_by_import_path(starved_job, tmp_path):
    assert (
        cli_main(
            [
                "rules",
                str(starved_job),
                "--rule",
                "tests.rules.test_engine:StepCounter",
                "--output-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "StepCounter" / "status.json").read_text())["datapoints"] > 100


def test_cli_custom_rule_from_a_module_in_the_current_folder(starved_job, tmp_path):
    # `stepscope rules <job> --rule myrules:Class` beside myrules.py said "No module named
    # 'myrules'": the console script's folder, not the current one, leads the import path
    (tmp_path / "myrules.py").write_text(
        "from stepscope.rules import Rule, Verdict\n"
        "class Always(Rule):\n"
        "    description = 'Always finds an issue.'\n"
        "    def scan(self, window): pass\n"
        "    def evaluate(self): return Verdict(triggered=True, message='found')\n"
    )
    console_script = tmp_path / "bin" / "stepscope"
    console_script.parent.mkdir()
    console_script.write_text("import sys\nfrom stepscope.cli import main\nsys.exit(main())\n")
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, str(console_script), "rules", str(starved_job)]
        + ["--rule", "myrules:Always", "--output-dir", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[:3] == ["Always", "IssuesFound", "found"]


def test_a_long_job_is_scanned_in_windows_of_six_hours(job):
    import numpy as np

    from stepscope.rules import RuleSession
    from tests.rules.tablejob import T0_US, add_events, add_metric

    # one snapshot a minute for 13 hours: more than two six-hour windows
    times = T0_US + np.arange(13 * 60, dtype=np.int64) * 60_000_000
    add_metric(job, "algo-1", times, "cpu", "cpu0", "CPUUtilization", np.full(len(times), 50.0))
    add_metric(job, "algo-1", times, "gpu", "gpu0", "GPUUtilization", np.full(len(times), 80.0))
    add_events(
        job, "algo-1", "Step:ModeKeys.TRAIN", times + 1000, 500_000, step=np.arange(len(times))
    )
    session = RuleSession(job, ["OverallSystemUsage", "StepOutlier"])
    windows = session._windows(job.connect(), int(times[-1]) + 1, final=True)
    assert len(windows) >= 3
    assert all(stop - start <= 6 * 3600 * 1_000_000 for start, stop in windows[1:])
    session.advance(final=True)
    results = session.results()
    assert results["OverallSystemUsage"].datapoints == len(times)  # each snapshot once
    assert results["StepOutlier"].datapoints == len(times)  # each step once


def test_a_job_too_short_to_judge_is_undecided_in_one_wording_for_every_rule(tmp_path, capsys):
    # 240 snapshots per GPU: fewer than IOBottleneck's, LowGPUUtilization's, GPUMemoryIncrease's
    # and BatchSize's patience and window need. Two said "NoIssuesFound: 240 samples per GPU so
    # far", IOBottleneck "NoIssuesFound ... The job ended before the rule could decide".
    job = generate_job(tmp_path / "tiny", **TINY_JOB)
    assert cli_main(["rules", str(job)]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    short = ("IOBottleneck", "LowGPUUtilization", "GPUMemoryIncrease", "BatchSize")
    for name in short:
        assert lines[name].split()[1] == "NotApplicable", lines[name]
        assert "The job ended before the rule could decide: it needs " in lines[name]
        assert "it saw 240." in lines[name]
    for name, line in lines.items():
        assert "so far" not in line and "Waiting" not in line, line
        if name not in short:
            assert "could decide" not in line, line


def _as_if_running(job: Path) -> None:
    """The job folder as ``stepscope run`` leaves it while the command trains."""
    info = json.loads((job / "job.json").read_text())
    (job / "job.json").write_text(json.dumps({**info, "status": "Running", "end_time_us": None}))
    for marker in job.rglob("training_job_end.ts"):
        marker.unlink()


def test_rules_on_a_running_job_leave_the_live_engines_folder_alone(tmp_path, capsys):
    # the final pass wrote NoIssuesFound ("the job ended before ...") into the rule-output the
    # live engine was rewriting, and the two overwrote each other until the job ended
    job = generate_job(tmp_path / "running", **TINY_JOB)
    _as_if_running(job)
    assert cli_main(["rules", str(job)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stepscope: error: --output-dir is required")
    assert "still running" in err
    assert not (job / "rule-output").exists()

    elsewhere = tmp_path / "so-far"
    assert cli_main(["rules", str(job), "--output-dir", str(elsewhere)]) == 0
    lines = capsys.readouterr().out.splitlines()
    statuses = {line.split()[0]: line.split()[1] for line in lines}
    # the job has not ended: nothing is final, and nothing says it ended
    assert set(statuses.values()) <= {"InProgress", "IssuesFound"}, lines
    assert not any("job ended" in line for line in lines), lines
    assert read_results(elsewhere) and not (job / "rule-output").exists()


def test_rules_on_the_job_of_a_killed_launcher_write_its_own_folder(tmp_path, capsys):
    # job.json says Running for ever once `stepscope run` was killed with SIGKILL: no live
    # engine writes the job's rule-output any more, and refusing it left the job without verdicts
    job = generate_job(tmp_path / "killed", **TINY_JOB)
    _as_if_running(job)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    host = socket.gethostname()
    info = json.loads((job / "job.json").read_text())
    launcher = {"host": host, "pid": gone.pid, "start_time": None}
    (job / "job.json").write_text(json.dumps({**info, "launcher": launcher}))
    for rank_file in job.rglob("framework/ranks/*.json"):  # its command is gone too
        rank = json.loads(rank_file.read_text())
        rank_file.write_text(json.dumps({**rank, "hostname": host, "pid": gone.pid}))
    assert cli_main(["rules", str(job)]) == 0
    assert read_results(job / "rule-output")
    assert "InProgress" not in capsys.readouterr().out


def test_a_report_of_a_running_job_before_its_first_verdicts_judges_the_data_so_far(
    tmp_path, capsys
):
    # refused with "output_dir is required" (a flag stepscope report does not have) once rules
    # left a running job's rule-output to its live engine
    job = generate_job(tmp_path / "running", **TINY_JOB)
    _as_if_running(job)
    assert cli_main(["report", str(job)]) == 0
    report = job / "rule-output" / "profiler-report.html"
    text = report.read_text()
    assert 'class="badge InProgress"' in text and "job ended" not in text
    assert [p.name for p in (job / "rule-output").iterdir()] == [report.name]


def test_a_running_job_younger_than_the_scan_lag_is_waiting_for_data_not_without_it(tmp_path):
    # The live scans stay two minutes behind the newest record: in a job's first two minutes
    # every rule said "No GPU metrics." (or "No system metrics.", "No framework events.") on a
    # job that has them, until the scans caught up.
    from stepscope.rules import RuleSession
    from stepscope.store import open_job

    job = generate_job(tmp_path / "young", minutes=1, gpus=2, cpus=4)
    _as_if_running(job)
    session = RuleSession(open_job(job), ["CPUBottleneck", "LowGPUUtilization", "StepOutlier"])
    for _ in range(2):  # before the first scan, and after one that judged nothing yet
        for name, result in session.results().items():
            assert result.status == "InProgress", (name, result.message)
            assert result.message.startswith("Waiting for data"), (name, result.message)
            assert "No " not in result.message, (name, result.message)
        session.advance()
    session.advance(final=True)
    final = session.results()
    assert final["CPUBottleneck"].datapoints > 0 and final["StepOutlier"].datapoints > 0
    assert not any(r.message.startswith("Waiting") for r in final.values())
