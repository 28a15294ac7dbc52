"""The five profiling options: SageMaker's defaults, range resolution, enums and validation."""

from __future__ import annotations

import math

import pytest

from stepscope.config import (
    DataloaderProfilingConfig,
    DetailedProfilingConfig,
    DistributedProfilingConfig,
    HorovodProfilingConfig,
    PythonProfiler,
    PythonProfilingConfig,
    SMDataParallelProfilingConfig,
    cProfileTimer,
)
from stepscope.errors import ConfigError

ALL_OPTIONS = [
    DetailedProfilingConfig,
    DataloaderProfilingConfig,
    PythonProfilingConfig,
    HorovodProfilingConfig,
    SMDataParallelProfilingConfig,
]


@pytest.mark.parametrize(
    ("cls", "start_step", "num_steps"),
    [
        (DetailedProfilingConfig, 5, 1),
        (DataloaderProfilingConfig, 7, 1),
        (PythonProfilingConfig, 9, 3),
        (HorovodProfilingConfig, 13, 1),
        (SMDataParallelProfilingConfig, 15, 1),
    ],
)
def test_no_range_means_the_sagemaker_default_steps(cls, start_step, num_steps) -> None:
    config = cls()
    assert (config.start_step, config.num_steps) == (start_step, num_steps)
    assert (config.start_unix_time, config.duration) == (None, None)
    assert cls(profile_default_steps=True).profile_range() == config.profile_range()


def test_start_step_zero_is_step_zero() -> None:
    # SageMaker Debugger treated StartStep 0 as "no range" and never profiled it
    config = DetailedProfilingConfig(start_step=0)
    assert (config.start_step, config.num_steps) == (0, 1)
    assert config.profile_range().should_profile(0, now_s=0.0)
    assert not config.profile_range().should_profile(1, now_s=0.0)


def test_partial_step_ranges_fill_in_as_the_sdk_does() -> None:
    assert DetailedProfilingConfig(start_step=10).num_steps == 1
    assert DetailedProfilingConfig(num_steps=4).start_step == 0


def test_time_range_keeps_its_fields() -> None:
    config = PythonProfilingConfig(start_unix_time=1_700_000_000, duration=2.5)
    assert config.start_step is None and config.num_steps is None
    assert (config.start_unix_time, config.duration) == (1_700_000_000, 2.5)


def test_default_python_profiling_cycles_the_cprofile_timers() -> None:
    config = PythonProfilingConfig(profile_default_steps=True)
    assert config.cprofile_timer is cProfileTimer.DEFAULT
    assert [config.timer_for_step(step) for step in (9, 10, 11)] == [
        cProfileTimer.TOTAL_TIME,
        cProfileTimer.CPU_TIME,
        cProfileTimer.OFF_CPU_TIME,
    ]


def test_python_profiler_defaults_and_pyinstrument_has_no_timer() -> None:
    assert PythonProfilingConfig().python_profiler is PythonProfiler.CPROFILE
    assert PythonProfilingConfig().cprofile_timer is cProfileTimer.TOTAL_TIME
    config = PythonProfilingConfig(python_profiler=PythonProfiler.PYINSTRUMENT)
    assert config.cprofile_timer is None
    assert config.timer_for_step(9) is None


@pytest.mark.parametrize("name", ["cProfile", "cprofile", "CPROFILE"])
def test_python_profiler_accepts_its_names_in_any_case(name: str) -> None:
    assert PythonProfilingConfig(python_profiler=name).python_profiler is PythonProfiler.CPROFILE
    assert PythonProfiler(name) is PythonProfiler.CPROFILE


def test_pyinstrument_and_timer_names_as_strings() -> None:
    assert PythonProfiler("Pyinstrument") is PythonProfiler.PYINSTRUMENT
    config = PythonProfilingConfig(cprofile_timer="CPU_TIME")
    assert config.cprofile_timer is cProfileTimer.CPU_TIME
    assert PythonProfilingConfig(cprofile_timer="off_cpu_time").cprofile_timer is (
        cProfileTimer.OFF_CPU_TIME
    )


def test_dataloader_regex_is_kept_as_given() -> None:
    assert DataloaderProfilingConfig().metrics_regex == ".*"
    assert DataloaderProfilingConfig(metrics_regex="GetNext|Worker").metrics_regex == (
        "GetNext|Worker"
    )


def test_distributed_is_the_smdataparallel_option() -> None:
    assert DistributedProfilingConfig is SMDataParallelProfilingConfig
    assert DistributedProfilingConfig().start_step == 15


