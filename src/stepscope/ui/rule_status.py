"""Rule verdicts of a job as the dashboard lists them, read from ``rule-output/<Rule>/status.json``.

The rule engine writes one status file per rule while the job trains and after it ends; this
module only reads them (at most :data:`MAX_RULES`, each bounded in size), so the dashboard shows
the latest verdicts of a running job too. Rule names come from the folder listing, never from
the request, and the report path is fixed, so nothing here joins user input into a path; a
status file or report that is a link leaving the job folder is ignored.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any  # Any: a rule status file's JSON values

__all__ = ["MAX_RULES", "read_rule_statuses", "report_file", "stopped_rules"]

logger = logging.getLogger(__name__)

MAX_RULES = 50
_MAX_STATUS_BYTES = 64 * 1024
_FIELDS = ("status", "message", "updated_us", "triggered", "violations", "datapoints")


def _rule_output(job_dir: Path) -> Path:
    return job_dir / "rule-output"


def _inside(job_dir: Path, path: Path) -> bool:
    """Whether ``path``, links resolved, stays in the job folder (a link must not leak a file)."""
    try:
        return path.resolve().is_relative_to(job_dir.resolve())
    except OSError:
        return False


def read_rule_statuses(job_dir: Path) -> list[dict[str, Any]]:
    """One dict per rule (``rule`` plus the status file's fields), sorted by rule name.

    A status file that is unreadable or too large is listed with status ``"Unknown"`` and the
    reason, so a half-written file never hides a rule.
    """
    folder = _rule_output(job_dir)
    if not folder.is_dir():
        return []
    statuses = []
    for status_file in sorted(folder.glob("*/status.json"))[:MAX_RULES]:
        rule = status_file.parent.name
        if not _inside(job_dir, status_file):
            logger.warning("ignoring %s: it links outside the job folder", status_file)
            continue
        try:
            if status_file.stat().st_size > _MAX_STATUS_BYTES:
                raise ValueError("status file is unexpectedly large")
            data = json.loads(status_file.read_text())
            if not isinstance(data, dict):
                raise ValueError("status file is not a JSON object")
        except (OSError, ValueError) as exc:
            logger.warning("cannot read %s: %s", status_file, exc)
            statuses.append({"rule": rule, "status": "Unknown", "message": str(exc)})
            continue
        entry: dict[str, Any] = {"rule": str(data.get("rule") or rule)}
        entry.update({key: data.get(key) for key in _FIELDS})
        statuses.append(entry)
    return statuses


def stopped_rules(statuses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``statuses`` of a job that no longer runs: a rule still ``InProgress`` never made its
    final pass (its engine was killed with the job) and is ``Stopped``, as SageMaker calls a
    rule evaluation its job's end cut short."""
    return [
        {
            **status,
            "status": "Stopped",
            "message": "The job ended before this rule's final pass: its last verdict was "
            f"in progress. {status.get('message') or ''}".strip(),
        }
        if status.get("status") == "InProgress"
        else status
        for status in statuses
    ]


def report_file(job_dir: Path) -> Path | None:
    """The job's HTML profiling report, when it has been written."""
    path = _rule_output(job_dir) / "profiler-report.html"
    return path if path.is_file() and _inside(job_dir, path) else None
