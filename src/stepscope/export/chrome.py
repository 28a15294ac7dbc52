"""Chrome trace-event JSON (chrome://tracing, Perfetto UI's JSON import).

One process per node/rank/device side, one thread per track lane, so every thread's slices nest
strictly; system metrics become counter (``C``) events of a ``<node> · system`` process; each
launch → GPU activity pair becomes a flow (``s`` on the launch, ``f`` bound to the kernel's
start). Timestamps are µs from the first exported event (``otherData.origin_epoch_us`` keeps the
absolute origin), which keeps sub-µs precision that absolute epoch floats would lose.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO

import duckdb
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.export.model import (
    TrackSlices,
    iter_counters,
    iter_track_slices,
    linked_correlations,
)
from stepscope.export.summary import ExportSummary, open_output, origin_us
from stepscope.export.window import Window

__all__ = ["write_chrome_trace"]


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

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.first = True

    def write(self, event: dict[str, Any]) -> None:
        self.write_raw(b",\n" + orjson.dumps(event))

    def write_lines(self, lines: pa.Array | pa.ChunkedArray) -> None:
        """Events already encoded as strings, each led by its ``,\\n`` separator."""
        for chunk in lines.chunks if isinstance(lines, pa.ChunkedArray) else [lines]:
            if len(chunk):
                offsets = np.frombuffer(chunk.buffers()[1], dtype=_OFFSET[chunk.type])
                first, last = offsets[chunk.offset], offsets[chunk.offset + len(chunk)]
                self.write_raw(memoryview(chunk.buffers()[2])[first:last])

    def write_raw(self, data: bytes | memoryview) -> None:
        """Encoded events, each led by its ``,\\n`` separator."""
        if self.first:
            data = data[1:]  # the array's first event: a newline, no comma
            self.first = False
        self.stream.write(data)


#: Arrow's string offsets: 32-bit, or 64-bit for ``large_string``.
_OFFSET = {pa.string(): np.int32, pa.large_string(): np.int64}


#: One line per slice (and one more for its flow end, if any), built column-wise by DuckDB.
#: Extracted columns override same-named keys of ``args`` (JSON merge patch); when ``args`` has
#: none of them (readers take them out), they are spliced in as text.
_LANE_LINES = """
    WITH e AS (
        SELECT flow, launch, args, CAST(start_us - $origin AS VARCHAR) AS ts,
            concat_ws(',',
                CASE WHEN step >= 0 THEN '"step":' || step END,
                CASE WHEN correlation >= 0 THEN '"correlation":' || correlation END,
                CASE WHEN external_id >= 0 THEN '"external_id":' || external_id END,
                CASE WHEN bytes >= 0 THEN '"bytes":' || bytes END) AS extracted,
            ',\n{"ph":"X","name":' || to_json(name) || ',"cat":' || to_json(category) AS head,
            ',"dur":' || CAST(end_us - start_us AS VARCHAR) || ',"args":' AS dur
        FROM export_lane
    )
    SELECT head || $ids || ts || dur
        || CASE WHEN extracted = '' THEN CASE WHEN args = '' THEN '{}' ELSE args END
                WHEN args = '' OR args = '{}' THEN '{' || extracted || '}'
                WHEN NOT (contains(args, '"step"') OR contains(args, '"correlation"')
                          OR contains(args, '"external_id"') OR contains(args, '"bytes"'))
                    THEN left(args, -1) || ',' || extracted || '}'
                ELSE CAST(json_merge_patch(args, '{' || extracted || '}') AS VARCHAR) END
        || '}'
        || CASE WHEN flow < 0 THEN ''
                WHEN launch THEN ',\n{"ph":"s","name":"launch","id":' || flow || $ids || ts
                    || ',"cat":"ac2g"}'
                ELSE ',\n{"ph":"f","bp":"e","name":"launch","id":' || flow || $ids || ts
                    || ',"cat":"ac2g"}' END AS line
    FROM e
"""


def _lane_lines(
    con: duckdb.DuckDBPyConnection, lane: TrackSlices, ids: str, origin: float, flows: np.ndarray
) -> pa.ChunkedArray:
    """The lane's slice and flow events, each line led by ``,\\n``, in the lane's order (a
    projection keeps the scan's order); ``ids`` is ``,"pid":P,"tid":T,"ts":``."""
    table = lane.table.append_column("flow", pa.array(flows))
    table = table.append_column("launch", pa.array(lane.launches()))
    con.register("export_lane", table)
    try:
        lines = con.sql(_LANE_LINES, params={"origin": origin, "ids": ids}).to_arrow_table()
    finally:
        con.unregister("export_lane")
    return lines.column("line")


def _numbers(values: np.ndarray) -> pa.Array:
    """JSON numbers as text (shortest round-trip form); ``null`` for NaN and infinities."""
    array = pa.array(np.asarray(values, dtype=np.float64))
    return pc.if_else(pc.is_finite(array), array.cast(pa.string()), "null")


def _counter_lines(name: str, pid: int, timestamps_us: np.ndarray, values: np.ndarray) -> pa.Array:
    """One ``C`` event per sample, each led by ``,\\n``."""
    head = ',\n{"ph":"C","name":' + orjson.dumps(name).decode() + f',"pid":{pid},"ts":'
    return pc.binary_join_element_wise(
        head, _numbers(timestamps_us), ',"args":{"value":', _numbers(values), "}}", ""
    )


def write_chrome_trace(
    con: duckdb.DuckDBPyConnection, output: Path | BinaryIO, window: Window
) -> ExportSummary:
    """Write the job's window as Chrome trace JSON to a file (gzipped when its name ends in
    ``.gz``) or a binary stream.

    A gzipped file is written at the fastest level (:mod:`stepscope._gzip`): compressing is most
    of a Chrome export's time at higher levels (zlib's level 9 took three times as long as
    everything else), for files only about a third smaller.
    """
    origin = origin_us(con, window)
    linked = linked_correlations(con, window)
    summary = ExportSummary(path=output if isinstance(output, Path) else None, format="chrome")
    with open_output(output, gzip=True) as stream:
        header = {"displayTimeUnit": "ms", "otherData": {"origin_epoch_us": origin}}
        stream.write(orjson.dumps(header)[:-1] + b',"traceEvents":[')
        out = _EventWriter(stream)
        ids = _Ids(out)
        lines_con = con.cursor()  # ``con`` streams the slices meanwhile
        for lane in iter_track_slices(con, window):
            pid = ids.pid(lane.track.process_label)
            tid = ids.tid(pid, lane.track.label)
            summary.tracks += 1
            flows = lane.flow_ids(linked)
            out.write_lines(
                _lane_lines(lines_con, lane, f',"pid":{pid},"tid":{tid},"ts":', origin, flows)
            )
            summary.slices += len(lane)
            summary.flows += int(np.count_nonzero((flows >= 0) & lane.launches()))
        for series in iter_counters(con, window):
            pid = ids.pid(f"{series.node} · system")
            name = series.name if series.gpu < 0 else f"GPU-{series.gpu} {series.name}"
            name = f"{name} ({series.unit})"
            out.write_lines(_counter_lines(name, pid, series.timestamps_us - origin, series.values))
            summary.counters += 1
        stream.write(b"\n]}\n")
    return summary
