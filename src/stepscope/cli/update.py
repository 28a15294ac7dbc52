"""``stepscope update <job-dir>... [options]``: change what a running job profiles.

A thin wrapper over :func:`stepscope.config.update_job_config`: it rewrites the job's
``profiler-config.json`` atomically (the running job picks the change up at its next step) and
prints each setting that changed. A job that no longer runs is refused. Several folders (one per
node of a multi-node job) get the same change, once every one of them is known to accept it.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

__all__ = ["RANGE_OPTIONS", "add_arguments", "main"]

logger = logging.getLogger(__name__)

_RANGE_HELP = "START:NUM to profile NUM steps from step START, or 'off' (default: unchanged)"
#: the options that take a range, named as the user types them
_RANGE_OPTIONS = {
    "detailed": "detailed (kernel-level) profiling",
    "dataloader": "data-loader profiling",
    "python": "Python profiling",
    "distributed": "distributed (collectives) profiling",
}
RANGE_OPTIONS = tuple(f"--{option}" for option in _RANGE_OPTIONS)
#: options printed under the name of their flag, the one the user typed
_FLAG_NAMES = {"smdataparallel": "distributed"}


def _option_change(text: str) -> tuple[int, int] | bool:
    """``START:NUM`` as a pair of integers, or ``off`` as False."""
    if text.strip().casefold() == "off":
        return False
    start, sep, num = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(start), int(num)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected START:NUM (e.g. 100:5) or 'off', got {text!r}"
        ) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from stepscope.config import SYSTEM_MONITOR_INTERVALS_MS, PythonProfiler, cProfileTimer

    parser.add_argument(
        "job_dir",
        nargs="+",
        help="the job folder (it holds profiler-config.json); one per node of a multi-node job",
    )
    for option, what in _RANGE_OPTIONS.items():
        parser.add_argument(
            f"--{option}",
            type=_option_change,
            metavar="START:NUM",
            help=f"{what}: {_RANGE_HELP}",
        )
    parser.add_argument(
        "--python-profiler",
        choices=[member.value for member in PythonProfiler],
        type=str.lower,
        help="the Python profiler, for Python profiling that is on (default: unchanged)",
    )
    parser.add_argument(
        "--cprofile-timer",
        choices=[member.value for member in cProfileTimer],
        type=str.lower,
        help="the clock cProfile uses; 'default' cycles through the three (default: unchanged)",
    )
    parser.add_argument(
        "--system-interval-ms",
        type=int,
        choices=SYSTEM_MONITOR_INTERVALS_MS,
        metavar="N",
        help="system-metrics interval in ms: "
        + ", ".join(str(ms) for ms in SYSTEM_MONITOR_INTERVALS_MS)
        + " (default: unchanged)",
    )
    switch = parser.add_mutually_exclusive_group()
    switch.add_argument(
        "--disable", action="store_true", help="turn all profiling off (disable_profiler)"
    )
    switch.add_argument("--enable", action="store_true", help="turn profiling back on")


def _range_text(config: Any) -> str:
    if config is None:
        return "off"
    if config.start_step is not None:
        last = config.start_step + config.num_steps - 1
        text = f"step {last}" if config.num_steps == 1 else f"steps {config.start_step}-{last}"
    elif config.duration is not None:
        text = f"{config.duration}s from {config.start_unix_time or 'the next step'}"
    else:
        text = f"one step after {config.start_unix_time}"
    extras = []
    for name in ("python_profiler", "cprofile_timer", "metrics_regex"):
        value = getattr(config, name, None)
        if value is not None:
            extras.append(str(getattr(value, "value", value)))
    return f"{text} ({', '.join(extras)})" if extras else text


def _summary(config: Any) -> dict[str, str]:
    """Each setting a user cares about, as text: the effective range of every option."""
    from stepscope.config import OPTIONS

    framework = config.framework_profile_params
    summary = {
        "profiler": "disabled" if config.disable_profiler else "enabled",
        "system interval": f"{config.system_monitor_interval_millis} ms",
    }
    for option in OPTIONS:
        effective = None if framework is None else framework.effective_config(option)
        summary[_FLAG_NAMES.get(option, option)] = _range_text(effective)
    return summary


def _job_info(job_dir: Path) -> dict[str, Any] | None:
    """The job's ``job.json`` (None when there is none to read)."""
    from stepscope.store.layout import job_file_path

    try:
        info = json.loads(job_file_path(job_dir).read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def _refuse_unless_running(job_dir: Path) -> None:
    """A job that no longer runs has no process to read a change: refuse it (its status read
    as every status is, see :mod:`stepscope.store.job_status`; without a readable
    ``job.json``, from its profiler output alone).

    :raises ConfigError: the job has ended.
    """
    from stepscope.errors import ConfigError
    from stepscope.store.job_status import RUNNING, output_status
    from stepscope.store.layout import profiler_output_dir

    status = output_status(profiler_output_dir(job_dir), _job_info(job_dir))
    if status.status != RUNNING:
        why = f" ({status.reason})" if status.reason else ""
        raise ConfigError(
            "job_dir",
            str(job_dir),
            "the folder of a running job",
            f"The job is {status.status}{why}: no process would read the change.",
        )


def _unreached(job_dir: Path, after: Any) -> str | None:
    """Why the new configuration will not reach the running job's processes, from its
    ``job.json`` (None when it will, or when there is no ``job.json`` to tell)."""
    from stepscope.config import ProfilerConfig
    from stepscope.errors import StepscopeError

    info = _job_info(job_dir)
    try:
        started = ProfilerConfig.from_dict(info["profiler_config"]) if info else None
    except (KeyError, TypeError, StepscopeError):
        return None
    if started is None:
        return None
    if after.framework_profiling_enabled and not started.framework_profiling_enabled:
        return (
            "the job's processes started without framework profiling, so they are not "
            "instrumented: the framework options apply only to processes started from now on"
        )
    return None


def _flags() -> dict[str, str]:
    """The flag behind each parameter a configuration error can name (``--python START`` for
    ``PythonProfilingConfig.start_step``)."""
    from stepscope.config import option_class

    flags = {"python_profiler": "--python-profiler", "cprofile_timer": "--cprofile-timer"}
    for option in ("detailed", "dataloader", "python", "smdataparallel"):
        flag = f"--{_FLAG_NAMES.get(option, option)}"
        name = option_class(option).__name__
        flags[f"{name}.start_step"] = f"{flag} START"
        flags[f"{name}.num_steps"] = f"{flag} NUM"
    return flags


def _changes(args: argparse.Namespace) -> dict[str, Any]:
    """The keywords of :func:`stepscope.config.update_job_config` that the flags give."""
    return {
        "detailed": args.detailed,
        "dataloader": args.dataloader,
        "python": args.python,
        "smdataparallel": args.distributed,
        "python_profiler": args.python_profiler,
        "cprofile_timer": args.cprofile_timer,
        "system_monitor_interval_millis": args.system_interval_ms,
        "disable_profiler": True if args.disable else (False if args.enable else None),
    }


def main(args: argparse.Namespace) -> int:
    from stepscope.cli.run import naming_flags
    from stepscope.config import detailed_range_warned_before, update_job_config

    keywords = _changes(args)
    # every folder is checked before any changes, so the nodes of one job never part ways; the
    # change itself first (a value to fix is news whether or not the job still runs), then
    # whether a process would read it; the warning about a long range comes once, as it is set
    with naming_flags(_flags()):
        with detailed_range_warned_before():
            for job_dir in args.job_dir:
                update_job_config(job_dir, **keywords, dry_run=True)
        # each folder as typed until it is known to be one: a path would make s3://bucket/job
        # read s3:/bucket/job in the error
        job_dirs = [Path(job_dir) for job_dir in args.job_dir]
        for job_dir in job_dirs:
            _refuse_unless_running(job_dir)
        # every folder takes the change before a word is printed: a reader of the output that
        # went away (| head) ends the command at its next word, which must not part the nodes
        reports = [_update(job_dir, keywords) for job_dir in job_dirs]
    for lines, note in reports:
        print("\n".join(lines))
        if note is not None:
            logger.warning("%s", note)
    return 0


def _update(job_dir: Path, keywords: dict[str, Any]) -> tuple[list[str], str | None]:
    """Apply the change to one job folder: the lines that say what changed there, and why the
    change will not reach the job's processes (None when it will)."""
    from stepscope.config import (
        ProfilerConfig,
        detailed_range_warned_before,
        job_config_path,
        update_job_config,
    )

    path = job_config_path(job_dir)
    with detailed_range_warned_before():
        before = ProfilerConfig.from_file(path) if path.is_file() else None
    after = update_job_config(job_dir, **keywords)
    old = _summary(before) if before is not None else {}
    new = _summary(after)
    changes = [key for key in new if old.get(key) != new[key]]
    if not changes:
        return [f"{path}: nothing changed"], None
    width = max(len(key) for key in changes)
    lines = [f"updated {path}"]
    lines += [f"  {key:<{width}}  {old.get(key, '-')} -> {new[key]}" for key in changes]
    return lines, _unreached(job_dir, after)
