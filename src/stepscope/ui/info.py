"""The Information page's content: what is known about a loaded job, as titled sections.

For a stepscope job most of it comes from ``job.json`` (command, hosts and hardware, ranks,
versions, hyperparameters, profiler configuration); for a SageMaker Debugger folder or Kineto
traces, from what the store recovered (nodes, ranks, a trace's ``deviceProperties`` and
``distributedInfo``). A short "Data" section, computed from the job's views, says what was
actually recorded. Sections are either key/value ``rows`` or a ``table`` with ``columns``; every
value is a string or number, so the front end renders them without knowing the job's kind.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any  # Any: job.json's values, and the sections' JSON values

from stepscope.store.kineto import is_unix_time
from stepscope.ui.discovery import JobEntry

__all__ = ["job_information"]

_MAX_ROWS = 200
_MAX_VALUE_CHARS = 2000


def _text(value: object) -> str | int | float:
    if isinstance(value, bool) or value is None:
        return "—" if value is None else ("yes" if value else "no")
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, default=str)
    return text if len(text) <= _MAX_VALUE_CHARS else text[: _MAX_VALUE_CHARS - 1] + "…"


#: What a time reads as when it is no date (a trace cut before its ``baseTimeNanoseconds``).
_OWN_CLOCK = "no date: the trace's times are on its own clock"


#: What the start reads as when the data holds no record to date it (a trace of no events), as
#: the job list and the dashboard say it.
_NO_RECORDS = "No events or metrics"


def _time(us: object) -> str:
    if not isinstance(us, (int, float)) or isinstance(us, bool):
        return "—"
    if not is_unix_time(us):
        return _OWN_CLOCK
    return datetime.fromtimestamp(us / 1e6, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _ranks(ranks: list[int]) -> str:
    """Rank numbers that read as a list: "rank 0", "ranks 0, 1" (a bare "0" read as a count)."""
    if not ranks:
        return "—"
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _bytes(value: object) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        return "—"
    return f"{value / 2**30:,.1f} GiB"


def _rows(title: str, items: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    rows = [[str(key), _text(value)] for key, value in items][:_MAX_ROWS]
    return {"title": title, "rows": rows}


def _table(title: str, columns: list[str], rows: Iterable[list[Any]]) -> dict[str, Any]:
    return {
        "title": title,
        "columns": columns,
        "table": [[_text(v) for v in row] for row in rows][:_MAX_ROWS],
    }


def _flatten(mapping: Mapping[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from _flatten(value, f"{name}.")
        else:
            yield name, value


def _mapping(value: object) -> Mapping[Any, Any]:
    """``value`` when it is a mapping, else an empty one: job.json may hold anything."""
    return value if isinstance(value, Mapping) else {}


def _rank_details(info: Mapping[str, Any]) -> dict[str, Any]:
    """A rank's fields, whether the store nests Kineto metadata under a key or not."""
    merged: dict[str, Any] = {}
    for key, value in info.items():
        if isinstance(value, Mapping) and key in ("kineto", "trace", "metadata"):
            merged.update(value)
        else:
            merged[key] = value
    return merged


def _gpu_names(devices: object) -> str:
    if not isinstance(devices, list) or not devices:
        return "—"
    names = [
        f"{d.get('name', 'GPU')} ({_bytes(d.get('totalGlobalMem') or d.get('memory_bytes'))})"
        for d in devices
        if isinstance(d, Mapping)
    ]
    counted = Counter(names)  # eight identical GPUs read as "8 × A100 (39.4 GiB)"
    return ", ".join(f"{n} × {name}" if n > 1 else name for name, n in counted.items()) or "—"


def _trace_rows(ranks: Mapping[Any, Any]) -> list[list[Any]]:
    """Per rank, what its PyTorch profiler trace says about itself."""
    rows = []
    for rank, raw in sorted(ranks.items(), key=lambda kv: str(kv[0]).zfill(8)):
        trace = raw.get("kineto") if isinstance(raw, Mapping) else None
        if not isinstance(trace, Mapping):
            continue
        distributed = _mapping(trace.get("distributed_info"))
        warnings = trace.get("warnings")
        steps = trace.get("steps")
        if isinstance(steps, list) and steps and all(isinstance(x, int) for x in steps):
            steps = f"{min(steps)}–{max(steps)} ({len(steps)})"
        rows.append(
            [
                str(rank),
                trace.get("host_name") or "—",
                str(trace.get("path") or "—").rsplit("/", 1)[-1],
                trace.get("event_count", "—"),
                steps or "—",
                distributed.get("nccl_version") or "—",
                distributed.get("pg_count", "—"),
                len(warnings) if isinstance(warnings, list) else 0,
            ]
        )
    return rows


