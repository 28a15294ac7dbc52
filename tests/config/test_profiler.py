"""ProfilerConfig: defaults, switching things off, validation, plain values and the environment."""

from __future__ import annotations

import logging

import pytest

from stepscope.config import (
    OPTIONS,
    DetailedProfilingConfig,
    FrameworkProfile,
    Profiler,
    ProfileRange,
    ProfilerConfig,
    PythonProfilingConfig,
)
from stepscope.errors import ConfigError


def test_defaults_are_system_monitoring_every_500_ms_only() -> None:
    config = ProfilerConfig()
    assert config.system_monitor_interval_millis == 500
    assert config.framework_profile_params is None
    assert config.disable_profiler is False
    assert config.system_monitoring_enabled
    assert not config.framework_profiling_enabled
    assert all(config.range_for(option) is None for option in OPTIONS)


def test_none_interval_means_the_default() -> None:
    assert ProfilerConfig(system_monitor_interval_millis=None).system_monitor_interval_millis == 500  # type: ignore[arg-type]


def test_framework_profile_turns_on_framework_profiling() -> None:
    config = ProfilerConfig(framework_profile_params=FrameworkProfile())
    assert config.framework_profiling_enabled
    assert config.range_for("detailed") == ProfileRange(start_step=5, num_steps=1)


def test_disable_profiler_turns_everything_off() -> None:
    config = ProfilerConfig(framework_profile_params=FrameworkProfile(), disable_profiler=True)
    assert not config.system_monitoring_enabled
    assert not config.framework_profiling_enabled
    assert all(config.range_for(option) is None for option in OPTIONS)


@pytest.mark.parametrize("interval_ms", [100, 200, 500, 1000, 5000, 60000])
def test_every_sagemaker_interval_is_accepted(interval_ms: int) -> None:
    assert (
        ProfilerConfig(system_monitor_interval_millis=interval_ms).system_monitor_interval_millis
        == interval_ms
    )


@pytest.mark.parametrize("interval_ms", [0, 250, 59999, -500, 500.0, True, "500"])
def test_other_intervals_are_refused_with_the_allowed_list(interval_ms: object) -> None:
    with pytest.raises(ConfigError) as caught:
        ProfilerConfig(system_monitor_interval_millis=interval_ms)  # type: ignore[arg-type]
    assert caught.value.parameter == "ProfilerConfig.system_monitor_interval_millis"
    assert "one of 100, 200, 500, 1000, 5000, 60000" in str(caught.value)


@pytest.mark.parametrize(
    ("kwargs", "parameter", "allowed"),
    [
        ({"disable_profiler": "true"}, "ProfilerConfig.disable_profiler", "True or False"),
        ({"disable_profiler": 1}, "ProfilerConfig.disable_profiler", "True or False"),
        (
            {"framework_profile_params": {}},
            "ProfilerConfig.framework_profile_params",
            "a FrameworkProfile or None",
        ),
        ({"s3_output_path": 5}, "ProfilerConfig.s3_output_path", "a string or None"),
        ({"profile_params": 3600}, "ProfilerConfig.profile_params", "a Profiler or None"),
    ],
)
def test_wrong_types_are_refused(kwargs, parameter: str, allowed: str) -> None:
    with pytest.raises(ConfigError) as caught:
        ProfilerConfig(**kwargs)
    assert caught.value.parameter == parameter
    assert allowed in str(caught.value)


def _samples() -> list[ProfilerConfig]:
    return [
        ProfilerConfig(),
        ProfilerConfig(disable_profiler=True, s3_output_path="s3://bucket/Job-1/profiler"),
        ProfilerConfig(
            system_monitor_interval_millis=100,
            framework_profile_params=FrameworkProfile(local_path="/tmp/MyRun", start_step=0),
        ),
        ProfilerConfig(
            framework_profile_params=FrameworkProfile(
                detailed_profiling_config=DetailedProfilingConfig(
                    start_unix_time=1.7e9, duration=2
                ),
                python_profiling_config=PythonProfilingConfig(python_profiler="Pyinstrument"),
            )
        ),
        ProfilerConfig(profile_params=Profiler(cpu_profiling_duration=60)),
    ]


@pytest.mark.parametrize("config", _samples())
def test_to_dict_from_dict_round_trip(config: ProfilerConfig) -> None:
    assert ProfilerConfig.from_dict(config.to_dict()) == config


def test_to_dict_is_plain_json_values() -> None:
    data = _samples()[3].to_dict()
    python = data["framework_profile_params"]["python_profiling_config"]
    assert python["python_profiler"] == "pyinstrument"
    assert python["cprofile_timer"] is None
    assert data["framework_profile_params"]["detailed_profiling_config"]["duration"] == 2


