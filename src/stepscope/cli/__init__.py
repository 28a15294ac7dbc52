"""The ``stepscope`` command: one module per subcommand, each a thin wrapper over a public function.

Every subcommand module defines ``add_arguments(parser)`` and ``main(args) -> int``, and
``RANGE_OPTIONS`` when some of its options take a range (``--steps A:B``). The table below is the
only list of commands; modules are imported lazily so ``stepscope --help`` stays fast.
Only this package configures logging and maps stepscope errors to exit codes (2 for a bad
configuration, 1 for any other stepscope error or for a file or folder that cannot be written or
read, such as an output path in a missing folder). A Ctrl-C that a command does not handle
itself ends it with one line and 130, as a shell reports a command that SIGINT ended. A SIGTERM
(``kill``, ``timeout``, a scheduler) or SIGHUP (a closed terminal) that a command does not
handle itself unwinds it as an exception does, so that a file half written (an export, a
report) is removed, not left beside its output, and ends it with 128 + N, as a shell reports a
command that the signal ended.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from stepscope import __version__
from stepscope._signals import handling
from stepscope.errors import ConfigError, StepscopeError

__all__ = ["COMMANDS", "main"]

#: subcommand -> (module under stepscope.cli, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "run a training command under the profiler"),
    "demo": ("demo", "run a small profiled training job that shows every part working"),
    "update": ("update", "change what a running job profiles"),
    "export": ("export", "write a job or trace as one trace for Perfetto UI or chrome://tracing"),
    "ui": ("ui", "serve the Profiler UI (job list, dashboard, timeline, information, settings)"),
    "rules": ("rules", "run the profiler rules over a recorded job, trace or SageMaker output"),
    "report": ("report", "write the self-contained HTML profiling report of a job"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stepscope",
        description="Local-first profiler for deep-learning training jobs.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    parser.add_argument("--version", action="version", version=f"stepscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, description=help_text)
    return parser


def _join_dashed_ranges(words: Sequence[str], options: Collection[str]) -> list[str]:
    """``--steps -5:3`` as ``--steps=-5:3``: argparse takes a word that starts with ``-`` and is
    no plain negative number for an option, and said "expected one argument"; joined to its
    option, the range reaches the option's own check, which says what a range allows. Nothing
    after ``--`` is touched."""
    joined: list[str] = []
    for index, word in enumerate(words):
        if word == "--":
            return [*joined, *words[index:]]
        if joined and joined[-1] in options and word[:1] == "-" and ":" in word:
            joined[-1] = f"{joined[-1]}={word}"
        else:
            joined.append(word)
    return joined


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stepscope`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # Parse the options before the command and its name first (an unknown option there is an
    # error, as after it), then let that command's module define its own arguments.
    index = next((i for i, word in enumerate(argv) if not word.startswith("-")), len(argv))
    known = parser.parse_args(argv[: index + 1])
    command = known.command
    module = importlib.import_module(f"stepscope.cli.{COMMANDS[command][0]}")
    sub_parser = argparse.ArgumentParser(
        prog=f"stepscope {command}", description=COMMANDS[command][1]
    )
    sub_parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    module.add_arguments(sub_parser)
    words = _join_dashed_ranges(argv[index + 1 :], getattr(module, "RANGE_OPTIONS", ()))
    args = sub_parser.parse_args(words)
    args.verbose = args.verbose or known.verbose
    # Other libraries' messages show only from warnings up (boto's INFO lines, printed under
    # our prefix, read as if they were ours); stepscope's own from INFO, or DEBUG with -v.
    logging.basicConfig(level=logging.WARNING, format="stepscope: %(message)s")
    logging.getLogger("stepscope").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    try:
        status = _run_command(module, args)
        sys.stdout.flush()  # a reader that went away fails here, not as Python exits
        return status
    except BrokenPipeError:
        # the reader took what it wanted and left (| head): end quietly, with the status of a
        # Unix tool that SIGPIPE ended
        from stepscope.cli.output import discard_output

        discard_output(sys.stdout)
        return 128 + signal.SIGPIPE
    except ConfigError as exc:
        print(f"stepscope: error: {exc}", file=sys.stderr)
        return 2
    except StepscopeError as exc:
        print(f"stepscope: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        # The message names the path and what is wrong with it; a traceback would add nothing.
        where = f": {exc.filename}" if exc.filename else ""
        print(f"stepscope: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # the user asked to stop: where the command was when it stopped is of no use to them
        print("stepscope: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT


#: Signals that end a process at once by default, and that a command unwinds from instead.
_UNWINDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _run_command(module: Any, args: argparse.Namespace) -> int:
    """``module.main(args)``, ended by a signal as the signal says, wherever it lands.

    A signal that arrives during a DuckDB query interrupts it, and the query raises its own
    error ("Query interrupted") in place of the signal's exception: that error is the signal's
    exception again, so that Ctrl-C still ends with one line and 130, not a traceback and 1.
    """
    received: list[int] = []
    with _unwinding_on_signals(received):
        try:
            return int(module.main(args))
        except Exception:
            if not received:
                raise
            if received[-1] == signal.SIGINT:
                raise KeyboardInterrupt from None
            raise SystemExit(128 + received[-1]) from None


@contextmanager
def _unwinding_on_signals(received: list[int]) -> Iterator[None]:
    """While a command runs, note each of its signals in ``received`` and raise its exception
    where the command is: Ctrl-C's :class:`KeyboardInterrupt`, and for SIGTERM and SIGHUP,
    which would end the process at once, :class:`SystemExit` (status 128 + N), so that the
    blocks writing beside an output remove what they wrote. A signal set to be ignored
    (``nohup``) stays so, and a command that handles one itself (``run`` passes them on to its
    training command) replaces this for its duration. Only the main thread can handle signals:
    from another, nothing changes."""

    def unwind(signum: int, frame: object) -> None:
        received.append(signum)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    untouched = [s for s in _UNWINDING_SIGNALS if signal.getsignal(s) == signal.SIG_DFL]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        untouched.append(signal.SIGINT)
    with handling(untouched, unwind):
        yield


if __name__ == "__main__":
    sys.exit(main())
