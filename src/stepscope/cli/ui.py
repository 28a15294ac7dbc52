"""``stepscope ui``: serve the Profiler UI over jobs found under the given folders."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from stepscope.ui.server import DEFAULT_PORT

    parser.add_argument(
        "roots",
        nargs="*",
        metavar="ROOT",
        help="folders (or trace files) to list jobs from (default: ./stepscope-jobs and .)",
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="TCP port, 1-65535 (default %(default)s)"
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to bind (default %(default)s); any other address requires the printed token",
    )
    parser.add_argument("--no-browser", action="store_true", help="do not open a browser")


def main(args: argparse.Namespace) -> int:
    from stepscope.cli.run import naming_flags
    from stepscope.ui.discovery import check_root
    from stepscope.ui.server import serve

    # the roots a user names must be there; the default ones may not be yet
    roots = [check_root(root) for root in args.roots] or [Path("stepscope-jobs"), Path(".")]
    with naming_flags({"serve.port": "--port"}):
        serve(roots, host=args.host, port=args.port, open_browser=not args.no_browser)
    return 0
