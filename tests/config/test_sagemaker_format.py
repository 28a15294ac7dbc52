"""Reading SageMaker's own profilerconfig.json shape, without eval and without lower-casing values."""

from __future__ import annotations

import json
import logging

import pytest

from stepscope.config import (
    DataloaderProfilingConfig,
    DetailedProfilingConfig,
    FrameworkProfile,
    HorovodProfilingConfig,
    Profiler,
    ProfileRange,
    ProfilerConfig,
    PythonProfiler,
    PythonProfilingConfig,
    SMDataParallelProfilingConfig,
    cProfileTimer,
)
from stepscope.errors import ConfigError

# What the SageMaker Python SDK sends for FrameworkProfile(): every value a string, each metrics
# config a Python-dict-like string with a trailing comma (the SDK's convert_json_config_to_string).
SDK_DEFAULTS = {
    "S3OutputPath": "s3://bucket/Job-1/",
    "ProfilingIntervalInMilliseconds": 500,
    "DisableProfiler": False,
    "ProfilingParameters": {
        "LocalPath": "/opt/ml/output/profiler",
        "RotateMaxFileSizeInBytes": "10485760",
        "RotateFileCloseIntervalInSeconds": "60",
        "FileOpenFailThreshold": "50",
        "DetailedProfilingConfig": '{"StartStep": 5, "NumSteps": 1, }',
        "DataloaderProfilingConfig": '{"StartStep": 7, "NumSteps": 1, "MetricsRegex": ".*", }',
        "PythonProfilingConfig": '{"StartStep": 9, "NumSteps": 3, "ProfilerName": "cprofile", "cProfileTimer": "default", }',
        "HorovodProfilingConfig": '{"StartStep": 13, "NumSteps": 1, }',
        "SMDataParallelProfilingConfig": '{"StartStep": 15, "NumSteps": 1, }',
    },
}


