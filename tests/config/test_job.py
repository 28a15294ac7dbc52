"""update_job_config: changing what a running job profiles, through its profiler-config.json."""

from __future__ import annotations

import pytest

from stepscope.config import (
    ConfigWatcher,
    DetailedProfilingConfig,
    FrameworkProfile,
    ProfileRange,
    ProfilerConfig,
    PythonProfiler,
    PythonProfilingConfig,
    cProfileTimer,
    job_config_path,
    update_job_config,
)
from stepscope.errors import ConfigError, JobNotFoundError


def _job(tmp_path, config: ProfilerConfig):
    job = tmp_path / "job"
    config.to_file(job / "profiler-config.json")
    return job


def test_the_job_config_file_name() -> None:
    assert job_config_path("/jobs/Run-1").as_posix() == "/jobs/Run-1/profiler-config.json"


def test_changing_one_option_keeps_every_other_effective_range(tmp_path) -> None:
    job = _job(
        tmp_path, ProfilerConfig(framework_profile_params=FrameworkProfile(local_path="/tmp/MyRun"))
    )
    updated = update_job_config(job, detailed=(100, 5))
    framework = updated.framework_profile_params
    assert framework is not None
    assert framework.range_for("detailed") == ProfileRange(start_step=100, num_steps=5)
    assert framework.range_for("dataloader") == ProfileRange(start_step=7, num_steps=1)
    assert framework.range_for("python") == ProfileRange(start_step=9, num_steps=3)
    assert framework.range_for("horovod") == ProfileRange(start_step=13, num_steps=1)
    assert framework.range_for("smdataparallel") == ProfileRange(start_step=15, num_steps=1)
    assert framework.local_path == "/tmp/MyRun"
    assert ProfilerConfig.from_file(job_config_path(job)) == updated


def test_a_global_range_stays_in_force_for_the_other_options(tmp_path) -> None:
    job = _job(
        tmp_path,
        ProfilerConfig(framework_profile_params=FrameworkProfile(start_step=20, num_steps=2)),
    )
    framework = update_job_config(job, python=(50, 1)).framework_profile_params
    assert framework is not None
    assert framework.range_for("python") == ProfileRange(start_step=50, num_steps=1)
    assert framework.range_for("detailed") == ProfileRange(start_step=20, num_steps=2)


def test_an_option_can_be_switched_off_and_on(tmp_path) -> None:
    job = _job(tmp_path, ProfilerConfig(framework_profile_params=FrameworkProfile()))
    framework = update_job_config(job, dataloader=False).framework_profile_params
    assert framework is not None and "dataloader" not in framework.enabled_options()
    framework = update_job_config(job, dataloader=(30, 2)).framework_profile_params
    assert framework is not None
    assert framework.range_for("dataloader") == ProfileRange(start_step=30, num_steps=2)


def test_switching_every_option_off_leaves_system_monitoring(tmp_path) -> None:
    job = _job(
        tmp_path,
        ProfilerConfig(
            framework_profile_params=FrameworkProfile(
                detailed_profiling_config=DetailedProfilingConfig()
            )
        ),
    )
    assert update_job_config(job, detailed=False).framework_profile_params is None


def test_a_system_only_job_gains_one_option(tmp_path) -> None:
    job = _job(tmp_path, ProfilerConfig())
    framework = update_job_config(
        job, detailed=DetailedProfilingConfig(start_step=40)
    ).framework_profile_params
    assert framework is not None and framework.enabled_options() == ("detailed",)


def test_python_profiler_and_timer_keep_the_python_range(tmp_path) -> None:
    job = _job(tmp_path, ProfilerConfig(framework_profile_params=FrameworkProfile()))
    framework = update_job_config(job, python_profiler="Pyinstrument").framework_profile_params
    assert framework is not None
    python = framework.python_profiling_config
    assert python == PythonProfilingConfig(
        start_step=9, num_steps=3, python_profiler=PythonProfiler.PYINSTRUMENT
    )
    framework = update_job_config(
        job, python_profiler="cprofile", cprofile_timer="cpu_time"
    ).framework_profile_params
    assert framework is not None and framework.python_profiling_config is not None
    assert framework.python_profiling_config.cprofile_timer is cProfileTimer.CPU_TIME


