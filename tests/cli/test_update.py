"""``stepscope update``: rewrites a job's profiler-config.json and prints what changed."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from stepscope.cli import main
from stepscope.config import (
    DetailedProfilingConfig,
    FrameworkProfile,
    ProfileRange,
    ProfilerConfig,
    PythonProfiler,
)


@pytest.fixture
def job(tmp_path):
    job_dir = tmp_path / "job"
    ProfilerConfig(framework_profile_params=FrameworkProfile(local_path="/tmp/MyRun")).to_file(
        job_dir / "profiler-config.json"
    )
    return job_dir


def _config(job) -> ProfilerConfig:
    return ProfilerConfig.from_file(job / "profiler-config.json")


def test_update_rewrites_the_config_and_prints_the_changes(job, capsys) -> None:
    code = main(["update", str(job), "--detailed", "100:5", "--python-profiler", "Pyinstrument"])
    assert code == 0
    out = capsys.readouterr().out
    assert "detailed" in out and "step 5 -> steps 100-104" in out
    assert "pyinstrument" in out
    assert "dataloader" not in out, "unchanged settings are not listed"
    framework = _config(job).framework_profile_params
    assert framework is not None
    assert framework.range_for("detailed") == ProfileRange(start_step=100, num_steps=5)
    assert framework.python_profiling_config is not None
    assert framework.python_profiling_config.python_profiler is PythonProfiler.PYINSTRUMENT
    assert framework.local_path == "/tmp/MyRun"


def test_disable_enable_interval_and_off(job, capsys) -> None:
    assert (
        main(
            ["update", str(job), "--disable", "--system-interval-ms", "1000", "--dataloader", "off"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "enabled -> disabled" in out and "500 ms -> 1000 ms" in out and "-> off" in out
    config = _config(job)
    assert config.disable_profiler and config.system_monitor_interval_millis == 1000
    assert main(["update", str(job), "--enable"]) == 0
    assert _config(job).disable_profiler is False


def test_distributed_changes_are_printed_under_their_flags_name(job, capsys) -> None:
    assert main(["update", str(job), "--distributed", "5:2"]) == 0
    assert "  distributed  step 15 -> steps 5-6\n" in capsys.readouterr().out


def test_nothing_to_change(job, capsys) -> None:
    assert main(["update", str(job)]) == 0
    assert "nothing changed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "arguments",
    [
        ["--detailed", "5"],
        ["--detailed", "a:b"],
        ["--python-profiler", "yappi"],
        ["--system-interval-ms", "300"],
        ["--disable", "--enable"],
    ],
)
def test_bad_arguments_exit_2_and_keep_the_file(job, arguments) -> None:
    before = (job / "profiler-config.json").read_bytes()
    with pytest.raises(SystemExit) as caught:
        main(["update", str(job), *arguments])
    assert caught.value.code == 2
    assert (job / "profiler-config.json").read_bytes() == before


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--detailed", "3:0"], "--detailed NUM must be an integer >= 1, got 0"),
        (["--python=-1:2"], "--python START must be an integer >= 0, got -1"),
        (["--distributed=4:-2"], "--distributed NUM must be an integer >= 1, got -2"),
        (["--python", "off", "--cprofile-timer", "cpu_time"], "--cprofile-timer must be set"),
    ],
)
def test_an_invalid_value_is_a_config_error_naming_the_flag(
    job, capsys, arguments, message
) -> None:
    before = (job / "profiler-config.json").read_bytes()
    assert main(["update", str(job), *arguments]) == 2
    assert message in capsys.readouterr().err
    assert (job / "profiler-config.json").read_bytes() == before


def test_a_folder_that_is_not_a_job_exits_1(tmp_path, capsys) -> None:
    assert main(["update", str(tmp_path), "--detailed", "1:1"]) == 1
    assert "profiler-config.json" in capsys.readouterr().err


def test_a_url_is_named_as_typed(capsys) -> None:
    # read as a path, s3://bucket/job was named 's3:/bucket/job', which was never typed
    assert main(["update", "s3://bucket/job", "--detailed", "5:1"]) == 1
    assert "No profiling job or trace found at 's3://bucket/job'." in capsys.readouterr().err


def test_a_job_profile_recorded_into_a_local_path_says_it_cannot_be_updated(
    tmp_path, capsys
) -> None:
    import torch

    import stepscope

    output = tmp_path / "profiler"
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    config = ProfilerConfig(framework_profile_params=FrameworkProfile(local_path=str(output)))
    with stepscope.profile(config):
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.randn(2, 4)).sum().backward()
            optimizer.step()
    assert (output / "framework").is_dir()
    assert not (tmp_path / "profiler-config.json").exists()  # the folder holding it is not ours
    assert main(["update", str(output), "--detailed", "1:1"]) == 2
    err = capsys.readouterr().err
    assert "No profiling job" not in err
    assert "started by `stepscope run`, stepscope.launch() or stepscope.profile()" in err
    assert "FrameworkProfile.local_path" in err and "no profiler-config.json" in err


def test_the_config_file_itself_points_to_its_job_folder(job, capsys) -> None:
    config_file = job / "profiler-config.json"
    before = config_file.read_bytes()
    assert main(["update", str(config_file), "--detailed", "1:1"]) == 2
    err = capsys.readouterr().err
    assert "No profiling job" not in err
    assert f"Give the job folder that holds it: {job}." in err
    assert config_file.read_bytes() == before


def test_the_profiler_output_folder_points_to_its_job_folder(job, capsys) -> None:
    (job / "profiler-output" / "system").mkdir(parents=True)
    assert main(["update", str(job / "profiler-output"), "--detailed", "1:1"]) == 2
    err = capsys.readouterr().err
    assert f"Give the job folder that holds it: {job}." in err
    assert "keeps the configuration it started with" not in err


def test_the_console_command_runs_in_its_own_process(job) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "stepscope", "update", str(job), "--python", "20:2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "steps 9-11" in result.stdout and "steps 20-21" in result.stdout
    assert _config(job).range_for("python") == ProfileRange(start_step=20, num_steps=2)


@pytest.mark.parametrize(
    ("status", "started", "note"),
    [
        ("Running", ProfilerConfig(), "not instrumented"),
        (
            "Running",
            ProfilerConfig(framework_profile_params=FrameworkProfile(), disable_profiler=True),
            "not instrumented",
        ),
    ],
    ids=["system-only", "started-disabled"],
)
def test_a_change_that_cannot_reach_the_job_says_so(
    job, caplog, status: str, started: ProfilerConfig, note: str
) -> None:
    started.to_file(job / "profiler-config.json")
    info = {"status": status, "profiler_config": started.to_dict()}
    (job / "job.json").write_text(json.dumps(info))
    with caplog.at_level(logging.WARNING, logger="stepscope.cli.update"):
        assert main(["update", str(job), "--detailed", "30:2", "--enable"]) == 0
    assert [note in record.getMessage() for record in caplog.records] == [True]


@pytest.mark.parametrize("status", ["Completed", "Failed", "Stopped"])
def test_a_job_that_no_longer_runs_is_refused_and_left_unchanged(job, capsys, status) -> None:
    started = _config(job)
    info = {"status": status, "profiler_config": started.to_dict()}
    (job / "job.json").write_text(json.dumps(info))
    before = (job / "profiler-config.json").read_bytes()
    assert main(["update", str(job), "--detailed", "30:2"]) == 2
    error = capsys.readouterr().err
    assert "a running job" in error and f"The job is {status}" in error
    assert (job / "profiler-config.json").read_bytes() == before


def test_an_invalid_value_is_reported_before_the_job_is_found_ended(job, capsys) -> None:
    # the range was the thing to fix, yet the error only said that the job had ended
    info = {"status": "Completed", "profiler_config": _config(job).to_dict()}
    (job / "job.json").write_text(json.dumps(info))
    assert main(["update", str(job), "--detailed", "3:0"]) == 2
    error = capsys.readouterr().err
    assert error == "stepscope: error: --detailed NUM must be an integer >= 1, got 0.\n"


def test_a_running_instrumented_job_gets_no_warning(job, caplog) -> None:
    started = _config(job)
    info = {"status": "Running", "profiler_config": started.to_dict()}
    (job / "job.json").write_text(json.dumps(info))
    with caplog.at_level(logging.WARNING, logger="stepscope.cli.update"):
        assert main(["update", str(job), "--detailed", "30:2"]) == 0
    assert caplog.records == []


def test_shortening_a_long_detailed_range_does_not_warn_about_the_old_one(tmp_path, caplog) -> None:
    job = tmp_path / "job"
    long = FrameworkProfile(detailed_profiling_config=DetailedProfilingConfig(num_steps=400))
    ProfilerConfig(framework_profile_params=long).to_file(job / "profiler-config.json")
    caplog.clear()  # the warning of the configuration given
    with caplog.at_level(logging.WARNING, logger="stepscope"):
        assert main(["update", str(job), "--detailed", "5:1"]) == 0
    assert [record.getMessage() for record in caplog.records] == []
    with caplog.at_level(logging.WARNING, logger="stepscope"):
        assert main(["update", str(job), "--detailed", "0:500"]) == 0
    assert ["500 steps" in record.getMessage() for record in caplog.records] == [True]


def test_every_node_of_a_multi_node_job_gets_the_change_or_none_does(tmp_path, capsys) -> None:
    # a job run with one folder per node could only be changed one node at a time
    nodes = [tmp_path / "node0", tmp_path / "node1"]
    for job_dir in nodes:
        ProfilerConfig(framework_profile_params=FrameworkProfile()).to_file(
            job_dir / "profiler-config.json"
        )
    assert main(["update", *map(str, nodes), "--detailed", "100:5"]) == 0
    out = capsys.readouterr().out
    for job_dir in nodes:
        assert f"updated {job_dir / 'profiler-config.json'}" in out
        framework = _config(job_dir).framework_profile_params
        assert framework is not None
        assert framework.range_for("detailed") == ProfileRange(start_step=100, num_steps=5)
    # a node whose job has ended: the change reaches neither
    info = {"status": "Completed", "profiler_config": _config(nodes[1]).to_dict()}
    (nodes[1] / "job.json").write_text(json.dumps(info))
    before = [(job_dir / "profiler-config.json").read_bytes() for job_dir in nodes]
    assert main(["update", *map(str, nodes), "--detailed", "7:1"]) == 2
    assert "The job is Completed" in capsys.readouterr().err
    assert [(job_dir / "profiler-config.json").read_bytes() for job_dir in nodes] == before


@pytest.mark.parametrize("buffering", [["-u"], []], ids=["unbuffered", "buffered"])
def test_every_node_takes_the_change_though_the_output_is_gone(tmp_path, buffering) -> None:
    # `stepscope update node0 node1 ... | head -0`: the first line printed failed, and node1
    # never got the change node0 had; then it ended with "Broken pipe" and status 1 (or, with
    # the output buffered, Python's "Exception ignored" and 120), as if the change had failed
    nodes = [tmp_path / "node0", tmp_path / "node1"]
    for job_dir in nodes:
        ProfilerConfig(framework_profile_params=FrameworkProfile()).to_file(
            job_dir / "profiler-config.json"
        )
    read, write = os.pipe()
    os.close(read)  # the reader is gone before a word is written
    try:
        result = subprocess.run(
            [sys.executable, *buffering, "-m", "stepscope", "update", *map(str, nodes)]
            + ["--detailed", "100:5"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)
    for job_dir in nodes:
        assert _config(job_dir).range_for("detailed") == ProfileRange(start_step=100, num_steps=5)
    assert "Broken pipe" not in result.stderr and "Exception" not in result.stderr, result.stderr
    assert result.returncode == 128 + 13  # as a shell reports a command SIGPIPE ended
