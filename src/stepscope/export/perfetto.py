"""Perfetto's protobuf trace (TrackEvent), which keeps the node → CPU / GPUs → GPU-i tree.

Track tree: ``algo-1`` → ``CPU`` (system counters, then one track per rank thread or framework
track) and ``algo-1`` → ``GPUs`` → ``GPU-<i>`` (utilization and memory counters, allocator
totals, then one track per rank and stream). Slices become SLICE_BEGIN/SLICE_END pairs emitted in
nesting order per track lane; a launch carries a ``flow_ids`` entry that its kernel terminates.
Timestamps are epoch ns. Field numbers follow Perfetto's ``trace_packet.proto``,
``track_descriptor.proto`` and ``track_event.proto``.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

import duckdb

from stepscope.export._protobuf import (
    bytes_field,
    double_field,
    fixed64_field,
    varint_field,
)
from stepscope.export.model import (
    LAUNCH_CATEGORIES,
    TrackSlices,
    flow_id,
    iter_counters,
    iter_track_slices,
    linked_correlations,
)
from stepscope.export.summary import ExportSummary
from stepscope.export.window import Window

__all__ = ["write_perfetto_trace"]

_SEQUENCE_ID = 1
_SLICE_BEGIN, _SLICE_END, _COUNTER = 1, 2, 4
_INCREMENTAL_STATE_CLEARED = 1


class _TraceWriter:
    """Writes length-prefixed ``Trace.packet`` entries and the track tree on first use."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.uuids: dict[tuple[str, ...], int] = {}
        self.first = True

    def packet(self, body: bytes) -> None:
        body += varint_field(10, _SEQUENCE_ID)
        if self.first:
            body += varint_field(13, _INCREMENTAL_STATE_CLEARED)
            self.first = False
        self.stream.write(bytes_field(1, body))

    def track(self, path: tuple[str, ...], *, counter_unit: str | None = None) -> int:
        """The uuid of the track at ``path`` (names from the root), describing it if new."""
        if path in self.uuids:
            return self.uuids[path]
        parent = self.track(path[:-1]) if len(path) > 1 else None
        uuid = self.uuids[path] = len(self.uuids) + 1
        descriptor = varint_field(1, uuid) + bytes_field(2, path[-1])
        if parent is not None:
            descriptor += varint_field(5, parent)
        if counter_unit is not None:
            descriptor += bytes_field(8, bytes_field(6, counter_unit))
        self.packet(bytes_field(60, descriptor))
        return uuid

    def event(self, ts_ns: int, track: int, kind: int, extra: bytes = b"") -> None:
        body = varint_field(9, kind) + varint_field(11, track) + extra
        self.packet(varint_field(8, ts_ns) + bytes_field(11, body))


def _lane_path(lane: TrackSlices) -> tuple[str, ...]:
    track = lane.track
    rank = f"rank {track.rank}" if track.rank >= 0 else "rank ?"
    if track.side == "gpu":
        return (track.node, "GPUs", f"GPU-{track.gpu}", f"{rank} · {track.label}")
    return (track.node, "CPU", f"{rank} · {track.label}")


def _annotation(name: str, value: int | str) -> bytes:
    body = bytes_field(10, name)
    body += varint_field(4, value) if isinstance(value, int) else bytes_field(6, value)
    return bytes_field(4, body)


def _ns(us: float) -> int:
    return int(round(us * 1000.0))


def _write_lane(out: _TraceWriter, lane: TrackSlices, linked: set[int]) -> int:
    uuid = out.track(_lane_path(lane))
    c = lane.columns
    open_ends: list[int] = []
    for i in range(len(lane)):
        start = _ns(float(c["start_us"][i]))
        while open_ends and open_ends[-1] <= start:
            out.event(open_ends.pop(), uuid, _SLICE_END)
        category = str(c["category"][i])
        extra = bytes_field(23, str(c["name"][i])) + bytes_field(22, category)
        for column in ("step", "correlation", "external_id", "bytes"):
            if c[column][i] >= 0:
                extra += _annotation(column, int(c[column][i]))
        if c["args"][i]:
            extra += _annotation("args", str(c["args"][i]))
        fid = flow_id(int(c["rank"][i]), int(c["correlation"][i]))
        if c["correlation"][i] >= 0 and fid in linked:
            extra += fixed64_field(47 if category in LAUNCH_CATEGORIES else 48, fid)
        out.event(start, uuid, _SLICE_BEGIN, extra)
        open_ends.append(max(start, _ns(float(c["end_us"][i]))))
    while open_ends:
        out.event(open_ends.pop(), uuid, _SLICE_END)
    return len(lane)


def write_perfetto_trace(
    con: duckdb.DuckDBPyConnection, output: Path, window: Window
) -> ExportSummary:
    """Write the job's window as a Perfetto protobuf trace (open it in ui.perfetto.dev)."""
    linked = linked_correlations(con, window)
    summary = ExportSummary(path=output, format="perfetto")
    with open(output, "wb") as stream:
        out = _TraceWriter(stream)
        for series in iter_counters(con, window):
            group = (
                (series.node, "CPU")
                if series.gpu < 0
                else (series.node, "GPUs", f"GPU-{series.gpu}")
            )
            uuid = out.track((*group, f"{series.name} ({series.unit})"), counter_unit=series.unit)
            for t, value in zip(series.timestamps_us, series.values, strict=True):
                out.event(_ns(float(t)), uuid, _COUNTER, double_field(44, float(value)))
            summary.counters += 1
        for lane in iter_track_slices(con, window):
            summary.slices += _write_lane(out, lane, linked)
            summary.tracks += 1
        summary.flows = len(linked)  # one launch → GPU activity arrow per linked id
    return summary
