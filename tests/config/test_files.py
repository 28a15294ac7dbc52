"""Configuration files: JSON and YAML round trips, atomic writes, clear errors on bad files."""

from __future__ import annotations

import json
import os

import pytest

from stepscope.config import (
    DataloaderProfilingConfig,
    DetailedProfilingConfig,
    FrameworkProfile,
    ProfilerConfig,
    PythonProfiler,
    PythonProfilingConfig,
    cProfileTimer,
)
from stepscope.errors import ConfigError

CONFIG = ProfilerConfig(
    system_monitor_interval_millis=1000,
    framework_profile_params=FrameworkProfile(
        local_path="/tmp/MyRun",
        file_close_interval=2.5,
        detailed_profiling_config=DetailedProfilingConfig(start_step=0, num_steps=2),
        dataloader_profiling_config=DataloaderProfilingConfig(metrics_regex="GetNext.*"),
        python_profiling_config=PythonProfilingConfig(
            start_unix_time=1_700_000_000, duration=4, cprofile_timer="cpu_time"
        ),
    ),
)


@pytest.mark.parametrize("name", ["config.json", "config.yaml", "config.yml", "CONFIG.JSON"])
def test_file_round_trip(tmp_path, name: str) -> None:
    path = CONFIG.to_file(tmp_path / name)
    assert ProfilerConfig.from_file(path) == CONFIG


def test_json_file_is_readable_plain_json(tmp_path) -> None:
    path = CONFIG.to_file(tmp_path / "config.json")
    data = json.loads(path.read_text())
    assert data["system_monitor_interval_millis"] == 1000
    assert data["framework_profile_params"]["local_path"] == "/tmp/MyRun"
    python = data["framework_profile_params"]["python_profiling_config"]
    assert python["cprofile_timer"] == "cpu_time"


def test_yaml_file_is_plain_yaml_that_a_person_can_write(tmp_path) -> None:
    path = tmp_path / "handwritten.yaml"
    path.write_text(
        "system_monitor_interval_millis: 200\n"
        "framework_profile_params:\n"
        "  local_path: /data/CaseSensitive\n"
        "  python_profiling_config:\n"
        "    start_step: 0\n"
        "    num_steps: 2\n"
        "    python_profiler: Pyinstrument\n"
    )
    config = ProfilerConfig.from_file(path)
    framework = config.framework_profile_params
    assert framework is not None and framework.local_path == "/data/CaseSensitive"
    python = framework.effective_config("python")
    assert isinstance(python, PythonProfilingConfig)
    assert python.python_profiler is PythonProfiler.PYINSTRUMENT
    assert (python.start_step, python.num_steps) == (0, 2)
    assert framework.enabled_options() == ("python",)


def test_yaml_numbers_in_exponent_form_are_numbers(tmp_path) -> None:
    # PyYAML reads 1.7e9 as the string '1.7e9' (YAML 1.1 wants 1.7e+9), which was refused
    path = tmp_path / "handwritten.yaml"
    path.write_text(
        "framework_profile_params:\n"
        "  detailed_profiling_config:\n"
        "    start_unix_time: 1.7e9\n"
        "    duration: 3E1\n"
    )
    framework = ProfilerConfig.from_file(path).framework_profile_params
    assert framework is not None
    assert framework.detailed_profiling_config == DetailedProfilingConfig(
        start_unix_time=1.7e9, duration=30.0
    )


def test_yaml_values_keep_their_case(tmp_path) -> None:
    path = CONFIG.to_file(tmp_path / "config.yaml")
    assert "/tmp/MyRun" in path.read_text()


def test_write_is_atomic_and_leaves_no_temporary_file(tmp_path) -> None:
    target = tmp_path / "job" / "profiler-config.json"
    ProfilerConfig().to_file(target)
    inode = os.stat(target).st_ino
    CONFIG.to_file(target)
    assert sorted(p.name for p in target.parent.iterdir()) == ["profiler-config.json"]
    assert os.stat(target).st_ino != inode, "replaced by rename, not rewritten in place"
    assert ProfilerConfig.from_file(target) == CONFIG
    assert oct(os.stat(target).st_mode & 0o777) == oct(0o644)


def test_unknown_extension_is_refused_on_write_and_read(tmp_path) -> None:
    for action in (
        lambda: CONFIG.to_file(tmp_path / "config.toml"),
        lambda: ProfilerConfig.from_file(tmp_path / "config.txt"),
    ):
        with pytest.raises(ConfigError) as caught:
            action()
        assert ".json, .yaml or .yml" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_missing_file_names_the_path(tmp_path) -> None:
    with pytest.raises(ConfigError, match="an existing file") as caught:
        ProfilerConfig.from_file(tmp_path / "nope.json")
    assert "nope.json" in str(caught.value)


@pytest.mark.parametrize(
    ("name", "content", "allowed"),
    [
        ("bad.json", '{"system_monitor_interval_millis": 500', "valid JSON"),
        ("bad.yaml", "framework_profile_params: [unclosed\n", "valid YAML"),
        ("list.json", "[1, 2]", "a mapping at the top level, got 'a list'"),
        ("empty.yaml", "", "a mapping at the top level, got 'nothing (an empty document"),
        ("comments.yaml", "# to do\n", "a mapping at the top level, got 'nothing (an empty"),
        ("text.yml", "detailed", "a mapping at the top level, got 'a string'"),
    ],
)
def test_unparsable_files_say_what_is_wrong(
    tmp_path, name: str, content: str, allowed: str
) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ConfigError) as caught:
        ProfilerConfig.from_file(path)
    assert allowed in str(caught.value)
    assert name in str(caught.value)


def test_invalid_values_in_a_file_are_config_errors(tmp_path) -> None:
    path = tmp_path / "c.json"
    path.write_text(
        json.dumps({"framework_profile_params": {"detailed_profiling_config": {"num_steps": 0}}})
    )
    with pytest.raises(
        ConfigError,
        match=r"DetailedProfilingConfig\.num_steps in .*c\.json must be an integer >= 1",
    ):
        ProfilerConfig.from_file(path)


def test_enum_values_in_files_may_use_sagemaker_spelling(tmp_path) -> None:
    path = tmp_path / "c.json"
    path.write_text(
        json.dumps(
            {
                "framework_profile_params": {
                    "python_profiling_config": {
                        "python_profiler": "cProfile",
                        "cprofile_timer": "OFF_CPU_TIME",
                    }
                }
            }
        )
    )
    framework = ProfilerConfig.from_file(path).framework_profile_params
    assert framework is not None
    python = framework.python_profiling_config
    assert python is not None and python.cprofile_timer is cProfileTimer.OFF_CPU_TIME