def test_python_profiler_needs_python_profiling_on(tmp_path) -> None:
    job = _job(tmp_path, ProfilerConfig())
    with pytest.raises(ConfigError, match="--python START:NUM"):
        update_job_config(job, python_profiler="pyinstrument")
    framework = update_job_config(
        job, python=(5, 1), python_profiler="pyinstrument"
    ).framework_profile_params
    assert framework is not None and framework.python_profiling_config is not None
    assert framework.python_profiling_config.python_profiler is PythonProfiler.PYINSTRUMENT


def test_a_cprofile_timer_for_pyinstrument_is_refused_not_ignored(tmp_path) -> None:
    python = PythonProfilingConfig(python_profiler="pyinstrument")
    job = _job(
        tmp_path,
        ProfilerConfig(framework_profile_params=FrameworkProfile(python_profiling_config=python)),
    )
    before = job_config_path(job).read_bytes()
    with pytest.raises(ConfigError, match="--python-profiler cprofile") as caught:
        update_job_config(job, cprofile_timer="cpu_time")
    assert caught.value.parameter == "cprofile_timer"
    assert job_config_path(job).read_bytes() == before


def test_a_cprofile_timer_with_pyinstrument_in_one_change_says_to_drop_the_timer(
    tmp_path,
) -> None:
    # it said "add --python-profiler cprofile" to a user who had just asked for pyinstrument
    job = _job(tmp_path, ProfilerConfig(framework_profile_params=FrameworkProfile()))
    with pytest.raises(ConfigError) as caught:
        update_job_config(job, python_profiler="pyinstrument", cprofile_timer="cpu_time")
    assert caught.value.hint == "Pyinstrument has a single clock: drop --cprofile-timer."


def test_interval_and_disable(tmp_path) -> None:
    job = _job(tmp_path, ProfilerConfig())
    assert (
        update_job_config(job, system_monitor_interval_millis=1000).system_monitor_interval_millis
        == 1000
    )
    assert update_job_config(job, disable_profiler=True).disable_profiler is True
    assert update_job_config(job, disable_profiler=False).disable_profiler is False


def test_no_change_does_not_rewrite_the_file(tmp_path) -> None:
    job = _job(tmp_path, ProfilerConfig(framework_profile_params=FrameworkProfile()))
    before = job_config_path(job).stat().st_ino
    assert update_job_config(job) == ProfilerConfig(framework_profile_params=FrameworkProfile())
    assert job_config_path(job).stat().st_ino == before


def test_a_dry_run_returns_the_change_and_keeps_the_file(tmp_path) -> None:
    job = _job(tmp_path, ProfilerConfig(framework_profile_params=FrameworkProfile()))
    before = job_config_path(job).read_bytes()
    checked = update_job_config(job, detailed=(10, 2), dry_run=True)
    assert checked.range_for("detailed") == ProfileRange(start_step=10, num_steps=2)
    assert job_config_path(job).read_bytes() == before
    assert update_job_config(job, detailed=(10, 2)) == checked


def test_a_watching_job_sees_the_update(tmp_path) -> None:
    job = _job(tmp_path, ProfilerConfig(framework_profile_params=FrameworkProfile()))
    watcher = ConfigWatcher(job_config_path(job))
    updated = update_job_config(job, detailed=(10, 2))
    assert watcher.poll() == updated


@pytest.mark.parametrize(
    ("changes", "parameter"),
    [
        ({"detailed": (10, 0)}, "DetailedProfilingConfig.num_steps"),
        ({"detailed": (-1, 1)}, "DetailedProfilingConfig.start_step"),
        ({"detailed": PythonProfilingConfig()}, "detailed"),
        ({"detailed": "10:2"}, "detailed"),
        ({"system_monitor_interval_millis": 300}, "ProfilerConfig.system_monitor_interval_millis"),
        ({"python": (1, 1), "cprofile_timer": "wall"}, "PythonProfilingConfig.cprofile_timer"),
        ({"python_profiler": "pyinstrument", "cprofile_timer": "cpu_time"}, "cprofile_timer"),
    ],
)
def test_bad_changes_are_refused_and_the_file_is_kept(tmp_path, changes, parameter: str) -> None:
    job = _job(tmp_path, ProfilerConfig(framework_profile_params=FrameworkProfile()))
    before = job_config_path(job).read_bytes()
    with pytest.raises(ConfigError) as caught:
        update_job_config(job, **changes)
    assert caught.value.parameter == parameter
    assert job_config_path(job).read_bytes() == before


def test_a_folder_without_a_config_is_not_a_job(tmp_path) -> None:
    with pytest.raises(JobNotFoundError, match="profiler-config.json"):
        update_job_config(tmp_path, detailed=(1, 1))
