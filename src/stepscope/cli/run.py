"""``stepscope run [options] -- <command...>``: profile a training command."""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from stepscope.cli.output import (
    exit_status,
    print_job_start,
    print_job_summary,
    print_rule_finding,
)
from stepscope.cli.rules import add_rule_arguments, rules_from_arguments
from stepscope.errors import ConfigError

__all__ = ["add_arguments", "main", "naming_flags"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--job-dir", help="the job folder (default: a new one under ./stepscope-jobs/)"
    )
    parser.add_argument(
        "--config",
        help="a profiler configuration file: JSON or YAML, SageMaker's profilerconfig.json "
        "included (default: every framework option on its default steps)",
    )
    parser.add_argument(
        "--nproc-per-node",
        type=int,
        default=1,
        metavar="N",
        help="processes per node, an integer >= 1 (default 1); above 1 the command runs "
        "through torch.distributed.run",
    )
    add_rule_arguments(parser)
    parser.add_argument(
        "--no-report", action="store_true", help="do not write the HTML report at the end"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to profile")


def main(args: argparse.Namespace) -> int:
    from stepscope.config import ProfilerConfig
    from stepscope.launcher import launch

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise ConfigError(
            "the command to profile",
            command,
            "type it after the options and --, e.g. stepscope run -- python train.py --epochs 3",
            missing=True,
        )
    config = ProfilerConfig.from_file(args.config) if args.config is not None else None
    rules = rules_from_arguments(args.rules, args.params)
    with naming_flags():
        job = launch(
            command,
            profiler_config=config,
            rules=rules,
            job_dir=args.job_dir,
            nproc_per_node=args.nproc_per_node,
            on_start=print_job_start,
            on_status=print_rule_finding,
            report=not args.no_report,
        )
    print_job_summary(job)
    return exit_status(job)


#: what the errors of launch() and of its rule lookup name -> the flag that set it
_FLAGS = {
    "job_dir": "--job-dir",
    "nproc_per_node": "--nproc-per-node",
    "rules": "--rule",
    "rule name": "--rule",
}


@contextmanager
def naming_flags(
    flags: Mapping[str, str] = _FLAGS, typed: Mapping[str, str] | None = None
) -> Iterator[None]:
    """An error about a value the user gave as a flag names the flag they typed, as every
    other command's errors do, not the Python parameter: ``flags`` maps the parameters the
    errors name (launch()'s by default) to the flags, and ``typed`` the parameters whose flag
    text was parsed into another value to that text (``'100:'``, not ``(100.0, None)``)."""
    try:
        yield
    except ConfigError as exc:
        flag = flags.get(exc.parameter)
        if flag is None:
            raise
        value = (typed or {}).get(exc.parameter, exc.value)
        raise ConfigError(flag, value, exc.allowed, exc.hint, missing=exc.missing) from None
