"""What the commands print: where a job goes, what its rules find as it trains, and the summary
at the end."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
from typing import IO, TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from stepscope.ui.server import ui_installed

if TYPE_CHECKING:
    from stepscope.launcher import Job

__all__ = [
    "discard_output",
    "exit_status",
    "print_job_start",
    "print_job_summary",
    "print_rule_finding",
    "print_rule_status",
]


class _Console(Console):
    """A console whose reader went away (``stepscope run ... 2>&1 | head``, a log pipe that
    died) prints nothing more. Rich's own ends the process, which for ``stepscope run`` meant a
    training job that never started, or was left without its end."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        discard_output(self.file)


def discard_output(stream: IO[Any]) -> None:
    """Send what is left in ``stream``'s buffer, and what is written to it later, nowhere: its
    reader went away, and writing on would fail again (at the latest as Python exits)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)


#: what stepscope says about a job goes to stderr, beside the training's own output on stdout
_console = _Console(stderr=True, highlight=False)
#: a command whose result is the rule statuses (``stepscope rules``) prints them on stdout
_result_console = _Console(highlight=False)

_STYLE = {
    "InProgress": "cyan",
    "IssuesFound": "bold yellow",
    "NoIssuesFound": "green",
    "NotApplicable": "dim",
    "Error": "bold red",
}


#: Statuses worth a line while the job runs: a rule found something, or failed. A rule waiting
#: for data, or done without findings, is left to the summary table at the end.
_NEWS = frozenset(("IssuesFound", "Error"))


def _say(text: str, *, markup: bool = True, console: Console = _console) -> None:
    """One line, never wrapped by us: a path in it stays whole to copy (the terminal wraps it)."""
    console.print(text, markup=markup, soft_wrap=True)


def print_job_start(job: Job) -> None:
    """Where the job's data goes, and how to watch it while it trains."""
    _say(f"Profiling into {job.path}", markup=False)
    _say(f"Watch it live:  {_ui_command(job)}", markup=False)


def _ui_command(job: Job) -> str:
    """The command that opens the UI on the job's folder, quoted for a shell as needed, so it
    can be pasted whatever the folder's name holds (spaces, ``#``, quotes); and what it needs
    first where the ``ui`` extra is not installed."""
    command = f"stepscope ui {shlex.quote(str(job.path.parent))}"
    if ui_installed():
        return command
    return f"{command}  (after pip install 'stepscope[ui]')"


def print_rule_status(rule: str, status: dict[str, Any], *, result: bool = False) -> None:
    """One line: ``rule  state  message``; on stdout when it is the command's ``result``."""
    state = str(status.get("status", "?"))
    message = str(status.get("message") or "")
    _say(
        f"[{_STYLE.get(state, '')}]{escape(f'{rule:<26} {state:<14}')}[/] {escape(message)}",
        console=_result_console if result else _console,
    )


def print_rule_finding(rule: str, status: dict[str, Any]) -> None:
    """:func:`print_rule_status` when the status is IssuesFound or Error (the job runs)."""
    if str(status.get("status")) in _NEWS:
        print_rule_status(rule, status)


def print_job_summary(job: Job) -> None:
    """Where the data is, what the rules found, and how to look at it."""
    statuses = job.rule_statuses()
    if statuses:
        table = Table(title="Rules", show_lines=False, title_justify="left")
        table.add_column("rule")
        table.add_column("status")
        table.add_column("violations", justify="right")
        table.add_column("finding", overflow="fold")
        for rule, status in sorted(
            statuses.items(), key=lambda item: (not item[1].get("triggered"), item[0])
        ):
            state = str(status.get("status", "?"))
            table.add_row(
                escape(rule),
                f"[{_STYLE.get(state, '')}]{escape(state)}[/]",
                escape(str(status.get("violations", ""))),
                escape(str(status.get("message") or "")),
            )
        _console.print(table)
    _say(f"Job [bold]{job.status}[/] ({_ending(job)}); data in {escape(str(job.path))}")
    if job.report_path.exists():
        _say(f"Report:  {job.report_path}", markup=False)
    _say(f"Open the Profiler UI:  {_ui_command(job)}", markup=False)


def exit_status(job: Job) -> int:
    """The command's exit status as a shell reports it, so scripts and schedulers that test it
    (137 for a job the OOM killer ended) work unchanged: ``128 + N`` when signal ``N`` killed the
    command (``job.exit_code`` is then ``-N``), 1 when it has no exit code."""
    if job.exit_code is None:
        return 1
    return 128 - job.exit_code if job.exit_code < 0 else job.exit_code


def _ending(job: Job) -> str:
    """How the command ended: its exit code, or the signal that killed it with the exit status
    ``stepscope run`` passes on (``job.json`` keeps ``-N``, as Python reports it)."""
    code = job.exit_code
    if code is None or code >= 0:
        return f"exit code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"killed by {name}, exit status {exit_status(job)}"
