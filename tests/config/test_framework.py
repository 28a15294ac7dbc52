"""FrameworkProfile: SageMaker's three scenarios, their precedence, and trace-file settings."""

from __future__ import annotations

import logging

import pytest

from stepscope.config import (
    OPTIONS,
    DataloaderProfilingConfig,
    DetailedProfilingConfig,
    DistributedProfilingConfig,
    FrameworkProfile,
    HorovodProfilingConfig,
    ProfileRange,
    PythonProfilingConfig,
    SMDataParallelProfilingConfig,
    cProfileTimer,
)
from stepscope.errors import ConfigError

FRAMEWORK_LOGGER = "stepscope.config.framework"


def test_options_are_the_five_sagemaker_options() -> None:
    assert OPTIONS == ("detailed", "dataloader", "python", "horovod", "smdataparallel")


def test_defaults_of_the_trace_files() -> None:
    profile = FrameworkProfile()
    assert profile.local_path is None
    assert profile.file_max_size == 10485760
    assert profile.file_close_interval == 60
    assert profile.file_open_fail_threshold == 50


def test_scenario_1_nothing_given_uses_every_option_default() -> None:
    profile = FrameworkProfile()
    assert profile.range_for("detailed") == ProfileRange(start_step=5, num_steps=1)
    assert profile.range_for("dataloader") == ProfileRange(start_step=7, num_steps=1)
    assert profile.range_for("python") == ProfileRange(start_step=9, num_steps=3)
    assert profile.range_for("horovod") == ProfileRange(start_step=13, num_steps=1)
    assert profile.range_for("smdataparallel") == ProfileRange(start_step=15, num_steps=1)
    python = profile.effective_config("python")
    assert isinstance(python, PythonProfilingConfig)
    assert python.cprofile_timer is cProfileTimer.DEFAULT
    assert profile.enabled_options() == OPTIONS


def test_scenario_2_a_step_range_propagates_to_every_option() -> None:
    profile = FrameworkProfile(start_step=6, num_steps=1)
    for option in OPTIONS:
        assert profile.range_for(option) == ProfileRange(start_step=6, num_steps=1), option
    python = profile.effective_config("python")
    assert isinstance(python, PythonProfilingConfig)
    assert python.cprofile_timer is cProfileTimer.TOTAL_TIME


def test_scenario_2_a_time_range_propagates_to_every_option() -> None:
    profile = FrameworkProfile(start_unix_time=1_700_000_000, duration=30)
    for option in OPTIONS:
        expected = ProfileRange(start_unix_time=1_700_000_000, duration=30)
        assert profile.range_for(option) == expected, option


def test_scenario_3_only_the_given_options_profile() -> None:
    profile = FrameworkProfile(
        detailed_profiling_config=DetailedProfilingConfig(start_step=10, num_steps=1),
        dataloader_profiling_config=DataloaderProfilingConfig(start_step=9, num_steps=2),
        python_profiling_config=PythonProfilingConfig(start_step=12, num_steps=1),
    )
    assert profile.range_for("detailed") == ProfileRange(start_step=10, num_steps=1)
    assert profile.range_for("dataloader") == ProfileRange(start_step=9, num_steps=2)
    assert profile.range_for("python") == ProfileRange(start_step=12, num_steps=1)
    assert profile.range_for("horovod") is None
    assert profile.range_for("smdataparallel") is None
    assert profile.enabled_options() == ("detailed", "dataloader", "python")


def test_per_option_configs_win_over_the_global_range_and_say_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger=FRAMEWORK_LOGGER):
        profile = FrameworkProfile(
            start_step=1,
            num_steps=10,
            detailed_profiling_config=DetailedProfilingConfig(start_step=10, num_steps=1),
        )
    assert profile.range_for("detailed") == ProfileRange(start_step=10, num_steps=1)
    assert profile.range_for("python") is None
    ignored = [r for r in caplog.records if "ignored" in r.getMessage()]
    assert len(ignored) == 1
    assert ignored[0].levelno == logging.INFO
    assert "start_step=1" in ignored[0].getMessage() and "num_steps=10" in ignored[0].getMessage()


def test_no_precedence_message_without_a_conflict(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=FRAMEWORK_LOGGER):
        FrameworkProfile(detailed_profiling_config=DetailedProfilingConfig())
        FrameworkProfile(start_step=3)
    assert caplog.records == []


def test_range_for_returns_a_fresh_range_each_call() -> None:
    profile = FrameworkProfile(start_unix_time=100.0)
    first = profile.range_for("detailed")
    second = profile.range_for("detailed")
    assert first is not None and second is not None and first is not second
    assert first.should_profile(7, now_s=100.0)
    assert second.should_profile(8, now_s=101.0), "state of one range does not leak into another"


