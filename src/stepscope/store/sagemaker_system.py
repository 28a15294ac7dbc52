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

from stepscope.store.damaged_records import DamagedRecords
from stepscope.store.schema import INT64_MAX, INT64_MIN, SYSTEM_SCHEMA

__all__ = ["read_system_file"]


def read_system_file(
    stream: IO[bytes], *, path: str, node: str, growing: bool = False
) -> Iterator[pa.RecordBatch]:
    """Stream a system-metrics JSON-lines file as SYSTEM_SCHEMA batches.

    ``Timestamp`` (float seconds) becomes ``timestamp_us`` rounded to the nearest microsecond
    (halves up). A record without ``NodeId`` (or with an empty one) gets ``node`` (from the file
    name); one without ``Name`` or ``Dimension`` gets ``""``. A record without ``Type``,
    ``Value`` or ``Timestamp``, with a time no µs column holds, or that is not JSON, is damaged:
    it is skipped, and the file logs one warning naming the first bad line and its byte offset.

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
    damaged.report()
    if timestamps:
        yield pa.record_batch([pa.array(c) for c in columns], schema=SYSTEM_SCHEMA)
