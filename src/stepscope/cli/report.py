"""``stepscope report``: write the self-contained HTML profiling report of a job."""

from __future__ import annotations

import argparse

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path", help="job folder, SageMaker Debugger output folder (or s3:// URL), Kineto trace"
    )
    parser.add_argument(
        "-o",
        "--output",
        help="HTML file to write (default <job>/rule-output/profiler-report.html; required for "
        "a read-only input, such as a trace or s3://); the rule results are the job's own, or, "
        "for a read-only input, read from or computed into this file's folder (computed again "
        "when they are another input's)",
    )


def main(args: argparse.Namespace) -> int:
    from stepscope.cli.run import naming_flags
    from stepscope.errors import ConfigError
    from stepscope.report import write_report

    if args.output == "-":
        # stepscope export -o - writes to standard output; here it was a file named "-"
        raise ConfigError(
            "-o",
            "-",
            "an HTML file to write",
            "The report is a file, with its rule results beside it for a read-only input, and "
            "is not written to standard output.",
        )
    with naming_flags({"output": "-o"}):
        path = write_report(args.path, output=args.output)
    print(f"profiling report: {path}")
    return 0
