"""``stepscope export <job-or-trace> --format perfetto|chrome``: one trace for Perfetto or Chrome."""

from __future__ import annotations

import argparse
import sys

__all__ = ["RANGE_OPTIONS", "add_arguments", "main"]

RANGE_OPTIONS = ("--steps", "--time")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from stepscope.export import EXPORT_FORMATS

    parser.add_argument(
        "source",
        help="a job folder, SageMaker output folder, PyTorch profiler trace, or folder of "
        "traces (one per rank)",
    )
    parser.add_argument(
        "--format",
        choices=sorted(EXPORT_FORMATS),
        help="perfetto: protobuf TrackEvent; chrome: trace-event JSON (default: chrome for an "
        "output named *.json or *.json.gz, else perfetto)",
    )
    parser.add_argument(
        "-o",
        "--output",
        help="the file to write, or - for standard output (default: <job>.perfetto-trace, or "
        "<job>.trace.json.gz for --format chrome, in the current folder)",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--steps",
        metavar="A:B",
        help="only steps A <= step < B; a bound left out reaches the job's edge, so 100: "
        "keeps all after step 100 and : the whole job (default: the whole job)",
    )
    which.add_argument(
        "--time",
        metavar="A:B",
        help="only seconds A to B from the job's first record; either bound may be left out "
        "(default: the whole job)",
    )


def main(args: argparse.Namespace) -> int:
    from stepscope.cli.run import naming_flags
    from stepscope.errors import ConfigError
    from stepscope.export import export_trace, parse_range

    steps = parse_range(args.steps, parameter="--steps", integer=True) if args.steps else None
    time_s = parse_range(args.time, parameter="--time", integer=False) if args.time else None
    # -o - is standard output, as for other Unix tools; what is said about the trace then goes
    # to stderr, so that stdout holds the trace alone
    to_stdout = args.output == "-"
    if to_stdout and sys.stdout.isatty():
        raise ConfigError(
            "-o",
            "-",
            "a file, or - with standard output piped or redirected",
            "Standard output is a terminal, which a trace would flood: pipe it (-o - | ...) or "
            "redirect it (-o - > FILE).",
        )
    with naming_flags(
        {"steps": "--steps", "time_s": "--time", "output": "-o"},
        typed={"steps": args.steps, "time_s": args.time},
    ):
        summary = export_trace(
            args.source,
            sys.stdout.buffer if to_stdout else args.output,
            format=args.format,
            steps=steps,
            time_s=time_s,
        )
    if to_stdout:
        sys.stdout.buffer.flush()  # a reader gone (-o - | head) ends the command here
    if to_stdout:
        print(f"standard output: {summary}", file=sys.stderr)
    else:
        print(summary)
    return 0
