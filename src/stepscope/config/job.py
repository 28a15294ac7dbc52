"""A job folder's ``profiler-config.json``, and changing what a running job profiles.

``stepscope run`` writes the resolved configuration to ``<job>/profiler-config.json`` and points
every rank at it through ``STEPSCOPE_CONFIG``, and ``stepscope.profile()`` writes it into its own
job folder; the ranks poll it with :class:`ConfigWatcher`.
:func:`update_job_config` rewrites that file atomically, so a change takes effect at the next
step of the running job.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

from stepscope.config.framework import (
    OPTIONS,
    FrameworkProfile,
    detailed_range_warned_before,
    option_class,
)
from stepscope.config.options import (
    ProfilingOptionConfig,
    PythonProfiler,
    PythonProfilingConfig,
    cProfileTimer,
)
from stepscope.config.profiler import ProfilerConfig
from stepscope.errors import ConfigError, JobNotFoundError

__all__ = ["JOB_CONFIG_FILENAME", "OptionChange", "job_config_path", "update_job_config"]

logger = logging.getLogger(__name__)

#: the configuration file of a job folder, the one its processes watch
JOB_CONFIG_FILENAME = "profiler-config.json"

#: what a folder of recorded profiler data holds (a job folder, or a SageMaker profiler output)
_RECORDED_JOB_ENTRIES = ("job.json", "profiler-output", "system", "framework")

#: a new range for one option: ``(start_step, num_steps)``, a config object, or False for off
OptionChange = tuple[int, int] | ProfilingOptionConfig | bool


def job_config_path(job_dir: str | os.PathLike[str]) -> Path:
    """Where the configuration file of ``job_dir`` is."""
    return Path(job_dir) / JOB_CONFIG_FILENAME


def _not_updatable(given: str | os.PathLike[str]) -> ConfigError | JobNotFoundError:
    """Why ``given`` has no configuration file to update, in the words of what it is, and
    named as it was given (as a path, ``s3://bucket/job`` would read ``s3:/bucket/job``)."""
    allowed = (
        "the folder of a job started by `stepscope run`, stepscope.launch() or stepscope.profile()"
    )
    job_dir = Path(given)
    if job_dir.is_file():
        named = job_dir.name == JOB_CONFIG_FILENAME
        hint = f"Give the job folder that holds it: {job_dir.parent}." if named else ""
        return ConfigError("job_dir", str(job_dir), allowed, hint)
    if job_config_path(job_dir.parent).is_file():  # its profiler output, SageMaker's LocalPath
        return ConfigError(
            "job_dir",
            str(job_dir),
            allowed,
            f"Give the job folder that holds it: {job_dir.parent}.",
        )
    if any((job_dir / name).exists() for name in _RECORDED_JOB_ENTRIES):
        return ConfigError(
            "job_dir",
            str(job_dir),
            allowed,
            f"This job has no {JOB_CONFIG_FILENAME}, the file a running job re-reads: one "
            "recorded on SageMaker, or by stepscope.profile() into a FrameworkProfile.local_path, "
            "keeps the configuration it started with.",
        )
    return JobNotFoundError(
        os.fspath(given),
        f"It has no {JOB_CONFIG_FILENAME}; jobs started with `stepscope run`, launch() or "
        "profile() have one.",
    )


def _changed_option(
    option: str, current: ProfilingOptionConfig | None, change: OptionChange
) -> ProfilingOptionConfig | None:
    if change is False:
        return None
    cls = option_class(option)
    if isinstance(change, ProfilingOptionConfig):
        if not isinstance(change, cls):
            raise ConfigError(option, change, f"a {cls.__name__}")
        return change
    if not isinstance(change, tuple) or len(change) != 2:
        raise ConfigError(
            option, change, "a (start_step, num_steps) pair, a config object or False"
        )
    start_step, num_steps = change
    if current is None:
        return cls(start_step=start_step, num_steps=num_steps)
    # keep the option's other settings (profiler, timer, regex); only the range changes
    return dataclasses.replace(
        current, start_step=start_step, num_steps=num_steps, start_unix_time=None, duration=None
    )


def _changed_framework(
    framework: FrameworkProfile | None,
    ranges: dict[str, OptionChange],
    python_profiler: PythonProfiler | str | None,
    cprofile_timer: cProfileTimer | str | None,
) -> FrameworkProfile | None:
    """``framework`` with per-option changes; every option keeps its effective range otherwise.

    Changing one option makes every option explicit (SageMaker's scenario 3), since giving one
    per-option config switches the options not given off.
    """
    options: dict[str, ProfilingOptionConfig | None] = {
        option: None if framework is None else framework.effective_config(option)
        for option in OPTIONS
    }
    for option, change in ranges.items():
        options[option] = _changed_option(option, options[option], change)
    if python_profiler is not None or cprofile_timer is not None:
        python = options["python"]
        if python is None:
            raise ConfigError(
                "python_profiler" if python_profiler is not None else "cprofile_timer",
                python_profiler if python_profiler is not None else cprofile_timer,
                "set only while Python profiling is on",
                hint="Give a Python profiling range as well (--python START:NUM).",
            )
        # Any: a name or a member, which PythonProfilingConfig.__post_init__ checks and converts.
        updates: dict[str, Any] = {
            "python_profiler": python_profiler,
            "cprofile_timer": cprofile_timer,
        }
        python = dataclasses.replace(
            python, **{key: value for key, value in updates.items() if value is not None}
        )
        if (
            cprofile_timer is not None
            and isinstance(python, PythonProfilingConfig)
            and python.python_profiler is PythonProfiler.PYINSTRUMENT
        ):
            # pyinstrument has no timer to choose: saying "nothing changed" would hide the typo;
            # asked for in the same change, adding cprofile is no fix
            hint = (
                "Pyinstrument has a single clock: drop --cprofile-timer."
                if python_profiler is not None
                else "Python profiling uses pyinstrument; add --python-profiler cprofile."
            )
            raise ConfigError(
                "cprofile_timer",
                cprofile_timer,
                "set only while the Python profiler is cProfile",
                hint,
            )
        options["python"] = python
    if all(config is None for config in options.values()):
        logger.info("every framework profiling option is off: system monitoring only")
        return None
    files = (
        {}
        if framework is None
        else {
            "local_path": framework.local_path,
            "file_max_size": framework.file_max_size,
            "file_close_interval": framework.file_close_interval,
            "file_open_fail_threshold": framework.file_open_fail_threshold,
        }
    )
    return FrameworkProfile(
        **files,  # type: ignore[arg-type]
        **{f"{option}_profiling_config": config for option, config in options.items()},  # type: ignore[arg-type]
    )


def update_job_config(
    job_dir: str | os.PathLike[str],
    *,
    detailed: OptionChange | None = None,
    dataloader: OptionChange | None = None,
    python: OptionChange | None = None,
    horovod: OptionChange | None = None,
    smdataparallel: OptionChange | None = None,
    python_profiler: PythonProfiler | str | None = None,
    cprofile_timer: cProfileTimer | str | None = None,
    system_monitor_interval_millis: int | None = None,
    disable_profiler: bool | None = None,
    dry_run: bool = False,
) -> ProfilerConfig:
    """Change what the job in ``job_dir`` profiles, and return the configuration now in force.

    Arguments left at None stay as they are. An option's change is a ``(start_step, num_steps)``
    pair, a config object of that option (e.g. ``DetailedProfilingConfig(start_step=100)``), or
    False to switch it off. ``python_profiler``, ``cprofile_timer``,
    ``system_monitor_interval_millis`` and ``disable_profiler`` are the parameters of
    :class:`PythonProfilingConfig` and :class:`ProfilerConfig`. The file is rewritten atomically
    and only when something changed; with ``dry_run`` it is left as it is and the configuration
    the change would give is returned, so that a change is checked before anything else is.

    :raises JobNotFoundError: ``job_dir`` holds no job.
    :raises ConfigError: ``job_dir`` is a file, or a job with no ``profiler-config.json`` (one
        recorded on SageMaker, or by ``profile()`` into a ``local_path``), or a change is not a
        valid value.
    """
    path = job_config_path(job_dir)
    if not path.is_file():
        raise _not_updatable(job_dir)
    with detailed_range_warned_before():
        current = ProfilerConfig.from_file(path)
    changed = current
    candidates = {
        "detailed": detailed,
        "dataloader": dataloader,
        "python": python,
        "horovod": horovod,
        "smdataparallel": smdataparallel,
    }
    ranges = {option: change for option, change in candidates.items() if change is not None}
    if ranges or python_profiler is not None or cprofile_timer is not None:
        framework = _changed_framework(
            current.framework_profile_params, ranges, python_profiler, cprofile_timer
        )
        changed = dataclasses.replace(changed, framework_profile_params=framework)
    if system_monitor_interval_millis is not None:
        changed = dataclasses.replace(
            changed, system_monitor_interval_millis=system_monitor_interval_millis
        )
    if disable_profiler is not None:
        changed = dataclasses.replace(changed, disable_profiler=disable_profiler)
    if changed != current and not dry_run:
        changed.to_file(path)
    return changed
