"""What the ``stepscope`` command prints when it cannot do what it was asked."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from stepscope.cli import main
from stepscope.errors import ConfigError
from stepscope.launcher import launch
from stepscope.testing import TINY_JOB, generate_job


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_job(tmp_path_factory.mktemp("generated") / "job", **TINY_JOB)


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "{job}", "-o", "{missing}/trace.json"],
        ["rules", "{job}", "--rule", "StepOutlier", "--output-dir", "{file}/rules"],
    ],
    ids=["export-output-in-a-missing-folder", "rules-output-under-a-file"],
)
def test_an_output_that_cannot_be_written_is_named_without_a_traceback(
    job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    file = tmp_path / "a-file"
    file.write_text("")
    paths = {"job": job, "missing": tmp_path / "missing", "file": file}
    assert main([arg.format(**paths) for arg in argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("stepscope: error: ")
    assert str(tmp_path) in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["report", "{job}", "-o", "s3://bucket/report.html"], "-o"),
        (["export", "{job}", "-o", "s3://bucket/trace.json"], "-o"),
        (["rules", "{job}", "--rule", "StepOutlier", "--output-dir", "s3://bucket/rules"], "--output-dir"),
        (["run", "--job-dir", "s3://bucket/job", "--", sys.executable, "-c", "pass"], "--job-dir"),
    ],
    ids=["report", "export", "rules", "run"],
)  # fmt: skip
def test_an_s3_output_is_refused_rather_than_written_to_a_local_folder_named_s3(
    job: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    flag: str,
) -> None:
    # the report, the rules' results and a new job went to ./s3:/bucket/..., said to be written
    monkeypatch.chdir(tmp_path)
    assert main([arg.format(job=job) for arg in argv]) == 2
    err = capsys.readouterr().err
    assert f"{flag} must be a local path, got 's3://bucket/" in err
    assert "copy it to the bucket" in err
    assert not (tmp_path / "s3:").exists()


def test_a_report_of_a_read_only_trace_asks_for_the_report_commands_option(
    shared_fixtures: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = shared_fixtures / "kineto" / "v100_single_ns_resolution.pt.trace.json.gz"
    assert main(["report", str(trace)]) == 2
    err = capsys.readouterr().err
    # it said "output must be an HTML file to write ..., got None": Python's words for a flag
    assert err.startswith("stepscope: error: -o is required: an HTML file to write")
    assert "got None" not in err and trace.name in err
    assert "--output-dir" not in err, "stepscope report has no --output-dir"


def test_rules_on_a_read_only_trace_asks_for_the_output_dir_flag(
    shared_fixtures: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = shared_fixtures / "kineto" / "v100_single_ns_resolution.pt.trace.json.gz"
    assert main(["rules", str(trace)]) == 2
    err = capsys.readouterr().err
    # it said "output_dir must be a writable folder ..., got None"
    assert err.startswith("stepscope: error: --output-dir is required: a folder to write")
    assert "got None" not in err and "output_dir" not in err and trace.name in err


@pytest.mark.parametrize("argv", [["run"], ["run", "--"], ["run", "--nproc-per-node", "2"]])
def test_run_without_a_command_shows_how_to_type_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    job_dir = tmp_path / "job"
    assert main(["run", "--job-dir", str(job_dir), *argv[1:]]) == 2
    err = capsys.readouterr().err
    # it said "command must be a non-empty command to run, got []"
    assert err.startswith("stepscope: error: the command to profile is required")
    assert "stepscope run -- python train.py" in err and "got []" not in err
    assert not job_dir.exists()


def test_a_report_output_that_is_a_folder_is_named(
    job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "reports"
    folder.mkdir()
    assert main(["report", str(job), "-o", str(folder)]) == 1
    err = capsys.readouterr().err
    assert err == f"stepscope: error: Is a directory: {folder}\n"


@pytest.mark.parametrize("option", ["--steps", "--time"])
def test_an_export_window_past_the_job_is_an_error_naming_the_flag_as_typed(
    job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    output = tmp_path / "trace.json"
    assert main(["export", str(job), "-o", str(output), f"{option}=1000:"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"stepscope: error: {option} must be a range that holds")
    assert "got '1000:'." in err
    assert "The job records " in err
    assert not output.exists()


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["rules", "{job}", "--output-dir", ""], "--output-dir"),
        (["report", "{job}", "-o", ""], "-o"),
        (["export", "{job}", "-o", ""], "-o"),
        (["run", "--job-dir", "", "--", sys.executable, "-c", "pass"], "--job-dir"),
    ],
    ids=["rules", "report", "export", "run"],
)
def test_an_empty_output_path_is_refused_rather_than_written_into_the_current_folder(
    job: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    flag: str,
) -> None:
    # --output-dir "$OUT" with OUT unset spread the rule results among the user's own files
    monkeypatch.chdir(tmp_path)
    assert main([arg.format(job=job) for arg in argv]) == 2
    assert capsys.readouterr().err.startswith(f"stepscope: error: {flag} must be a local path")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("s3://bucket/profilerconfig.json", "must be an existing file, got 's3://bucket/"),
        ("", "must be a name ending in .json, .yaml or .yml, got ''."),
    ],
    ids=["url", "empty"],
)
def test_a_config_flag_is_named_as_typed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str, message: str
) -> None:
    # read as a path, s3://bucket became s3:/bucket, and an empty --config became '.'
    job_dir = tmp_path / "job"
    argv = ["run", "--job-dir", str(job_dir), "--config", config, "--", sys.executable, "-c", ""]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert not job_dir.exists()


_NPROC_MESSAGE = "--nproc-per-node must be an integer >= 1, got 0."
_JOB_DIR_MESSAGE = "--job-dir must be a folder (or a path that does not exist yet)"
_COMMAND = ["--", sys.executable, "-c", "pass"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--nproc-per-node", "0", *_COMMAND], _NPROC_MESSAGE),
        (["run", "--job-dir", "{file}", *_COMMAND], _JOB_DIR_MESSAGE),
        (["demo", "--job-dir", "{file}"], _JOB_DIR_MESSAGE),
    ],
    ids=["run-nproc-per-node", "run-job-dir-a-file", "demo-job-dir-a-file"],
)
def test_a_bad_launch_flag_is_named_as_typed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    file = tmp_path / "a-file"
    file.write_text("")
    assert main([arg.format(file=file) for arg in argv]) == 2
    assert capsys.readouterr().err.startswith(f"stepscope: error: {message}")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--rule", "Nope", *_COMMAND], "--rule must be one of ProfilerReport, "),
        (["rules", "{job}", "--rule", "Nope"], "--rule must be one of ProfilerReport, "),
        (
            ["rules", "{job}", "--rule", "StepOutlier", "--rule", "stepoutlier"],
            "--rule must be each rule at most once",
        ),
        (["rules", "{job}", "--param", "Nope.stddev=3"], "--param rule must be one of "),
        (["run", "--param", "Nope.stddev=3", *_COMMAND], "--param rule must be one of "),
        (["run", "--param", "stddev=3", *_COMMAND], "--param must be RULE.PARAM=VALUE"),
        (
            ["run", "--rule", "StepOutlier", "--param", "StepOutlier.stddev=-1", *_COMMAND],
            "StepOutlier.stddev must be ",
        ),
    ],
    ids=[
        "run-unknown-rule",
        "rules-unknown-rule",
        "rules-rule-twice",
        "rules-param-of-no-rule",
        "run-param-of-no-rule",
        "run-param-without-a-rule",
        "run-param-out-of-range",
    ],
)
def test_a_bad_rule_flag_is_named_as_typed(
    job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    job_dir = tmp_path / "job"
    argv = [arg.format(job=job) for arg in argv]
    if argv[0] == "run":
        argv[1:1] = ["--job-dir", str(job_dir)]
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith(f"stepscope: error: {message}")
    assert not job_dir.exists()


@pytest.mark.parametrize(
    ("source", "rule", "message"),
    [
        ("", ":Always", "got ':Always'.\n"),
        ("", "broken_rules_empty:", "got 'broken_rules_empty:'.\n"),
        ("def f(:\n", "broken_rules_syntax:Always", "raised SyntaxError: invalid syntax"),
        ("raise RuntimeError('no GPU')\n", "broken_rules_raises:Always", "RuntimeError: no GPU"),
    ],
    ids=["no-module", "no-class", "syntax-error", "raises"],
)
def test_a_custom_rule_that_cannot_be_imported_is_one_line_naming_the_flag(
    job: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    source: str,
    rule: str,
    message: str,
) -> None:
    # an empty module name, or a module that failed as it was imported, ended in a traceback
    module = rule.partition(":")[0]
    if module:
        (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["rules", str(job), "--rule", rule, "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stepscope: error: --rule must be a built-in rule name or module:Class")
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize("selected", [[], ["--rule", "CPUBottleneck"]], ids=["report", "rule"])
def test_one_parameter_set_twice_to_different_values_names_both(
    job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], selected: list[str]
) -> None:
    # rule names match whatever their case: the second spelling silently won
    first, second = "cpubottleneck.threshold=10", "CPUBottleneck.threshold=90"
    argv = ["rules", str(job), *selected, "--param", first, "--param", second]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"stepscope: error: --param must be the value of --param {first} ")
    assert f"got {second!r}" in err
    # the same value twice is no conflict
    again = "CPUBOTTLENECK.threshold=10"
    argv = ["rules", str(job), *selected, "--param", first, "--param", again]
    assert main([*argv, "--output-dir", str(tmp_path / "out")]) == 0


def test_the_python_api_names_its_parameters(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        launch([sys.executable, "-c", "pass"], job_dir=tmp_path / "job", nproc_per_node=0)
    assert caught.value.parameter == "nproc_per_node"


def test_an_unknown_option_before_the_command_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job_dir = tmp_path / "job"
    with pytest.raises(SystemExit) as caught:
        main(["--foo", "run", "--job-dir", str(job_dir), "--", sys.executable, "-c", "pass"])
    assert caught.value.code == 2
    assert "unrecognized arguments: --foo" in capsys.readouterr().err
    assert not job_dir.exists()


def test_verbose_before_the_command_turns_on_debug_messages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["-v", "update", str(tmp_path / "no-job")]) == 1
    assert logging.getLogger("stepscope").level == logging.DEBUG
    assert main(["update", str(tmp_path / "no-job")]) == 1
    assert logging.getLogger("stepscope").level == logging.INFO


def test_a_parameter_profiler_report_does_not_pass_on_says_what_to_set_instead(
    job: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    param = "OverallFrameworkMetrics.scan_interval_us=2000000"
    assert main(["rules", str(job), "--param", param]) == 2
    err = capsys.readouterr().err
    assert "has no parameters" not in err
    assert "not customised through ProfilerReport" in err
    assert "ProfilerReport's own scan_interval_us applies to it" in err
    # named as typed, not as the keyword ProfilerReport takes in Python
    assert err.startswith("stepscope: error: --param must be RULE.PARAM=VALUE")
    assert f"got {param!r}." in err and "OverallFrameworkMetrics_" not in err


def test_a_parameter_profiler_report_does_not_have_is_named_as_typed(
    job: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["rules", str(job), "--param", "ProfilerReport.stddev=3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stepscope: error: --param must be RULE.PARAM=VALUE")
    assert "StepOutlier" in err and "own PARAM is scan_interval_us" in err
    assert err.endswith("got 'ProfilerReport.stddev=3'.\n")


def test_an_export_onto_the_trace_it_reads_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # `stepscope export trace.json -o trace.json` replaced the recorded trace with its export.
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    trace = tmp_path / "rank-0.json"
    event = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "dur": 5}
    trace.write_text(json.dumps({"schemaVersion": 1, "traceEvents": [{**event, "ts": 1.0}]}))
    recorded = trace.read_bytes()
    assert main(["export", str(trace), "-o", str(tmp_path / "." / "rank-0.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stepscope: error: -o must be a file other than the trace")
    assert "rank-0.json" in err
    assert trace.read_bytes() == recorded


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["update", "{config}", "--detailed", "-5:3"], "--detailed START must be an integer >= 0"),
        (["update", "{config}", "--python", "-1:2"], "--python START must be an integer >= 0"),
        (["export", "{job}", "--steps", "-5:3"], "--steps must be A:B with whole numbers A < B"),
        (["export", "{job}", "--time", "-1.5:3"], "--time must be A:B in seconds with A < B"),
    ],
    ids=["update-detailed", "update-python", "export-steps", "export-time"],
)  # fmt: skip
def test_a_range_that_starts_with_a_minus_is_refused_saying_what_a_range_allows(
    job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    # argparse took "-5:3" for an option: "argument --detailed: expected one argument"
    from stepscope.config import ProfilerConfig

    ProfilerConfig().to_file(tmp_path / "config" / "profiler-config.json")
    argv = [arg.format(job=job, config=tmp_path / "config") for arg in argv]
    assert main(argv) == 2
    spaced = capsys.readouterr().err
    assert spaced.startswith(f"stepscope: error: {message}"), spaced
    assert "negative" in spaced or ">= 0" in spaced
    # the same words as for --flag=value
    option = argv.index(argv[-2])
    assert main([*argv[:option], f"{argv[-2]}={argv[-1]}"]) == 2
    assert capsys.readouterr().err == spaced


def test_a_bad_value_in_a_sagemaker_config_file_is_named_as_the_file_writes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # it said "ProfilerConfig.system_monitor_interval_millis must be ..., got 7.", no file named
    config = tmp_path / "profilerconfig.json"
    config.write_text(json.dumps({"ProfilingIntervalInMilliseconds": 7}))
    job_dir = tmp_path / "job"
    argv = ["run", "--config", str(config), "--job-dir", str(job_dir), "--", sys.executable]
    assert main([*argv, "-c", "pass"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"stepscope: error: ProfilingIntervalInMilliseconds in {config} must be")
    assert "100, 200, 500, 1000, 5000, 60000, got 7." in err
    assert not job_dir.exists()


def test_a_conflict_of_two_keys_in_a_sagemaker_config_file_names_them_as_the_file_writes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # it said "DataloaderProfilingConfig range in ... must be either a step range (start_step,
    # num_steps) or a time range (start_unix_time, duration), not both, got {'start_step': 2, ...}"
    config = tmp_path / "profilerconfig.json"
    metrics = {"StartStep": 2, "StartTimeInSecSinceEpoch": 1_700_000_000}
    config.write_text(
        json.dumps({"ProfilingParameters": {"DataloaderProfilingConfig": json.dumps(metrics)}})
    )
    argv = ["run", "--config", str(config), "--job-dir", str(tmp_path / "job"), "--", "true"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"stepscope: error: ProfilingParameters.DataloaderProfilingConfig in {config} must be "
        "either a step range (StartStep, NumSteps) or a time range (StartTimeInSecSinceEpoch, "
        "DurationInSeconds), not both, got {'StartStep': 2, "
        "'StartTimeInSecSinceEpoch': 1700000000}.\n"
    )


def test_ctrl_c_during_a_command_ends_it_with_one_line_and_the_shells_status(
    job: Path, tmp_path: Path
) -> None:
    # it printed KeyboardInterrupt's traceback, through wherever the rules were reading
    (tmp_path / "ctrlc.py").write_text(
        "import os, signal\n"
        "from stepscope.rules import Rule, Verdict\n"
        "class CtrlC(Rule):\n"
        "    description = 'The user presses Ctrl-C while it scans.'\n"
        "    def scan(self, window):\n"
        "        signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "    def evaluate(self): return Verdict()\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "stepscope", "rules", str(job), "--rule", "ctrlc:CtrlC"]
        + ["--output-dir", str(tmp_path / "out")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (result.returncode, result.stderr) == (130, "stepscope: interrupted\n")


def test_a_report_to_standard_output_is_refused_rather_than_written_to_a_file_named_dash(
    job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # -o - is standard output for stepscope export; the report went to a file named "-"
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(job), "-o", "-"]) == 2
    assert capsys.readouterr().err.startswith(
        "stepscope: error: -o must be an HTML file to write, got '-'. The report is a file"
    )
    assert list(tmp_path.iterdir()) == []


def _sagemaker_output(folder: Path) -> Path:
    return generate_job(folder / "recorded", **TINY_JOB) / "profiler-output"


def _pytorch_profiler_traces(folder: Path) -> Path:
    import torch

    with torch.profiler.profile() as profiler:
        torch.nn.Linear(4, 1)(torch.randn(2, 4)).sum().backward()
    profiler.export_chrome_trace(str(folder / "rank-0.pt.trace.json"))
    return folder


@pytest.mark.parametrize(
    "recorded", [_sagemaker_output, _pytorch_profiler_traces], ids=["sagemaker", "traces"]
)
def test_run_refuses_a_job_folder_that_holds_recorded_profiler_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], recorded: Callable[[Path], Path]
) -> None:
    # the new job's job.json and profiler-output/ went in beside them: every command then read
    # the new job there, and the recorded one was out of reach
    folder = recorded(tmp_path)
    before = sorted(folder.iterdir())
    argv = ["run", "--no-report", "--job-dir", str(folder), "--", sys.executable, "-c", "pass"]
    assert main(argv) == 2
    assert "--job-dir must be a folder that holds no job yet" in capsys.readouterr().err
    assert sorted(folder.iterdir()) == before
