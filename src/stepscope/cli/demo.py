"""``stepscope demo``: a real profiled training run that shows every part of stepscope working.

It trains a small CNN on synthetic data on the CPU (80 steps, under a minute), with a deliberately
slow data loader and one injected slow step, collects everything (system metrics, steps, forward
and backward, data loader, a Python profile and a detailed torch.profiler window), runs the rules
live, writes the report and prints how to open the UI.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from stepscope.cli.output import (
    exit_status,
    print_job_start,
    print_job_summary,
    print_rule_finding,
)
from stepscope.cli.run import naming_flags

if TYPE_CHECKING:
    from stepscope.config import ProfilerConfig

__all__ = ["add_arguments", "demo_config", "demo_rules", "main"]


def _positive_int(text: str) -> int:
    """A count of at least 1: the demo cannot train zero steps, so it is refused before it runs."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--job-dir", help="the job folder (default: a new one under ./stepscope-jobs/)"
    )
    parser.add_argument(
        "--steps-per-epoch",
        type=_positive_int,
        default=80,
        help="training steps per epoch, an integer >= 1 (default 80)",
    )
    parser.add_argument(
        "--epochs", type=_positive_int, default=1, help="epochs, an integer >= 1 (default 1)"
    )


def _demo_steps(training_steps: int) -> dict[str, int]:
    """Where the demo's windows and slow step fall in its training steps: 3/8, 1/2 and 5/8 of
    the way (steps 30, 40 and 50 of the default 80), so a shorter demo still shows each."""
    return {
        "detailed": training_steps * 3 // 8,
        "python": training_steps // 2,
        "slow": training_steps * 5 // 8,
    }


def demo_config(training_steps: int = 80) -> ProfilerConfig:
    """Every kind of collection, on ranges inside a demo of ``training_steps`` steps."""
    from stepscope.config import (
        DataloaderProfilingConfig,
        DetailedProfilingConfig,
        FrameworkProfile,
        ProfilerConfig,
        PythonProfilingConfig,
    )

    steps = _demo_steps(training_steps)
    return ProfilerConfig(
        system_monitor_interval_millis=200,
        framework_profile_params=FrameworkProfile(
            detailed_profiling_config=DetailedProfilingConfig(
                start_step=steps["detailed"], num_steps=3
            ),
            dataloader_profiling_config=DataloaderProfilingConfig(start_step=0, num_steps=100_000),
            python_profiling_config=PythonProfilingConfig(start_step=steps["python"], num_steps=2),
        ),
    )


def demo_rules() -> list[Any]:
    """ProfilerReport, with patience scaled to a one-minute job instead of an hours-long one."""
    from stepscope.rules import ProfilerRule, rule_configs

    return [
        ProfilerRule.stepscope(
            rule_configs.ProfilerReport(
                scan_interval_us=5_000_000,
                StepOutlier_n_outliers=0,
                StepOutlier_stddev=3,
                Dataloader_patience=5,
                CPUBottleneck_patience=50,
                IOBottleneck_patience=50,
            )
        )
    ]


def main(args: argparse.Namespace) -> int:
    from stepscope._optional import require_installed
    from stepscope.launcher import launch

    require_installed("torch", extra="torch", feature="stepscope demo")
    training_steps = args.epochs * args.steps_per_epoch
    command = [
        sys.executable,
        "-m",
        "stepscope.examples.demo_train",
        "--epochs",
        str(args.epochs),
        "--steps-per-epoch",
        str(args.steps_per_epoch),
        "--slow-step",
        str(_demo_steps(training_steps)["slow"]),
    ]
    with naming_flags():
        job = launch(
            command,
            profiler_config=demo_config(training_steps),
            rules=demo_rules(),
            job_dir=args.job_dir,
            on_start=print_job_start,
            on_status=print_rule_finding,
        )
    print_job_summary(job)
    return exit_status(job)
