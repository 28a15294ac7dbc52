"""What the commands print: rule statuses as they change, and the summary at the end of a job."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from stepscope.launch import Job

__all__ = ["print_job_summary", "print_rule_status"]

_console = Console(stderr=True, highlight=False)

_STYLE = {
    "InProgress": "cyan",
    "IssuesFound": "bold yellow",
    "NoIssuesFound": "green",
    "NotApplicable": "dim",
    "Error": "bold red",
}


def print_rule_status(rule: str, status: dict[str, Any]) -> None:
    """One line per change: ``rule  state  message``."""
    state = str(status.get("status", "?"))
    message = status.get("message") or ""
    _console.print(f"[{_STYLE.get(state, '')}]{rule:<26} {state:<14}[/] {message}")


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
                rule,
                f"[{_STYLE.get(state, '')}]{state}[/]",
                str(status.get("violations", "")),
                str(status.get("message") or ""),
            )
        _console.print(table)
    _console.print(f"Job [bold]{job.status}[/] (exit code {job.exit_code}); data in {job.path}")
    if job.report_path.exists():
        _console.print(f"Report:  {job.report_path}")
    _console.print(f"Open the Profiler UI:  stepscope ui {job.path.parent}")
