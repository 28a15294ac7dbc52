"""The pieces of launch() that need no child process."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from stepscope.config import FrameworkProfile, ProfilerConfig
from stepscope.errors import ConfigError
from stepscope.launcher import (
    _child_command,
    _command_name,
    _with_local_path,
    launch,
    parse_hyperparameters,
)


def test_hyperparameters_are_parsed_from_the_command_line() -> None:
    args = ["python", "train.py", "--lr", "0.1", "--epochs=3", "--amp", "--name", "run-a"]
    assert parse_hyperparameters(args) == {"lr": 0.1, "epochs": 3, "amp": True, "name": "run-a"}


def test_job_names_come_from_the_script_or_module() -> None:
    assert _command_name(["python", "path/to/train.py", "--x", "1"]) == "train"
    assert _command_name(["python", "-m", "pkg.trainer"]) == "trainer"
    assert _command_name(["./run-me"]) == "run-me"


def test_several_processes_per_node_run_through_torchrun() -> None:
    command = _child_command(["python", "train.py", "--lr", "1"], 2)
    assert command[1:4] == ["-m", "torch.distributed.run", "--standalone"]
    assert command[4:] == ["--nproc-per-node=2", "train.py", "--lr", "1"]
    assert _child_command(["python", "train.py"], 1) == ["python", "train.py"]


def test_a_local_path_elsewhere_is_replaced_by_the_job_folder_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    output = tmp_path / "job" / "profiler-output"
    given = ProfilerConfig(framework_profile_params=FrameworkProfile(local_path="/data/MyRun"))
    with caplog.at_level(logging.WARNING, logger="stepscope.launcher"):
        config = _with_local_path(given, output)
    assert config.framework_profile_params is not None
    assert config.framework_profile_params.local_path == str(output)
    [record] = caplog.records
    assert "/data/MyRun is not used" in record.getMessage()
    assert str(output) in record.getMessage() and "--job-dir" in record.getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="stepscope.launcher"):
        _with_local_path(ProfilerConfig(framework_profile_params=FrameworkProfile()), output)
    assert caplog.records == []


def test_launch_refuses_a_script_that_is_not_there(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    with pytest.raises(ConfigError) as caught:
        launch(str(tmp_path / "trian.py"), job_dir=job_dir)
    assert caught.value.parameter == "command"
    assert str(tmp_path / "trian.py") in str(caught.value)
    assert not job_dir.exists()


@pytest.mark.parametrize(
    "flags", [["-I"], ["-E"], ["-S"], ["-u", "-BI"], ["-W", "ignore", "-E"]], ids=" ".join
)
def test_launch_refuses_an_interpreter_flag_that_would_leave_the_script_unprofiled(
    tmp_path: Path, flags: list[str]
) -> None:
    # the script ran, without the bootstrap, and the job ended with no framework data, unsaid
    script = tmp_path / "train.py"
    script.write_text("print('trained')\n")
    job_dir = tmp_path / "job"
    with pytest.raises(ConfigError) as caught:
        launch([sys.executable, *flags, str(script)], job_dir=job_dir)
    assert caught.value.parameter == "command"
    assert "drop that option" in str(caught.value)
    assert not job_dir.exists()