def test_distributed_is_an_alias_of_smdataparallel() -> None:
    config = DistributedProfilingConfig(start_step=2, num_steps=4)
    profile = FrameworkProfile(distributed_profiling_config=config)
    assert profile.smdataparallel_profiling_config == config
    assert profile.range_for("distributed") == ProfileRange(start_step=2, num_steps=4)
    assert profile.range_for("smdataparallel") == ProfileRange(start_step=2, num_steps=4)
    assert FrameworkProfile().range_for("distributed") == ProfileRange(start_step=15, num_steps=1)


def test_distributed_and_smdataparallel_that_disagree_are_an_error() -> None:
    with pytest.raises(ConfigError, match=r"FrameworkProfile\.distributed_profiling_config"):
        FrameworkProfile(
            smdataparallel_profiling_config=SMDataParallelProfilingConfig(start_step=1),
            distributed_profiling_config=DistributedProfilingConfig(start_step=2),
        )


def test_unknown_option_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        FrameworkProfile().range_for("kernels")
    message = str(caught.value)
    assert "'kernels'" in message
    for option in (*OPTIONS, "distributed"):
        assert repr(option) in message


def test_local_path_keeps_its_case() -> None:
    assert FrameworkProfile(local_path="/tmp/MyRun").local_path == "/tmp/MyRun"


def test_a_long_detailed_range_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=FRAMEWORK_LOGGER):
        FrameworkProfile(detailed_profiling_config=DetailedProfilingConfig(num_steps=301))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "301 steps" in warnings[0].getMessage() and "300" in warnings[0].getMessage()


def test_a_global_range_that_is_long_warns_and_300_steps_do_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger=FRAMEWORK_LOGGER):
        FrameworkProfile(start_step=0, num_steps=300)
        FrameworkProfile(
            detailed_profiling_config=DetailedProfilingConfig(num_steps=2),
            dataloader_profiling_config=DataloaderProfilingConfig(num_steps=100_000),
        )
    assert caplog.records == []
    with caplog.at_level(logging.WARNING, logger=FRAMEWORK_LOGGER):
        FrameworkProfile(start_step=0, num_steps=1000)
    assert len(caplog.records) == 1


@pytest.mark.parametrize(
    ("kwargs", "parameter", "allowed"),
    [
        ({"file_max_size": 0}, "FrameworkProfile.file_max_size", "an integer >= 1"),
        ({"file_max_size": 1.5}, "FrameworkProfile.file_max_size", "an integer >= 1"),
        ({"file_close_interval": 0}, "FrameworkProfile.file_close_interval", "a finite number > 0"),
        (
            {"file_close_interval": -1.0},
            "FrameworkProfile.file_close_interval",
            "a finite number > 0",
        ),
        ({"file_open_fail_threshold": 0}, "FrameworkProfile.file_open_fail_threshold", ">= 1"),
        ({"local_path": 3}, "FrameworkProfile.local_path", "path string"),
        ({"local_path": ""}, "FrameworkProfile.local_path", "path string"),
        ({"start_step": -2}, "FrameworkProfile.start_step", "an integer >= 0"),
        ({"num_steps": 0}, "FrameworkProfile.num_steps", "an integer >= 1"),
        (
            {"detailed_profiling_config": DataloaderProfilingConfig()},
            "FrameworkProfile.detailed_profiling_config",
            "a DetailedProfilingConfig or None",
        ),
        (
            {"horovod_profiling_config": {"start_step": 1}},
            "FrameworkProfile.horovod_profiling_config",
            "a HorovodProfilingConfig or None",
        ),
    ],
)
def test_bad_values_are_refused(kwargs, parameter: str, allowed: str) -> None:
    with pytest.raises(ConfigError) as caught:
        FrameworkProfile(**kwargs)
    assert caught.value.parameter == parameter
    assert allowed in str(caught.value)


def test_global_step_and_time_range_together_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"FrameworkProfile must be either a step range"):
        FrameworkProfile(start_step=5, start_unix_time=1_700_000_000)


def test_to_dict_from_dict_round_trip() -> None:
    profiles = [
        FrameworkProfile(),
        FrameworkProfile(local_path="/data/Run1", start_step=0, num_steps=2),
        FrameworkProfile(
            file_max_size=1024,
            file_close_interval=0.5,
            python_profiling_config=PythonProfilingConfig(python_profiler="pyinstrument"),
            horovod_profiling_config=HorovodProfilingConfig(duration=3),
        ),
    ]
    for profile in profiles:
        assert FrameworkProfile.from_dict(profile.to_dict()) == profile