def test_sagemaker_profiler_launcher_code_ports_with_its_imports_changed(tmp_path) -> None:
    # SageMaker Profiler's launcher: ProfilerConfig(profile_params=Profiler(...))
    from stepscope import Profiler as PublicProfiler
    from stepscope import ProfilerConfig as PublicProfilerConfig

    config = PublicProfilerConfig(profile_params=PublicProfiler(cpu_profiling_duration=3600))
    assert config.profile_params == Profiler()
    path = config.to_file(tmp_path / "profiler-config.yaml")
    assert ProfilerConfig.from_file(path).profile_params == Profiler(cpu_profiling_duration=3600)
    with pytest.raises(ConfigError) as caught:
        ProfilerConfig.from_dict({"profile_params": {"cpu_profiling_seconds": 60}})
    assert caught.value.parameter == "Profiler key"
    assert "cpu_profiling_duration" in caught.value.allowed


def test_profiler_takes_the_sagemaker_sdk_signature() -> None:
    # the SDK's Profiler(cpu_profiling_duration: str = "3600", file_rotation_interval: str =
    # "600"): its strings were refused, and file_rotation_interval was a TypeError
    assert Profiler(cpu_profiling_duration="1800", file_rotation_interval="300") == Profiler(
        cpu_profiling_duration=1800, file_rotation_interval=300
    )
    assert Profiler().file_rotation_interval == 600
    for bad in ("1h", "", 0, True, 2.5):
        with pytest.raises(ConfigError) as caught:
            Profiler(file_rotation_interval=bad)  # type: ignore[arg-type]
        assert caught.value.parameter == "Profiler.file_rotation_interval"
        assert "an integer >= 1 (or its digits as a string)" in str(caught.value)


def test_from_dict_refuses_a_misspelt_key() -> None:
    with pytest.raises(ConfigError) as caught:
        ProfilerConfig.from_dict({"system_monitor_interval_ms": 100})
    assert "system_monitor_interval_ms" in str(caught.value)
    assert "system_monitor_interval_millis" in caught.value.allowed


def test_from_env_reads_the_file_named_by_stepscope_config(tmp_path) -> None:
    path = ProfilerConfig(system_monitor_interval_millis=1000).to_file(tmp_path / "a.json")
    assert ProfilerConfig.from_env({"STEPSCOPE_CONFIG": str(path)}) == ProfilerConfig(
        system_monitor_interval_millis=1000
    )


def test_from_env_uses_os_environ_by_default(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = ProfilerConfig(system_monitor_interval_millis=200).to_file(tmp_path / "a.yaml")
    monkeypatch.setenv("STEPSCOPE_CONFIG", str(path))
    loaded = ProfilerConfig.from_env()
    assert loaded is not None and loaded.system_monitor_interval_millis == 200


def test_from_env_falls_back_to_sagemakers_variable(tmp_path) -> None:
    ours = ProfilerConfig(system_monitor_interval_millis=200).to_file(tmp_path / "ours.json")
    theirs = tmp_path / "profilerconfig.json"
    theirs.write_text('{"ProfilingIntervalInMilliseconds": 5000}')
    both = {"STEPSCOPE_CONFIG": str(ours), "SMPROFILER_CONFIG_PATH": str(theirs)}
    assert ProfilerConfig.from_env(both).system_monitor_interval_millis == 200  # type: ignore[union-attr]
    only_sagemaker = {"SMPROFILER_CONFIG_PATH": str(theirs)}
    assert ProfilerConfig.from_env(only_sagemaker).system_monitor_interval_millis == 5000  # type: ignore[union-attr]


def test_from_env_without_a_variable_is_none() -> None:
    assert ProfilerConfig.from_env({}) is None
    assert ProfilerConfig.from_env({"STEPSCOPE_CONFIG": ""}) is None


def test_from_env_with_a_missing_file_warns_and_is_none(tmp_path, caplog) -> None:
    missing = tmp_path / "gone.json"
    with caplog.at_level(logging.WARNING, logger="stepscope.config.profiler"):
        assert ProfilerConfig.from_env({"STEPSCOPE_CONFIG": str(missing)}) is None
    assert len(caplog.records) == 1 and "gone.json" in caplog.records[0].getMessage()


def test_from_env_with_an_invalid_file_raises(tmp_path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"system_monitor_interval_millis": 7}')
    with pytest.raises(ConfigError, match="system_monitor_interval_millis"):
        ProfilerConfig.from_env({"STEPSCOPE_CONFIG": str(path)})
