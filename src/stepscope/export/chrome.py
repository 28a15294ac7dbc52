"""Chrome trace-event JSON (chrome://tracing, Perfetto UI's JSON import).

One process per node/rank/device side, one thread per track lane, so every thread's slices nest
strictly; system metrics become counter (``C``) events of a ``<node> · system`` process; each
launch → GPU activity pair becomes a flow (``s`` on the launch, ``f`` bound to the kernel's
start). Timestamps are µs from the first exported event (``otherData.origin_epoch_us`` keeps the
absolute origin), which keeps sub-µs precision that absolute epoch floats would lose.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import Any

import duckdb
import orjson

from stepscope.export.model import (
    LAUNCH_CATEGORIES,
    flow_id,
    iter_counters,
    iter_track_slices,
    linked_correlations,
)
from stepscope.export.summary import ExportSummary, origin_us
from stepscope.export.window import Window

__all__ = ["write_chrome_trace"]

_EXTRACTED = ("step", "correlation", "external_id", "bytes")


class _Ids:
    """Stable pid/tid numbers for process and thread labels, with their metadata events."""

    def __init__(self, out: _EventWriter) -> None:
        self.out = out
        self.pids: dict[str, int] = {}
        self.tids: dict[tuple[int, str], int] = {}

    def pid(self, label: str) -> int:
        if label not in self.pids:
            pid = self.pids[label] = len(self.pids) + 1
            self.out.write({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": label}})
            self.out.write(
                {"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}}
            )
        return self.pids[label]

    def tid(self, pid: int, label: str) -> int:
        key = (pid, label)
        if key not in self.tids:
            tid = self.tids[key] = len(self.tids) + 1
            self.out.write(
                {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}}
            )
            self.out.write(
                {
                    "ph": "M",
                    "name": "thread_sort_index",
                    "pid": pid,
                    "tid": tid,
                    "args": {"sort_index": tid},
                }
            )
        return self.tids[key]


class _EventWriter:
    """Writes the ``traceEvents`` array one event per line."""

    def __init__(self, stream: io.BufferedIOBase) -> None:
        self.stream = stream
        self.first = True

    def write(self, event: dict[str, Any]) -> None:
        self.stream.write(b"\n" if self.first else b",\n")
        self.first = False
        self.stream.write(orjson.dumps(event))


def write_chrome_trace(
    con: duckdb.DuckDBPyConnection, output: Path, window: Window
) -> ExportSummary:
    """Write the job's window as Chrome trace JSON (gzipped when ``output`` ends in ``.gz``)."""
    origin = origin_us(con, window)
    linked = linked_correlations(con, window)
    summary = ExportSummary(path=output, format="chrome")
    opener = gzip.open if output.name.endswith(".gz") else open
    with opener(output, "wb") as stream:
        header = {"displayTimeUnit": "ms", "otherData": {"origin_epoch_us": origin}}
        stream.write(orjson.dumps(header)[:-1] + b',"traceEvents":[')
        out = _EventWriter(stream)
        ids = _Ids(out)
        for lane in iter_track_slices(con, window):
            pid = ids.pid(lane.track.process_label)
            tid = ids.tid(pid, lane.track.label)
            summary.tracks += 1
            c = lane.columns
            for i in range(len(lane)):
                start = float(c["start_us"][i]) - origin
                args = orjson.loads(c["args"][i]) if c["args"][i] else {}
                for name in _EXTRACTED:
                    if c[name][i] >= 0:
                        args[name] = int(c[name][i])
                category = str(c["category"][i])
                out.write(
                    {
                        "ph": "X",
                        "name": str(c["name"][i]),
                        "cat": category,
                        "pid": pid,
                        "tid": tid,
                        "ts": start,
                        "dur": float(c["end_us"][i]) - float(c["start_us"][i]),
                        "args": args,
                    }
                )
                summary.slices += 1
                fid = flow_id(int(c["rank"][i]), int(c["correlation"][i]))
                if c["correlation"][i] >= 0 and fid in linked:
                    flow = {"id": fid, "pid": pid, "tid": tid, "ts": start, "cat": "ac2g"}
                    if category in LAUNCH_CATEGORIES:
                        out.write({"ph": "s", "name": "launch", **flow})
                        summary.flows += 1
                    else:
                        out.write({"ph": "f", "bp": "e", "name": "launch", **flow})
        for series in iter_counters(con, window):
            pid = ids.pid(f"{series.node} · system")
            name = series.name if series.gpu < 0 else f"GPU-{series.gpu} {series.name}"
            name = f"{name} ({series.unit})"
            for t, value in zip(series.timestamps_us, series.values, strict=True):
                out.write(
                    {
                        "ph": "C",
                        "name": name,
                        "pid": pid,
                        "ts": float(t) - origin,
                        "args": {"value": float(value)},
                    }
                )
            summary.counters += 1
        stream.write(b"\n]}\n")
    return summary
