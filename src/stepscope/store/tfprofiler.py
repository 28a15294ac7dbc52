"""Reader of TensorFlow profiler traces (``plugins/profile/<time>/<host>.trace.json.gz``).

SageMaker Debugger's TF detailed profiling leaves, per profiled step range::

    framework/tensorflow/detailed_profiling/<YYYYMMDDHH>/<step:09d>/
        <node_id>_<start_us>_<end_us>.metadata            # empty marker: node and time range
        plugins/profile/<YYYY_MM_DD_HH_MM_SS>/<host>.trace.json.gz

The trace is one gzipped JSON object whose ``traceEvents`` have ``ts`` in µs relative to the
profile start, which only the ``.metadata`` file name gives. Without it we fall back to the
``plugins/profile`` folder's time stamp read as UTC (TensorFlow wrote it in the machine's local
time, at one-second resolution), and say so once.
"""

from __future__ import annotations

import calendar
import itertools
import logging
import re
import time
from collections.abc import Iterator

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.errors import CorruptFileError, UnsupportedFormatError
from stepscope.store._kineto_json import TraceDocument, iter_event_chunks
from stepscope.store.damaged_records import DamagedRecords
from stepscope.store.sagemaker import BATCH_ROWS, EventColumns, TraceEventConverter, node_and_rank

__all__ = ["TfProfileMarker", "parse_tf_metadata_name", "read_tf_profiler_trace"]

logger = logging.getLogger(__name__)

_METADATA_NAME = re.compile(r"^(?P<node_id>.+)_(?P<start_us>\d+)_(?P<end_us>\d+)\.metadata$")
_PROFILE_FOLDER = re.compile(r"(?:^|/)plugins/profile/(?P<stamp>\d{4}(?:_\d{2}){5})/[^/]+$")
_GPU_DEVICE = r"^/device:GPU:(?P<index>\d+)"


class TfProfileMarker:
    """What a ``<node_id>_<start_us>_<end_us>.metadata`` name says."""

    def __init__(self, node_id: str, start_us: int, end_us: int) -> None:
        self.node_id = node_id
        self.start_us = start_us
        self.end_us = end_us


def parse_tf_metadata_name(file_name: str) -> TfProfileMarker | None:
    """Parse a TF profiler ``.metadata`` marker name; None when it is not one."""
    match = _METADATA_NAME.match(file_name)
    if match is None:
        return None
    return TfProfileMarker(match["node_id"], int(match["start_us"]), int(match["end_us"]))


def _folder_start_us(path: str) -> float | None:
    match = _PROFILE_FOLDER.search(path)
    if match is None:
        return None
    return calendar.timegm(time.strptime(match["stamp"], "%Y_%m_%d_%H_%M_%S")) * 1e6


def read_tf_profiler_trace(
    data: bytes, *, path: str, marker: TfProfileMarker | None
) -> Iterator[pa.RecordBatch]:
    """Read one ``*.trace.json.gz`` into EVENT_SCHEMA batches with ``source="tfprofiler"``.

    The category is the TF device (``/host:CPU``, ``/device:GPU:0``); GPU events also get the
    ``device`` column. The node comes from the marker, else from the file name (the host).

    Damage costs only what it touches: an event that cannot be read (a field of the wrong type,
    not an object) is skipped, and a file cut short (a truncated ``.gz``, a document ending
    mid-event) keeps every event before the cut. Each file logs one warning for its skipped
    events and one for a cut, naming the file and where the damage is.

    :param data: the gzipped file content.
    :param path: the file's path (relative to the profiler output) for messages and the fallback
        start time.
    :param marker: the ``.metadata`` marker of the same step folder, or None when missing.
    :raises CorruptFileError: when the file is cut or damaged before its first event.
    :raises UnsupportedFormatError: when the content is not a JSON object with ``traceEvents``.
    """
    document = TraceDocument()
    chunks = iter_event_chunks(data, document, orjson.loads)
    first = next(chunks, None)
    if not document.found_events and document.problems:
        position, reason = document.problems[0]
        raise CorruptFileError(path, position, reason)  # cut before its events: a damaged trace
    if not document.found_events or document.is_array:
        raise UnsupportedFormatError(path, "a TensorFlow profiler trace with 'traceEvents'")
    if marker is not None:
        node, rank = node_and_rank(marker.node_id)
        start_us: float = marker.start_us
    else:
        node, rank = path.rsplit("/", 1)[-1].split(".trace.json", 1)[0], -1
        folder_us = _folder_start_us(path)
        start_us = folder_us if folder_us is not None else 0.0
        logger.warning(
            "%s: no <node>_<start_us>_<end_us>.metadata marker beside this TF profiler trace; %s",
            path,
            "its times start at the plugins/profile/<time> folder name read as UTC, off by the "
            "recording machine's UTC offset."
            if folder_us is not None
            else "no profile folder time either, so its times stay relative to the profile start.",
        )
    columns = EventColumns("tfprofiler", node, rank)
    converter = TraceEventConverter(columns, start_us=start_us)
    damaged = DamagedRecords(path)
    index = 0
    for chunk in itertools.chain([first] if first is not None else [], chunks):
        for event in chunk:
            try:
                if not isinstance(event, dict):
                    raise TypeError(f"expected an event object, got {event!r:.40}")
                converter.feed(event)
            except (TypeError, ValueError, KeyError) as exc:
                damaged.add_at(f"event {index} of traceEvents", f"{type(exc).__name__}: {exc}")
            index += 1
            if len(columns) >= BATCH_ROWS:
                yield _with_devices(columns.flush())
    damaged.report()
    if document.problems:
        logger.warning(
            "%s: %s; the events read before it are kept.",
            path,
            "; ".join(f"{reason} at {position}" for position, reason in document.problems),
        )
    if len(columns):
        yield _with_devices(columns.flush())


def _with_devices(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Fill ``device`` from ``/device:GPU:<n>`` categories."""
    found = pc.extract_regex(batch.column("category"), _GPU_DEVICE)
    device = pc.cast(pc.struct_field(found, [0]), pa.int64())
    merged = pc.if_else(pc.is_null(device), batch.column("device"), device)
    index = batch.schema.get_field_index("device")
    return batch.set_column(index, batch.schema.field(index), merged)
