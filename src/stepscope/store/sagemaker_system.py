"""SageMaker Debugger's system-metric files, read record by record.

One JSON object per line: ``Type``, ``Name`` (optional), ``Dimension``, ``Value``, ``NodeId``,
``Timestamp`` (float seconds), in ``system/incremental/<YYYYMMDDHH>/<epoch_minute_s>.<node>.json``
(SageMaker Debugger 1.0.x). A file becomes Arrow record batches in
:data:`~stepscope.store.schema.SYSTEM_SCHEMA`.

This is the reader every file can go through (a remote one, a damaged one); closed local files
are usually converted many at a time by :func:`stepscope.store.sagemaker_scan.scan_system_files`,
which gives the same rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import IO, Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.store.damaged_records import DamagedRecords
from stepscope.store.schema import INT64_MAX, INT64_MIN, SYSTEM_SCHEMA

__all__ = ["read_system_file", "values_out_of_range"]

#: The metrics whose values are percentages, by ``Dimension`` (and by ``Name`` for host memory).
_PERCENT_DIMENSIONS = (
    "CPUUtilization",
    "I/OWaitPercentage",
    "GPUUtilization",
    "GPUMemoryUtilization",
)
_PERCENT_NAMES = ("MemoryUsedPercent",)
#: The largest value of any other metric (bytes or operations per second): a petabyte per second
#: is far beyond any disk or network, and a job's worth of such values still sums without
#: overflowing a float.
_MAX_RATE = 1e15


def values_out_of_range(
    names: pa.Array | pa.ChunkedArray,
    dimensions: pa.Array | pa.ChunkedArray,
    values: pa.Array | pa.ChunkedArray,
) -> pa.Array | pa.ChunkedArray:
    """Where a record's value is one its metric cannot take, a damaged record: not a number,
    infinite or negative, above 100 for a percentage, above :data:`_MAX_RATE` for a rate.

    Kept, such a value made every sum and mean over it meaningless (and NumPy warn of an
    overflow in the report)."""
    percent = pc.or_(
        pc.is_in(dimensions, pa.array(_PERCENT_DIMENSIONS)),
        pc.is_in(names, pa.array(_PERCENT_NAMES)),
    )
    limit = pc.if_else(percent, 100.0, _MAX_RATE)
    in_range = pc.and_(pc.greater_equal(values, 0.0), pc.less_equal(values, limit))
    return pc.invert(pc.fill_null(in_range, False))


def read_system_file(
    stream: IO[bytes], *, path: str, node: str, growing: bool = False
) -> Iterator[pa.RecordBatch]:
    """Stream a system-metrics JSON-lines file as SYSTEM_SCHEMA batches.

    ``Timestamp`` (float seconds) becomes ``timestamp_us`` rounded to the nearest microsecond
    (halves up). A record without ``NodeId`` (or with an empty one) gets ``node`` (from the file
    name); one without ``Name`` or ``Dimension`` gets ``""``. A record without ``Type``,
    ``Value`` or ``Timestamp``, with a time no µs column holds, with a value its metric cannot
    take (:func:`values_out_of_range`), or that is not JSON, is damaged: it is skipped, and the
    file logs one warning naming the first bad line and its byte offset.

    :param stream: the file, opened in binary mode.
    :param path: the file's name for messages.
    :param node: the node named by the file name.
    :param growing: the file is still being written: a last line that is not a whole record
        is one not written whole yet, not a damaged one; it is left out silently, and read when
        a later refresh reads the grown file again.
    """
    data = stream.read()
    lines = data.split(b"\n")
    columns: tuple[list[Any], ...] = ([], [], [], [], [], [])
    timestamps, nodes, types, names, dimensions, values = columns
    damaged = DamagedRecords(path)
    positions: list[tuple[int, int]] = []  # (line, byte offset) of each record kept
    offset = 0
    for line_no, line in enumerate(lines, start=1):
        start = offset
        offset += len(line) + 1
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
            ts_us = math.floor(float(record["Timestamp"]) * 1e6 + 0.5)
            if not INT64_MIN <= ts_us <= INT64_MAX:
                raise ValueError(f"Timestamp {record['Timestamp']!r} is out of range")
            value = float(record["Value"])
            kind = str(record["Type"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, OverflowError) as exc:
            if not (growing and line_no == len(lines)):
                damaged.add(line_no, start, f"{type(exc).__name__}: {exc}")
            continue
        timestamps.append(ts_us)
        nodes.append(str(record.get("NodeId") or node))
        types.append(kind)
        names.append(str(record.get("Name") or ""))
        dimensions.append(str(record.get("Dimension") or ""))
        values.append(value)
        positions.append((line_no, start))
    batch = pa.record_batch([pa.array(c) for c in columns], schema=SYSTEM_SCHEMA)
    out_of_range = values_out_of_range(batch["name"], batch["dimension"], batch["value"])
    if pc.any(out_of_range).as_py():
        for row in pc.indices_nonzero(out_of_range).to_pylist():
            metric = dimensions[row] or names[row]
            line_no, start = positions[row]
            damaged.add(
                line_no,
                start,
                f"Value {values[row]!r} of {metric} is out of range (percentages run from 0 to "
                f"100, rates from 0 to {_MAX_RATE:g})",
            )
        batch = batch.filter(pc.invert(out_of_range))
    damaged.report()
    if batch.num_rows:
        yield batch