def test_configs_are_immutable_values() -> None:
    config = DetailedProfilingConfig(start_step=3, num_steps=2)
    assert config == DetailedProfilingConfig(start_step=3, num_steps=2)
    with pytest.raises(AttributeError):
        config.start_step = 4  # type: ignore[misc]


@pytest.mark.parametrize("cls", ALL_OPTIONS)
def test_to_dict_from_dict_round_trip(cls) -> None:
    for config in (cls(), cls(start_step=0, num_steps=2), cls(start_unix_time=10.5, duration=3)):
        assert cls.from_dict(config.to_dict()) == config


# -- validation: each error names the parameter, the value and what is allowed -------------------


@pytest.mark.parametrize(
    ("kwargs", "parameter", "allowed"),
    [
        ({"start_step": -1}, "DetailedProfilingConfig.start_step", "an integer >= 0"),
        ({"start_step": 2.0}, "DetailedProfilingConfig.start_step", "an integer >= 0"),
        ({"start_step": True}, "DetailedProfilingConfig.start_step", "an integer >= 0"),
        ({"start_step": "5"}, "DetailedProfilingConfig.start_step", "an integer >= 0"),
        ({"num_steps": 0}, "DetailedProfilingConfig.num_steps", "an integer >= 1"),
        ({"num_steps": -3}, "DetailedProfilingConfig.num_steps", "an integer >= 1"),
        ({"num_steps": False}, "DetailedProfilingConfig.num_steps", "an integer >= 1"),
        ({"duration": 0}, "DetailedProfilingConfig.duration", "a finite number > 0"),
        ({"duration": "10"}, "DetailedProfilingConfig.duration", "a finite number > 0"),
        ({"duration": math.inf}, "DetailedProfilingConfig.duration", "a finite number > 0"),
        ({"start_unix_time": -5}, "DetailedProfilingConfig.start_unix_time", "a Unix time"),
        ({"start_unix_time": math.inf}, "DetailedProfilingConfig.start_unix_time", "finite"),
    ],
)
def test_bad_range_values_are_refused(kwargs, parameter: str, allowed: str) -> None:
    with pytest.raises(ConfigError) as caught:
        DetailedProfilingConfig(**kwargs)
    assert caught.value.parameter == parameter
    assert allowed in str(caught.value)
    assert repr(next(iter(kwargs.values()))) in str(caught.value)


def test_step_and_time_range_together_is_an_error() -> None:
    with pytest.raises(ConfigError) as caught:
        DataloaderProfilingConfig(start_step=3, duration=10)
    message = str(caught.value)
    assert "DataloaderProfilingConfig" in message
    assert "either a step range" in message and "not both" in message


def test_profile_default_steps_with_a_range_is_an_error() -> None:
    with pytest.raises(ConfigError) as caught:
        PythonProfilingConfig(start_step=3, profile_default_steps=True)
    assert caught.value.parameter == "PythonProfilingConfig"
    assert "either profile_default_steps or a step or time range" in str(caught.value)
    assert caught.value.value == {"profile_default_steps": True, "start_step": 3}
    with pytest.raises(ConfigError, match="True or False"):
        PythonProfilingConfig(profile_default_steps="yes")  # type: ignore[arg-type]


def test_unknown_profiler_lists_the_allowed_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        PythonProfilingConfig(python_profiler="yappi")
    message = str(caught.value)
    assert caught.value.parameter == "PythonProfilingConfig.python_profiler"
    assert "'cprofile'" in message and "'pyinstrument'" in message and "'yappi'" in message


def test_unknown_cprofile_timer_lists_the_allowed_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        PythonProfilingConfig(cprofile_timer="wall_time")
    message = str(caught.value)
    assert caught.value.parameter == "PythonProfilingConfig.cprofile_timer"
    for allowed in ("total_time", "cpu_time", "off_cpu_time", "default"):
        assert allowed in message


def test_bad_regex_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        DataloaderProfilingConfig(metrics_regex="GetNext(")
    assert caught.value.parameter == "DataloaderProfilingConfig.metrics_regex"
    assert "a valid regular expression" in str(caught.value)
    with pytest.raises(ConfigError, match="a regular expression string"):
        DataloaderProfilingConfig(metrics_regex=3)  # type: ignore[arg-type]


def test_from_dict_refuses_unknown_keys() -> None:
    with pytest.raises(ConfigError) as caught:
        DetailedProfilingConfig.from_dict({"start_stpe": 3})
    assert "start_stpe" in str(caught.value) and "start_step" in caught.value.allowed