def _trace_warnings(ranks: Mapping[Any, Any]) -> list[list[Any]]:
    """Per rank, what the trace reader warned about (events lost, a clock of its own ...)."""
    rows: list[list[Any]] = []
    for rank, raw in sorted(ranks.items(), key=lambda kv: str(kv[0]).zfill(8)):
        trace = _mapping(_mapping(raw).get("kineto"))
        warnings = trace.get("warnings")
        if not isinstance(warnings, list):
            continue
        # the reader names the file first; the traces section names it already
        prefix = f"{trace.get('path')}: "
        rows.extend([str(rank), str(text).removeprefix(prefix)] for text in warnings)
    return rows


def job_information(
    entry: JobEntry, metadata: Mapping[str, Any], data: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The sections of the Information page.

    :param entry: the job as discovery listed it.
    :param metadata: ``JobData.metadata`` (job.json contents and what the store recovered).
    :param data: facts measured from the views: ``first_us``, ``last_us``, ``system_samples``,
        ``events``, ``data_nodes``, ``data_ranks``.
    """
    start_us, end_us = entry.start_us, entry.end_us
    if entry.timed_by_data:
        start_us, end_us = data.get("first_us", start_us), data.get("last_us", end_us)
    start_us = metadata.get("start_time_us", start_us)
    undated = start_us is None and data.get("first_us") is None
    sections = [
        _rows(
            "Job",
            [
                ("Name", entry.name),
                (
                    "Kind",
                    {
                        "stepscope": "stepscope job",
                        "sagemaker": "SageMaker Debugger output",
                        "kineto": "PyTorch profiler trace",
                    }[entry.kind],
                ),
                ("Location", entry.to_json()["location"]),
                ("Status", str(metadata.get("status") or entry.status.capitalize())),
                ("Start", _NO_RECORDS if undated else _time(start_us)),
                ("End", _time(metadata.get("end_time_us", end_us))),
                ("Exit code", metadata.get("exit_code")),
                (
                    "Command",
                    " ".join(map(str, metadata["command"]))
                    if isinstance(metadata.get("command"), list)
                    else None,
                ),
                ("Working directory", metadata.get("cwd")),
            ],
        )
    ]
    sections[0]["rows"] = [row for row in sections[0]["rows"] if row[1] != "—"]
    sections.append(
        _rows(
            "Data",
            [
                ("First record", _time(data.get("first_us"))),
                ("Last record", _time(data.get("last_us"))),
                ("System metric samples", f"{data.get('system_samples', 0):,}"),
                ("Timeline events", f"{data.get('events', 0):,}"),
                ("Nodes with data", ", ".join(data.get("data_nodes", [])) or "—"),
                ("Ranks with data", _ranks(data.get("data_ranks", []))),
            ],
        )
    )
    hosts = _mapping(metadata.get("hosts"))
    hardware = _mapping(metadata.get("hardware"))
    nodes = list(dict.fromkeys([*map(str, metadata.get("nodes") or []), *hardware, *hosts]))
    if nodes:
        rows = []
        for node in nodes:
            hw = _mapping(hardware.get(node))
            rows.append(
                [
                    node,
                    hosts.get(node, "—"),
                    hw.get("cpu_model", "—"),
                    hw.get("cpu_count", "—"),
                    _bytes(hw.get("memory_bytes")),
                    _gpu_names(hw.get("gpus")),
                ]
            )
        sections.append(
            _table(
                "Nodes and hardware", ["Node", "Host", "CPU model", "Cores", "Memory", "GPUs"], rows
            )
        )
    ranks = _mapping(metadata.get("ranks"))
    if ranks:
        rows = []
        for rank, raw in sorted(ranks.items(), key=lambda kv: str(kv[0]).zfill(8)):
            info = _rank_details(raw) if isinstance(raw, Mapping) else {}
            rows.append(
                [
                    str(rank),
                    info.get("node", "—"),
                    info.get("pid", "—"),
                    info.get("world_size", "—"),
                    info.get("backend", "—"),
                    _gpu_names(info.get("device_properties")),
                    _text(info.get("clock_offset_us")),
                ]
            )
        sections.append(
            _table(
                "Ranks",
                ["Rank", "Node", "PID", "World size", "Backend", "Devices", "Clock offset (µs)"],
                rows,
            )
        )
    trace_rows = _trace_rows(ranks)
    if trace_rows:
        sections.append(
            _table(
                "PyTorch profiler traces",
                ["Rank", "Host", "File", "Events", "Steps", "NCCL", "Process groups", "Warnings"],
                trace_rows,
            )
        )
    warning_rows = _trace_warnings(ranks)
    if warning_rows:
        sections.append(_table("Trace warnings", ["Rank", "Warning"], warning_rows))
    for key, title in (
        ("versions", "Framework and library versions"),
        ("hyperparameters", "Hyperparameters"),
        ("profiler_config", "Profiler configuration"),
    ):
        value = metadata.get(key)
        if isinstance(value, Mapping) and value:
            sections.append(_rows(title, _flatten(value)))
    rules = metadata.get("rules")
    if isinstance(rules, list) and rules:
        sections.append(
            _rows("Rules configured", [(str(i + 1), rule) for i, rule in enumerate(rules)])
        )
    return sections
