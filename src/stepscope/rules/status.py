"""Where rule results go on disk: ``<Rule>/status.json`` and ``profiler-reports/<Rule>.json``.

Both files are replaced atomically (written beside, then renamed), so the UI, ``stepscope run``
and the report never read a half-written file while the engine updates them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from stepscope._atomic import write_atomic
from stepscope.rules.base import RuleResult

__all__ = [
    "read_results",
    "read_source",
    "unwritable",
    "write_json_atomic",
    "write_results",
    "write_source",
]

logger = logging.getLogger(__name__)

_JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS

#: In a results folder outside its job (a trace's, an S3 output's): the input they are of.
_SOURCE = "source.json"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` through a temporary file and a rename (NaN -> null)."""
    write_atomic(path, orjson.dumps(data, option=_JSON_OPTIONS))


def unwritable(result: RuleResult) -> str | None:
    """Why ``result`` cannot be written as JSON, or None: a user rule's verdict may hold what
    JSON cannot (a set, a path), and its files must not keep the other rules' from being written."""
    try:
        orjson.dumps(result.to_report(), option=_JSON_OPTIONS)
    except orjson.JSONEncodeError as exc:
        return str(exc)
    return None


def write_results(output_dir: Path, results: Mapping[str, RuleResult]) -> None:
    """Write every result's status file and report JSON under ``output_dir`` (``rule-output``)."""
    for name, result in results.items():
        write_json_atomic(output_dir / name / "status.json", result.to_status())
        write_json_atomic(output_dir / "profiler-reports" / f"{name}.json", result.to_report())


def read_results(output_dir: Path) -> dict[str, RuleResult]:
    """The results written under ``output_dir``, by rule name; unreadable files are skipped."""
    results: dict[str, RuleResult] = {}
    for report in sorted((output_dir / "profiler-reports").glob("*.json")):
        try:
            data = orjson.loads(report.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            logger.warning("skipping unreadable rule report %s: %s", report, exc)
            continue
        result = RuleResult.from_report(data)
        results[result.rule or report.stem] = result
    return results


def write_source(output_dir: Path, source: str) -> None:
    """Record that ``output_dir`` holds the results of the input ``source``.

    A read-only input keeps its results in a folder of the user's, which may hold another
    input's results already; the record tells the report whose they are.
    """
    write_json_atomic(output_dir / _SOURCE, {"input": source})


def read_source(output_dir: Path) -> str | None:
    """The input recorded by :func:`write_source`; None when there is no (readable) record."""
    try:
        source = orjson.loads((output_dir / _SOURCE).read_bytes()).get("input")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return None
    return str(source) if source is not None else None
