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
from typing import IO, BinaryIO

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.export._protobuf import Messages, bytes_field, varint_field
from stepscope.export.model import (
    TrackSlices,
    iter_counters,
    iter_track_slices,
    linked_correlations,
)
from stepscope.export.summary import ExportSummary, open_output
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

    def write_column(self, packets: pa.Array) -> None:
        """Packets already encoded (never the first one, which a track descriptor always is)."""
        if len(packets) == 0:
            return
        offsets = np.frombuffer(packets.buffers()[1], dtype=np.int64)
        first, last = offsets[packets.offset], offsets[packets.offset + len(packets)]
        self.stream.write(memoryview(packets.buffers()[2])[first:last])


def _lane_path(lane: TrackSlices) -> tuple[str, ...]:
    track = lane.track
    rank = f"rank {track.rank}" if track.rank >= 0 else "rank ?"
    if track.side == "gpu":
        return (track.node, "GPUs", f"GPU-{track.gpu}", f"{rank} · {track.label}")
    return (track.node, "CPU", f"{rank} · {track.label}")


#: ``debug_annotations`` taken from integer columns (left out where the column is negative).
_ANNOTATED = ("step", "correlation", "external_id", "bytes")


def _packets(ts_ns: np.ndarray, event: Messages) -> pa.Array:
    """``Trace.packet`` entries: a timestamp and a ``TrackEvent`` per row, on our sequence."""
    count = len(ts_ns)
    body = Messages(count).varints(8, ts_ns).message(11, event).varint(10, _SEQUENCE_ID)
    return Messages(count).message(1, body).encode()


def _ns(us: np.ndarray) -> np.ndarray:
    return np.rint(np.asarray(us, dtype=np.float64) * 1000.0).astype(np.int64)


def _nesting_order(start_ns: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
    """The order of a nested lane's begins (``i``) and ends (``n + i``) in a well-formed trace.

    A slice ends right before the first later slice that starts at or after its end (or at the
    very end), innermost first — what a stack of open slices pops, without the Python loop.
    """
    count = len(start_ns)
    index = np.arange(count)
    closes_before = np.maximum(index + 1, np.searchsorted(start_ns, end_ns, side="left"))
    group = np.concatenate([index, closes_before])
    is_begin = np.concatenate([np.ones(count, dtype=np.int8), np.zeros(count, dtype=np.int8)])
    innermost_first = np.concatenate([np.zeros(count, dtype=np.int64), -index])
    return np.lexsort((innermost_first, is_begin, group))


def _write_lane(out: _TraceWriter, lane: TrackSlices, linked: np.ndarray) -> int:
    uuid = out.track(_lane_path(lane))
    count = len(lane)
    if count == 0:
        return 0
    table = lane.table.combine_chunks()
    start_ns = _ns(lane.column("start_us"))
    end_ns = np.maximum(start_ns, _ns(lane.column("end_us")))
    begin = Messages(count).varint(9, _SLICE_BEGIN).varint(11, uuid)
    begin.strings(23, table.column("name").chunk(0)).strings(22, table.column("category").chunk(0))
    for column in _ANNOTATED:
        values = lane.column(column)
        annotation = Messages(count, values >= 0).raw(bytes_field(10, column))
        begin.message(4, annotation.varints(4, values))
    args = table.column("args").chunk(0)
    has_args = pc.not_equal(args, "").to_numpy(zero_copy_only=False)
    begin.message(4, Messages(count, has_args).raw(bytes_field(10, "args")).strings(6, args))
    flows = lane.flow_ids(linked)
    launches = lane.launches()
    begin.splice(Messages(count, (flows >= 0) & launches).fixed64s(47, flows))
    begin.splice(Messages(count, (flows >= 0) & ~launches).fixed64s(48, flows))
    begins = _packets(start_ns, begin)
    ends = _packets(end_ns, Messages(count).varint(9, _SLICE_END).varint(11, uuid))
    packets = pa.concat_arrays([begins, ends]).take(pa.array(_nesting_order(start_ns, end_ns)))
    out.write_column(packets)
    return count


def write_perfetto_trace(
    con: duckdb.DuckDBPyConnection, output: Path | BinaryIO, window: Window
) -> ExportSummary:
    """Write the job's window as a Perfetto protobuf trace (open it in ui.perfetto.dev) to a
    file or a binary stream."""
    linked = linked_correlations(con, window)
    summary = ExportSummary(path=output if isinstance(output, Path) else None, format="perfetto")
    with open_output(output) as stream:
        out = _TraceWriter(stream)
        for series in iter_counters(con, window):
            group = (
                (series.node, "CPU")
                if series.gpu < 0
                else (series.node, "GPUs", f"GPU-{series.gpu}")
            )
            uuid = out.track((*group, f"{series.name} ({series.unit})"), counter_unit=series.unit)
            count = len(series.values)
            event = Messages(count).varint(9, _COUNTER).varint(11, uuid)
            event.fixed64s(44, series.values, dtype="<f8")
            out.write_column(_packets(_ns(series.timestamps_us), event))
            summary.counters += 1
        for lane in iter_track_slices(con, window):
            summary.slices += _write_lane(out, lane, linked)
            summary.tracks += 1
        summary.flows = len(linked)  # one launch → GPU activity arrow per linked id
    return summary