def _write(tmp_path, data, name="profilerconfig.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_sdk_default_file_reads_as_the_sdk_objects(tmp_path) -> None:
    config = ProfilerConfig.from_file(_write(tmp_path, SDK_DEFAULTS))
    assert config == ProfilerConfig(
        s3_output_path="s3://bucket/Job-1/",
        system_monitor_interval_millis=500,
        framework_profile_params=FrameworkProfile(
            local_path="/opt/ml/output/profiler",
            detailed_profiling_config=DetailedProfilingConfig(start_step=5, num_steps=1),
            dataloader_profiling_config=DataloaderProfilingConfig(start_step=7, num_steps=1),
            python_profiling_config=PythonProfilingConfig(profile_default_steps=True),
            horovod_profiling_config=HorovodProfilingConfig(start_step=13, num_steps=1),
            smdataparallel_profiling_config=SMDataParallelProfilingConfig(
                start_step=15, num_steps=1
            ),
        ),
    )


def test_metrics_configs_may_be_objects_and_numbers_may_be_numbers(tmp_path) -> None:
    data = {
        "ProfilingParameters": {
            "LocalPath": "/tmp/MyRun",
            "RotateMaxFileSizeInBytes": 2048,
            "DetailedProfilingConfig": {"StartStep": "0", "NumSteps": "3"},
            "PythonProfilingConfig": {"StartStep": 2, "ProfilerName": "Pyinstrument"},
        }
    }
    framework = ProfilerConfig.from_file(_write(tmp_path, data)).framework_profile_params
    assert framework is not None
    assert framework.local_path == "/tmp/MyRun", "values keep their case"
    assert framework.file_max_size == 2048
    assert framework.range_for("detailed") == ProfileRange(start_step=0, num_steps=3)
    python = framework.effective_config("python")
    assert isinstance(python, PythonProfilingConfig)
    assert python.python_profiler is PythonProfiler.PYINSTRUMENT
    assert framework.range_for("dataloader") is None


def test_time_ranges_read_both_duration_spellings(tmp_path) -> None:
    data = {
        "ProfilingParameters": {
            "DetailedProfilingConfig": '{"StartTimeInSecSinceEpoch": 1700000000, "DurationInSeconds": 10}',
            "DataloaderProfilingConfig": '{"StartTimeInSecSinceEpoch": 1700000000.5, "Duration": 2.5, }',
        }
    }
    framework = ProfilerConfig.from_file(_write(tmp_path, data)).framework_profile_params
    assert framework is not None
    assert framework.range_for("detailed") == ProfileRange(
        start_unix_time=1_700_000_000, duration=10
    )
    assert framework.range_for("dataloader") == ProfileRange(
        start_unix_time=1_700_000_000.5, duration=2.5
    )


def test_keys_match_in_any_case_values_do_not_change(tmp_path) -> None:
    data = {
        "profilingparameters": {
            "localpath": "/Data/Run",
            "dataLoaderProfilingConfig": '{"startstep": 4, "metricsregex": "GetNext"}',
            "pythonprofilingconfig": {"profilername": "cProfile", "cprofiletimer": "CPU_TIME"},
        },
        "profilingintervalinmilliseconds": "1000",
    }
    config = ProfilerConfig.from_file(_write(tmp_path, data))
    framework = config.framework_profile_params
    assert config.system_monitor_interval_millis == 1000
    assert framework is not None and framework.local_path == "/Data/Run"
    dataloader = framework.dataloader_profiling_config
    assert dataloader == DataloaderProfilingConfig(start_step=4, metrics_regex="GetNext")
    python = framework.python_profiling_config
    assert python is not None and python.cprofile_timer is cProfileTimer.CPU_TIME


def test_disable_profiler_and_missing_parameters(tmp_path) -> None:
    disabled = ProfilerConfig.from_file(
        _write(tmp_path, {"DisableProfiler": "true", "ProfilingParameters": {}})
    )
    assert disabled.disable_profiler is True
    assert disabled.framework_profile_params is None
    system_only = ProfilerConfig.from_file(
        _write(tmp_path, {"ProfilingIntervalInMilliseconds": 100})
    )
    assert system_only == ProfilerConfig(system_monitor_interval_millis=100)


def test_sagemaker_profiler_parameters_read_as_profile_params_alone(tmp_path, caplog) -> None:
    # what the SDK sends for ProfilerConfig(profile_params=Profiler(cpu_profiling_duration=1800)):
    # read as two unknown keys, it turned every framework option on at its default steps and
    # lost the duration
    data = {
        "ProfilingIntervalInMilliseconds": 500,
        "ProfilingParameters": {"CPUProfilingDuration": "1800", "SMPFileRotationSecs": "300"},
    }
    with caplog.at_level(logging.INFO, logger="stepscope.config.sagemaker_format"):
        config = ProfilerConfig.from_file(_write(tmp_path, data))
    profiler = Profiler(cpu_profiling_duration=1800, file_rotation_interval=300)
    assert config == ProfilerConfig(profile_params=profiler)
    assert caplog.records == []
    with pytest.raises(ConfigError) as caught:
        ProfilerConfig.from_dict({"ProfilingParameters": {"CPUProfilingDuration": "1h"}})
    assert caught.value.parameter == "ProfilingParameters.CPUProfilingDuration"


def test_request_wrapped_in_profiler_config_is_unwrapped(tmp_path) -> None:
    wrapped = {"ProfilerConfig": {"DisableProfiler": True}}
    assert ProfilerConfig.from_file(_write(tmp_path, wrapped)).disable_profiler is True


def test_empty_metrics_config_is_off(tmp_path) -> None:
    data = {
        "ProfilingParameters": {
            "DetailedProfilingConfig": "{}",
            "PythonProfilingConfig": '{"StartStep": 1}',
        }
    }
    framework = ProfilerConfig.from_file(_write(tmp_path, data)).framework_profile_params
    assert framework is not None and framework.enabled_options() == ("python",)


@pytest.mark.parametrize("empty", ["{}", "", {}])
def test_options_all_given_empty_are_all_off(tmp_path, empty) -> None:
    data = {"ProfilingParameters": {"LocalPath": "/x", "DetailedProfilingConfig": empty}}
    config = ProfilerConfig.from_file(_write(tmp_path, data))
    assert [config.range_for(option) for option in ("detailed", "dataloader", "python")] == [
        None,
        None,
        None,
    ]


def test_sagemaker_shape_is_read_by_from_dict_too() -> None:
    config = ProfilerConfig.from_dict({"ProfilingIntervalInMilliseconds": 60000})
    assert config.system_monitor_interval_millis == 60000


def test_code_in_a_metrics_config_is_never_run(tmp_path) -> None:
    marker = tmp_path / "ran"
    payload = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    data = {"ProfilingParameters": {"DetailedProfilingConfig": payload}}
    with pytest.raises(ConfigError, match="a JSON object"):
        ProfilerConfig.from_file(_write(tmp_path, data))
    assert not marker.exists()


@pytest.mark.parametrize(
    ("data", "key", "allowed"),
    [
        (
            {"ProfilingParameters": {"DetailedProfilingConfig": '{"StartStep": "five"}'}},
            "ProfilingParameters.DetailedProfilingConfig.StartStep",
            "an integer >= 0",
        ),
        # the values below were named by stepscope's parameter (DetailedProfilingConfig.num_steps,
        # ProfilerConfig.system_monitor_interval_millis), not by the key the file holds
        (
            {"ProfilingParameters": {"DetailedProfilingConfig": '{"NumSteps": 0}'}},
            "ProfilingParameters.DetailedProfilingConfig.NumSteps",
            "an integer >= 1",
        ),
        (
            {"ProfilingParameters": {"RotateMaxFileSizeInBytes": "ten"}},
            "ProfilingParameters.RotateMaxFileSizeInBytes",
            "an integer >= 1",
        ),
        (
            {"ProfilingParameters": {"RotateMaxFileSizeInBytes": -3}},
            "ProfilingParameters.RotateMaxFileSizeInBytes",
            "an integer >= 1",
        ),
        (
            {"ProfilingParameters": {"PythonProfilingConfig": '{"ProfilerName": "yappi"}'}},
            "ProfilingParameters.PythonProfilingConfig.ProfilerName",
            "'pyinstrument'",
        ),
        (
            {"ProfilingParameters": {"DataloaderProfilingConfig": '{"MetricsRegex": "("}'}},
            "ProfilingParameters.DataloaderProfilingConfig.MetricsRegex",
            "valid regular expression",
        ),
        (
            {"ProfilingParameters": {"CPUProfilingDuration": 0}},
            "ProfilingParameters.CPUProfilingDuration",
            "an integer >= 1",
        ),
        ({"ProfilingIntervalInMilliseconds": 7}, "ProfilingIntervalInMilliseconds", "60000"),
        # a string that is no number was said to need "an integer >= 1", which 7 is
        (
            {"ProfilingIntervalInMilliseconds": "fast"},
            "ProfilingIntervalInMilliseconds",
            "one of 100, 200, 500, 1000, 5000, 60000",
        ),
        (
            {"ProfilingParameters": {"DetailedProfilingConfig": '{"DurationInSeconds": "long"}'}},
            "ProfilingParameters.DetailedProfilingConfig.DurationInSeconds",
            "a finite number > 0",
        ),
        ({"ProfilerConfig": {"DisableProfiler": 3}}, "DisableProfiler", "true or false"),
        (
            {"ProfilingParameters": {"DetailedProfilingConfig": '{"StartStep": 1, "Duration": 5}'}},
            "ProfilingParameters.DetailedProfilingConfig",
            "either a step range (StartStep, NumSteps) or a time range "
            "(StartTimeInSecSinceEpoch, Duration), not both, got {'StartStep': 1, 'Duration': 5}",
        ),
        (
            {
                "ProfilingParameters": {
                    "PythonProfilingConfig": {"DefaultProfiling": "true", "NumSteps": 2}
                }
            },
            "ProfilingParameters.PythonProfilingConfig",
            "either DefaultProfiling or a step or time range (StartStep, NumSteps, "
            "StartTimeInSecSinceEpoch, DurationInSeconds), not both, "
            "got {'DefaultProfiling': True, 'NumSteps': 2}",
        ),
    ],
)
def test_bad_sagemaker_values_name_the_key_and_the_file(
    tmp_path, data, key: str, allowed: str
) -> None:
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as caught:
        ProfilerConfig.from_file(path)
    assert caught.value.parameter == f"{key} in {path}"
    assert allowed in str(caught.value)
    assert f"got {caught.value.value!r}" in str(caught.value)


def test_unknown_keys_are_skipped_with_one_warning_each(tmp_path, caplog) -> None:
    data = {
        "ProfilingParameters": {
            "ProfilerEnabled": True,
            "NewSetting": "1",
            "DetailedProfilingConfig": '{"StartStep": 2, "Verbose": 1}',
        }
    }
    with caplog.at_level(logging.WARNING, logger="stepscope.config.sagemaker_format"):
        framework = ProfilerConfig.from_file(_write(tmp_path, data)).framework_profile_params
    assert framework is not None and framework.range_for("detailed") == ProfileRange(
        start_step=2, num_steps=1
    )
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2
    assert any("NewSetting" in m for m in messages) and any("Verbose" in m for m in messages)
