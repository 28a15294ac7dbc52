"""Reader of PyTorch profiler (Kineto) Chrome-trace files into EVENT_SCHEMA record batches.

One file is one process (one rank). :func:`read_kineto_trace` streams the file (see
:mod:`stepscope.store._kineto_json`) and never holds it as Python objects, only as compact Arrow
columns. The fast path copies the decompressed event array to a temporary file (the header and
tail keys are parsed on the way) and lets DuckDB's JSON reader turn it into columns on all
cores. A damaged file (truncated ``.gz``, a document cut mid-event), or a system without room
for the temporary copy, is read instead chunk by chunk with orjson, which keeps every event
before the damage, and after it when it lies inside (both in
:mod:`stepscope.store._kineto_columns`).

What a row holds:

* ``category``: the modern Kineto name. The 2021 names are translated (``Operator`` → ``cpu_op``,
  ``Runtime`` → ``cuda_runtime``, ``Kernel`` → ``kernel``, ``Memcpy`` → ``gpu_memcpy``,
  ``Memset`` → ``gpu_memset``, ``python`` → ``python_function``), and the 2021 ``[memory]``
  instants without a category become ``cpu_instant_event``. AMD (``hipLaunchKernel``) and Triton
  (``cuLaunchKernel``, category ``cuda_driver``) traces keep their categories.
* ``ph``: ``X`` spans, ``i`` instants, ``C`` counters. Flow events (``s``/``f``: ``ac2g``,
  ``fwdbwd``) are dropped because ``correlation`` and ``external_id`` already link launches to
  GPU work; metadata events (``M``) are dropped too. Both are counted in the metadata.
* ``start_us``: µs, float. Kineto writes ``ts`` in µs in every era (``displayTimeUnit: "ns"``
  only adds ns fractions, it does not change the unit). When the file has
  ``baseTimeNanoseconds`` (torch ≥ 2.3), ``ts`` is relative to it and ``start_us`` is
  ``baseTimeNanoseconds / 1000 + ts``, i.e. µs since the Unix epoch. Without it, ``start_us`` is
  ``ts`` as written, which older Kineto versions already wrote as µs since the Unix epoch. At
  epoch magnitudes a float64 keeps 0.25 µs of resolution, so ns fractions are rounded there. A
  trace stepscope wrote is moved by its ``stepscope`` metadata's ``wall_minus_session_us`` onto
  the job's clock, which a step of the wall clock during the job does not move.
* ``step``: N of the ``ProfilerStep#N`` range whose time span contains the event's start (CPU
  events, any thread of the process); GPU events take the step of the runtime or driver call
  that launched them (joined on ``correlation``), and only fall back to their own start time
  when no launch is in the file. ``-1`` outside every step.
* ``device``, ``stream``, ``correlation``, ``external_id``, ``bytes``: from ``args`` (``device``
  falls back to the GPU event's ``pid``, ``stream`` to its ``tid``; ``[memory]`` events give
  ``Device Id`` for CUDA memory and ``Bytes``); ``args``: every other arg as compact JSON, e.g.
  ``Input type``, NCCL fields, ``Total Allocated``, ``Python id`` / ``Python parent id``.

Rank: ``distributedInfo.rank`` (a number, or its decimal text); else ``rank_hint``; else the
file name (``rank-3``, ``rank_3``, ``rank3``, or the SageMaker node id ``3-algo-1``); else 0, with
a warning. A damaged file (a truncated ``.gz``, a document cut mid-event) keeps every event read
before the damage and logs a warning naming the file and the position; events damaged inside the
file (bytes zeroed or garbled) are skipped, the warning saying how many bytes, and the events
after them are kept; one cut before its ``traceEvents`` key is still sniffed as a trace, and
reading it raises
:class:`~stepscope.errors.CorruptFileError`. Event
names the profiler wrote with a quote unescaped (pytorch/pytorch#146900, see
:mod:`stepscope.store.kineto_names`), which make the document invalid JSON, are read as written;
a lone surrogate escape (``\\udcff``), which orjson and DuckDB refuse, is read as U+FFFD. A
trace with a UTF-8 byte order mark, or in UTF-16, is read as UTF-8 (see
:func:`~stepscope.store._kineto_json.utf8_blocks`); a byte that is not UTF-8 in a top-level key
(a device's or a host's name) is read as U+FFFD, and the other keys are kept.
An event with no finite ``ts``, or a ``dur`` that is
negative or not finite, has no place in time: it is skipped, with one warning naming the file
and the first; so is one whose ``ts`` is a date in a trace whose times mostly are not (a
negative ``ts`` among µs since the epoch), or the reverse. A number JSON cannot hold in
``args`` (``inf``, ``NaN``) is kept as its text.
A trace whose times are relative but that has no ``baseTimeNanoseconds`` (a newer trace cut
before its end) is read on its own clock, with a warning.
"""

from __future__ import annotations

import logging
import math
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.errors import CorruptFileError, UnsupportedFormatError
from stepscope.store._kineto_columns import (
    GPU_CATEGORIES,
    RAW_SCHEMA,
    as_int,
    convert_chunk,
    read_whole_array,
)
from stepscope.store._kineto_json import (
    TraceDocument,
    iter_event_chunks,
    loads_keys,
    utf8_blocks,
)
from stepscope.store.kineto_names import escape_names
from stepscope.store.sagemaker import times_out_of_range
from stepscope.store.schema import EVENT_SCHEMA

__all__ = [
    "GPU_CATEGORIES",
    "READER_VERSION",
    "SNIFF_BYTES",
    "KinetoTrace",
    "TraceHead",
    "is_kineto_trace",
    "is_unix_time",
    "read_kineto_trace",
    "read_trace_head",
]

logger = logging.getLogger(__name__)

#: Rows per record batch handed out by :meth:`KinetoTrace.batches`.
BATCH_ROWS = 65_536

#: The version of what this reader makes of a trace. It is kept with each converted trace in
#: the cache's manifest, and a cache built by another version is read again
#: (:class:`~stepscope.store.cache.ColumnarCache`): bump it whenever a trace would give
#: different rows or metadata.
READER_VERSION = 10

#: 2001-01-01 in µs since the Unix epoch: a trace whose first time is earlier has relative times
_UNIX_TIMES_FROM_US = 978_307_200e6

#: Categories of the CPU-side calls that launch GPU work (their ``correlation`` is the GPU one's).
LAUNCH_CATEGORIES: tuple[str, ...] = ("cuda_runtime", "cuda_driver")

_RANK_IN_NAME = (
    re.compile(r"rank[-_]?(\d+)", re.IGNORECASE),
    re.compile(r"(?:^|[^0-9A-Za-z])(\d+)-algo-\d+"),
)
#: What :func:`is_kineto_trace` reads of a file (decompressed; a file's first this many bytes
#: are enough for it).
SNIFF_BYTES = 256 << 10
#: Kineto writes ``baseTimeNanoseconds`` among the last keys of the document, after its events.
_TAIL_BYTES = 4096
_BASE_TIME = re.compile(rb'"baseTimeNanoseconds"\s*:\s*(\d+)')
_EVENT_TS = re.compile(rb'"ts"\s*:\s*(-?\d+(?:\.\d+)?)')
#: A trace's start is read from this much of its first events: on the traces seen, as early as
#: from all of the first 256 KB (to a fraction of a ms), at an eighth of the cost of listing it.
_START_SCAN_BYTES = 32 << 10
#: The header key of stepscope's own Chrome export (:mod:`stepscope.export.chrome`), which holds
#: Kineto's categories too: left in a folder of traces, it is no rank's trace.
_EXPORT_HEADER_KEY = b'"origin_epoch_us"'
_KINETO_HEADER_KEYS = (b'"schemaVersion"', b'"deviceProperties"', b'"distributedInfo"')
_KINETO_FIRST_KEY = re.compile(rb'\s*\{\s*"(?:schemaVersion|deviceProperties|distributedInfo)"')
_KINETO_CATEGORY = re.compile(
    rb'"cat"\s*:\s*"(cpu_op|user_annotation|cuda_runtime|cuda_driver|kernel|gpu_memcpy|'
    rb"gpu_memset|python_function|cpu_instant_event|Operator|Runtime|Kernel|Memcpy|Memset)\""
)


@dataclass
class KinetoTrace:
    """One parsed Kineto trace file: its metadata and its events in EVENT_SCHEMA.

    :param path: the file read.
    :param metadata: ``rank``, ``world_size``, ``backend``, ``device_properties``,
        ``base_time_ns`` (None when absent), ``display_time_unit``, ``warnings`` (list of
        messages), plus ``distributed_info``, ``trace_name``, ``steps``, ``event_count``,
        ``flow_events``, ``metadata_events``, ``skipped_events``, ``start_us``, ``end_us``,
        ``reader_version`` (:data:`READER_VERSION`).
    """

    path: Path
    metadata: dict[str, Any]
    _table: pa.Table = field(repr=False)

    def batches(self, max_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
        """Yield the events as record batches in EVENT_SCHEMA, in file order."""
        yield from self._table.to_batches(max_chunksize=max_rows)

    def table(self) -> pa.Table:
        """All events as one Arrow table in EVENT_SCHEMA."""
        return self._table


def is_unix_time(us: float) -> bool:
    """Whether ``us`` reads as µs since the Unix epoch, i.e. is a date: the times of a trace
    kept on its own clock (no ``baseTimeNanoseconds``) are far earlier, and as dates read 1970."""
    return us >= _UNIX_TIMES_FROM_US


def is_kineto_trace(source: str | Path | IO[bytes]) -> bool:
    """Cheap sniff: does ``source`` look like a PyTorch profiler trace? Never raises.

    Reads at most the first 256 KB (decompressed): the document must be a JSON object with a
    ``traceEvents`` array and either Kineto's header keys or a Kineto event category, which
    tells it apart from TensorFlow profiler traces and SageMaker's event arrays; stepscope's
    own Chrome export, which has such categories, is no Kineto trace either. A document that
    starts with Kineto's header keys and has no ``traceEvents`` in those bytes is a trace too:
    one cut before its events (a damaged trace, which the reader reports) or one whose header
    is longer than that.

    :param source: a path, or a seekable binary file at its start (a remote file is sniffed
        without downloading it whole).
    """
    try:
        if isinstance(source, (str, Path)):
            with open(source, "rb") as raw:
                head = _head(raw)
        else:
            head = _head(source)
    except OSError:
        return False
    return _is_kineto_head(head)


def _is_kineto_head(head: bytes) -> bool:
    if head.lstrip()[:1] != b"{":
        return False
    if b'"traceEvents"' not in head:
        return _is_kineto_header(head)
    if _EXPORT_HEADER_KEY in head[: head.find(b'"traceEvents"')]:
        return False
    return any(key in head for key in _KINETO_HEADER_KEYS) or bool(_KINETO_CATEGORY.search(head))


def _is_kineto_header(head: bytes) -> bool:
    """Whether ``head``, which holds no ``traceEvents`` key, is Kineto's header all the same: it
    starts with one of its keys, and the text ends there (a trace cut before its events, which
    the reader reports) or goes on past the sniff (the ``distributedInfo`` of a job of tens of
    thousands of ranks lists them all)."""
    if not _KINETO_FIRST_KEY.match(head):
        return False
    if len(head) >= SNIFF_BYTES:
        return True
    try:
        orjson.loads(head)
    except orjson.JSONDecodeError:
        return True
    return False  # a whole JSON document without events is no trace


@dataclass(frozen=True)
class TraceHead:
    """What a trace tells before it is read: enough to list it among others.

    :param rank: ``distributedInfo.rank``, else the rank its file name gives, else None (the
        reader then takes 0).
    :param world_size: ``distributedInfo.world_size``, None when the header has none.
    :param start_us: µs since the epoch when its first events started, None when they are not
        dated: a trace on its own clock, or a newer compressed one, whose times count from a
        ``baseTimeNanoseconds`` written after its events (only an uncompressed file's end is
        read for it).
    """

    rank: int | None
    world_size: int | None
    start_us: float | None


def read_trace_head(path: str | Path) -> TraceHead | None:
    """The :class:`TraceHead` of the trace at ``path``, None when it is no Kineto trace (as
    :func:`is_kineto_trace` sniffs). Never raises.

    It reads the sniff's first 256 KB, and the last 4 KB of an uncompressed file: the start is
    that of the earliest of the first events (32 KB of them), so it may be later than the
    trace's first event (a trace's events are not in time order), by about a second on the
    traces seen.
    """
    path = Path(path)
    try:
        with open(path, "rb") as raw:
            compressed = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            head = _head(raw)
            tail = b""
            if not compressed:
                raw.seek(max(0, raw.seek(0, os.SEEK_END) - _TAIL_BYTES))
                tail = raw.read()
    except OSError:
        return None
    if not _is_kineto_head(head):
        return None
    events_at = head.find(b'"traceEvents"')
    header = _partial_header(head[:events_at])
    info = header.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    rank = _distributed_int(info, "rank")
    rank = rank if rank is not None else _rank_in_name(path)
    world_size = _distributed_int(info, "world_size")
    times = [float(t) for t in _EVENT_TS.findall(head, events_at, events_at + _START_SCAN_BYTES)]
    base = _BASE_TIME.search(tail) or _BASE_TIME.search(head, 0, events_at)
    start_us = None
    if times:
        start_us = min(times) + _clock_offset_us(header, int(base.group(1)) if base else None)
    return TraceHead(
        rank=rank,
        world_size=world_size,
        start_us=start_us if start_us is not None and is_unix_time(start_us) else None,
    )


def _partial_header(before_events: bytes) -> dict[str, Any]:
    """The header keys written before ``traceEvents`` (Kineto's ``deviceProperties``,
    ``distributedInfo``...), or ``{}`` when they do not parse."""
    text = before_events.rstrip().rstrip(b",")
    try:
        header = loads_keys(text + b"}" if text.rstrip() != b"{" else b"{}")
    except orjson.JSONDecodeError:
        return {}
    return header if isinstance(header, dict) else {}


def _head(raw: IO[bytes]) -> bytes:
    """The first :data:`SNIFF_BYTES` of the file, gunzipped when it is gzip, as UTF-8 without
    a byte order mark (as the reader takes it, see :func:`utf8_blocks`).

    A gzip stream cut short or damaged gives what it holds before the damage: the reader keeps
    those events, so the sniff must not pass the file over.
    """
    return b"".join(utf8_blocks([_raw_head(raw)]))


def _raw_head(raw: IO[bytes]) -> bytes:
    """The first :data:`SNIFF_BYTES` of the file, gunzipped when it is gzip."""
    magic = raw.read(2)
    raw.seek(0)
    if magic != b"\x1f\x8b":
        return raw.read(SNIFF_BYTES)
    inflater = zlib.decompressobj(wbits=31)
    head = b""
    block = raw.read(SNIFF_BYTES)
    while block and len(head) < SNIFF_BYTES:
        try:
            head += inflater.decompress(block, SNIFF_BYTES - len(head))
        except zlib.error:
            break
        if inflater.eof:  # a second gzip member (concatenated .gz files) goes on
            block = inflater.unused_data
            inflater = zlib.decompressobj(wbits=31)
        else:
            block = raw.read(SNIFF_BYTES)
    return head


def read_kineto_trace(
    path: str | Path, *, rank_hint: int | None = None, node: str = "", name: str | None = None
) -> KinetoTrace:
    """Read one Kineto trace (``.json`` or ``.json.gz``) into a :class:`KinetoTrace`.

    :param path: the trace file.
    :param rank_hint: the rank to use when the file has no ``distributedInfo.rank`` (e.g. the
        caller knows it from the SageMaker node id in the folder layout).
    :param node: the value of the ``node`` column (a host-level name such as ``"algo-1"``).
    :param name: what the warnings, the errors and the metadata's ``path`` call the file;
        default ``path``. A remote trace, read through a temporary local copy, gives its URL.
    :raises FileNotFoundError: ``path`` is not a file.
    :raises UnsupportedFormatError: the file is not a Chrome-trace JSON document with events.
    :raises CorruptFileError: the file ends, or its gzip stream breaks, before its first
        event, or an event holds a value no column can take (damage that stops at a clean cut
        after some events is only logged, see the module docstring).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(path)
    shown = name if name is not None else str(path)
    counts = {"flow": 0, "metadata": 0, "skipped": 0}
    whole = read_whole_array(path, counts)
    if whole is not None:
        raw, document = whole
    else:
        counts = {"flow": 0, "metadata": 0, "skipped": 0}
        document = TraceDocument()

        def parse(text: bytes) -> pa.RecordBatch:
            # orjson.JSONDecodeError is a ValueError: the chunker then tries an earlier cut.
            try:
                events = orjson.loads(text)
            except orjson.JSONDecodeError:  # a bad cut, a name's quotes, inf and NaN or surrogates
                readable = _finite_json(escape_names(text).decode("utf-8", "replace"))
                events = orjson.loads(_without_lone_surrogates(readable))
            try:
                return convert_chunk(events if isinstance(events, list) else [], counts)
            except ValueError as exc:  # not a bad cut: a value no column could hold
                raise CorruptFileError(shown, "an event chunk", str(exc)) from exc

        batches = [b for b in iter_event_chunks(path, document, parse) if b.num_rows]
        raw = pa.Table.from_batches(batches, schema=RAW_SCHEMA)
    if not document.found_events and not document.is_array:
        if document.problems:  # a trace cut, or its gzip stream damaged, before its events
            position, reason = document.problems[-1]
            raise CorruptFileError(shown, position, f"{reason}; no event could be read")
        raise UnsupportedFormatError(
            shown, "a PyTorch profiler trace (a JSON object with a traceEvents array)"
        )
    header = document.header
    warnings = [f"{shown}: {reason} at {position}" for position, reason in document.problems]
    for message in warnings:
        logger.warning("%s; the events read before it are kept", message)
    raw = _drop_damaged_events(raw, shown, warnings)
    raw = _finite_args(raw)
    rank = _resolve_rank(header, path, shown, rank_hint, warnings)
    base_ns = header.get("baseTimeNanoseconds")
    base_time_ns = int(base_ns) if isinstance(base_ns, (int, float)) else None
    if base_time_ns is None:
        _warn_if_times_are_relative(raw, shown, cut=bool(document.problems), warnings=warnings)
    steps = _assign_steps(raw)
    offset_us = _clock_offset_us(header, base_time_ns)
    table = _to_event_table(raw, steps, rank=rank, node=node, offset_us=offset_us)
    distributed = header.get("distributedInfo")
    distributed = distributed if isinstance(distributed, dict) else {}
    start = pc.min(table["start_us"]).as_py() if table.num_rows else None
    end = pc.max(pc.add(table["start_us"], table["dur_us"])).as_py() if table.num_rows else None
    metadata: dict[str, Any] = {
        "path": shown,
        "reader_version": READER_VERSION,
        "rank": rank,
        "world_size": _distributed_int(distributed, "world_size"),
        "backend": distributed.get("backend"),
        "distributed_info": distributed,
        "device_properties": header.get("deviceProperties", header.get("computeProperties", [])),
        "base_time_ns": base_time_ns,
        "display_time_unit": header.get("displayTimeUnit"),
        "trace_name": header.get("traceName"),
        "host_name": header.get("host_name"),
        "schema_version": header.get("schemaVersion"),
        "steps": sorted(set(pc.unique(steps).to_pylist()) - {-1}),
        "event_count": table.num_rows,
        "flow_events": counts["flow"],
        "metadata_events": counts["metadata"],
        "skipped_events": counts["skipped"],
        "start_us": start,
        "end_us": end,
        "warnings": warnings,
    }
    return KinetoTrace(path=path, metadata=metadata, _table=table)


def _warn(message: str, warnings: list[str]) -> None:
    """Log ``message`` and keep it in the trace's ``warnings``."""
    logger.warning(message)
    warnings.append(message)


def _warn_if_times_are_relative(
    raw: pa.Table, shown: str, *, cut: bool, warnings: list[str]
) -> None:
    """Say so when a trace without ``baseTimeNanoseconds`` has times that are no Unix times
    (a newer trace cut short: Kineto writes that key after the events)."""
    first = pc.min(raw["ts"]).as_py() if raw.num_rows else None
    if first is None or is_unix_time(first):
        return
    why = " (the file is cut short, and Kineto writes that key after its events)" if cut else ""
    message = (
        f"{shown}: no baseTimeNanoseconds{why}, and its times are not Unix times (the first is "
        f"{first:.0f} µs): its events keep the trace's own clock and do not line up with "
        "system metrics or other files"
    )
    _warn(message, warnings)


def _drop_damaged_events(raw: pa.Table, shown: str, warnings: list[str]) -> pa.Table:
    """The events without those that have no place in time: no finite ``ts``, a ``dur`` that
    is negative (a span that ends before it starts) or not finite, a start or end beyond
    what a 64-bit timestamp holds (the analyses' timestamps would fail on it), or a ``ts``
    that is a date in a trace whose times mostly are not, or the reverse (a trace
    spans seconds, not the decades between 1970 and now). One warning names the file, the
    first of them and how many there were."""
    ts, dur = raw["ts"], raw["dur_us"]
    placed = pc.and_(  # NaN and infinities lie beyond any timestamp too
        pc.and_(pc.is_valid(ts), pc.greater_equal(dur, 0.0)),
        pc.invert(times_out_of_range(ts, pc.add(ts, dur))),
    )
    median = pc.approximate_median(ts).as_py() if raw.num_rows else None
    if median is not None and math.isfinite(median):
        dated = pc.greater_equal(ts, _UNIX_TIMES_FROM_US)
        placed = pc.and_(placed, dated if is_unix_time(median) else pc.invert(dated))
    damaged = pc.fill_null(pc.invert(placed), True)  # a null dur is no place either
    count = pc.sum(damaged).as_py()
    if not count:
        return raw
    first = pc.index(damaged, True).as_py()
    message = (
        f"{shown}: skipped {count} event(s) with no finite ts or a negative or not finite "
        f"dur, or beyond any timestamp, or decades away from the trace's other events, the first "
        f"{raw['name'][first].as_py()!r} (span, instant or counter #{first + 1} of the file); "
        "the other events are kept"
    )
    _warn(message, warnings)
    return raw.filter(pc.invert(damaged))


#: A number JSON has no word for, where a value starts: Kineto wrote ``inf`` for the bandwidth
#: of a 0 µs memcpy (pytorch/kineto#105), Python writes ``NaN``.
_NON_FINITE_VALUE = r"[:,\[]-?(?:Infinity|inf|NaN|nan)[,\]}]"
#: Such a number in a document's text, which may be indented.
_NON_FINITE_IN_TEXT = re.compile(r"[:,\[]\s*-?(?:Infinity|inf|NaN|nan)\s*[,\]}]")
#: What such a number starts with, found faster than it is.
_NON_FINITE_WORDS = ("inf", "Inf", "nan", "NaN")
#: A string (kept whole, whatever it holds) or such a number.
_STRING_OR_NON_FINITE = re.compile(r'"(?:[^"\\]|\\.)*"|-?(?:Infinity|inf|NaN|nan)')


def _finite_args(raw: pa.Table) -> pa.Table:
    """``args`` that every JSON parser reads (a browser's, the exports' readers): a number
    JSON cannot hold becomes its text, ``"inf"``. Only the rare args that hold one are
    rewritten."""
    args = raw["args"]
    suspect = pc.fill_null(pc.match_substring_regex(args, _NON_FINITE_VALUE), False)
    if not pc.any(suspect).as_py():
        return raw
    fixed = [
        _finite_json(text) if bad else text
        for text, bad in zip(args.to_pylist(), suspect.to_pylist(), strict=True)
    ]
    index = raw.schema.get_field_index("args")
    return raw.set_column(index, "args", pa.array(fixed, args.type))


def _finite_json(text: str) -> str:
    """``text`` with every number JSON cannot hold outside a string written as a string."""
    if not any(word in text for word in _NON_FINITE_WORDS):
        return text  # rewriting every string takes a tenth of a second per MB
    if not _NON_FINITE_IN_TEXT.search(text):
        return text
    return _STRING_OR_NON_FINITE.sub(_quoted, text)


def _quoted(match: re.Match[str]) -> str:
    token = match.group()
    return token if token.startswith('"') else f'"{token}"'


#: An escaped backslash (kept), a surrogate pair (kept) or a lone surrogate escape.
_SURROGATE_ESCAPE = re.compile(
    r"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
)


def _without_lone_surrogates(text: str) -> str:
    """``text`` with each ``\\uD800``-``\\uDFFF`` escape that is not half of a pair written as
    U+FFFD: JSON's grammar allows them, but they are no character (Python's ``json`` writes
    one for a string that holds undecodable bytes), and orjson and DuckDB refuse the trace."""
    return _SURROGATE_ESCAPE.sub(lambda m: m.group() if len(m.group()) != 6 else "\\ufffd", text)


def _assign_steps(raw: pa.Table) -> pa.Array:
    """The ``step`` of every row (see the module docstring), vectorised with Arrow and NumPy."""
    import numpy as np

    rows = raw.num_rows
    if rows == 0:
        return pa.array([], pa.int64())
    category = raw["category"]
    name = raw["name"]
    is_gpu = pc.is_in(category, value_set=pa.array(GPU_CATEGORIES)).to_numpy(zero_copy_only=False)
    is_step = pc.and_(
        pc.and_(pc.equal(raw["ph"], "X"), pc.starts_with(name, "ProfilerStep#")),
        pc.invert(pa.chunked_array([pa.array(is_gpu)])),
    ).to_numpy(zero_copy_only=False)
    ts = raw["ts"].to_numpy()
    steps = np.full(rows, -1, dtype=np.int64)
    step_rows = np.flatnonzero(is_step)
    numbers = np.array(
        [as_int(text[len("ProfilerStep#") :]) for text in name.take(step_rows).to_pylist()],
        dtype=np.int64,
    )
    valid = numbers >= 0
    step_rows, numbers = step_rows[valid], numbers[valid]
    if len(step_rows):
        begin = ts[step_rows]
        finish = begin + raw["dur_us"].to_numpy()[step_rows]
        order = np.argsort(begin, kind="stable")
        begin, finish, numbers = begin[order], finish[order], numbers[order]
        # The latest step starting at or before each event, if the event starts before its end.
        index = np.searchsorted(begin, ts, side="right") - 1
        inside = index >= 0
        inside[inside] &= ts[inside] < finish[index[inside]]
        steps[inside] = numbers[index[inside]]
    correlation = raw["correlation"].to_numpy()
    is_launch = pc.is_in(category, value_set=pa.array(LAUNCH_CATEGORIES)).to_numpy(
        zero_copy_only=False
    ) & (correlation >= 0)
    gpu_rows = np.flatnonzero(is_gpu & (correlation >= 0))
    if len(gpu_rows) and is_launch.any():
        launch_correlation = correlation[is_launch]
        launch_step = steps[is_launch]
        found = pc.index_in(
            pa.array(correlation[gpu_rows]), value_set=pa.array(launch_correlation)
        ).to_numpy(zero_copy_only=False)
        matched = ~np.isnan(found.astype(np.float64))
        positions = found[matched].astype(np.int64)
        steps[gpu_rows[matched]] = launch_step[positions]
    return pa.array(steps, pa.int64())


def _clock_offset_us(header: dict[str, Any], base_time_ns: int | None) -> float:
    """What to add to a trace's ``ts`` to date it on its job's clock."""
    return (base_time_ns / 1000.0 if base_time_ns else 0.0) - _wall_minus_job_clock_us(header)


def _wall_minus_job_clock_us(header: dict[str, Any]) -> float:
    """How far ahead of the job's clock the wall clock was when stepscope wrote this trace (its
    ``stepscope`` metadata's ``wall_minus_session_us``), 0 for any other trace.

    torch dates a trace by the wall clock, a stepscope job its events by the monotonic clock
    mapped to the epoch when the process started: when NTP stepped the wall clock in between,
    the trace's steps would land that far from the job's steps.
    """
    metadata = header.get("stepscope")
    value = metadata.get("wall_minus_session_us") if isinstance(metadata, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 0.0
    return float(value)


def _to_event_table(
    raw: pa.Table, steps: pa.Array, *, rank: int, node: str, offset_us: float
) -> pa.Table:
    """The events in EVENT_SCHEMA, ``offset_us`` added to every ``ts``."""
    rows = raw.num_rows
    start = raw["ts"]
    if offset_us:
        start = pc.add(start, offset_us)
    columns = {
        "source": pa.repeat(pa.scalar("kineto", pa.string()), rows),
        "node": pa.repeat(pa.scalar(node, pa.string()), rows),
        "rank": pa.repeat(pa.scalar(rank, pa.int32()), rows),
        "category": raw["category"],
        "name": raw["name"],
        "ph": raw["ph"],
        "start_us": start,
        "dur_us": raw["dur_us"],
        "pid": raw["pid"],
        "tid": raw["tid"],
        "step": steps,
        "device": raw["device"],
        "stream": raw["stream"],
        "correlation": raw["correlation"],
        "external_id": raw["external_id"],
        "bytes": raw["bytes"],
        "args": raw["args"],
    }
    return pa.table([columns[f.name] for f in EVENT_SCHEMA], schema=EVENT_SCHEMA)


def _rank_in_name(path: Path) -> int | None:
    """The rank a trace's file name gives (``rank-3``, ``rank_3``, ``rank3``, ``3-algo-1``)."""
    for pattern in _RANK_IN_NAME:
        match = pattern.search(path.name)
        if match:
            return int(match.group(1))
    return None


def _distributed_int(info: dict[str, Any], key: str) -> int | None:
    """``info[key]`` as a whole number, None when it is missing or holds none: a number, or the
    decimal text that some launchers' ``distributedInfo`` holds (``"rank": "1"``)."""
    value = info.get(key)
    if isinstance(value, str) and value.strip().isdecimal():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _resolve_rank(
    header: dict[str, Any], path: Path, shown: str, rank_hint: int | None, warnings: list[str]
) -> int:
    """Rank from ``distributedInfo``, the caller's hint, the file name, or 0 (with a warning);
    ``shown`` names the file in the warning."""
    info = header.get("distributedInfo")
    rank = _distributed_int(info, "rank") if isinstance(info, dict) else None
    if rank is not None:
        return rank
    if rank_hint is not None:
        return int(rank_hint)
    missing = (
        "has no distributedInfo" if not isinstance(info, dict) else "has no distributedInfo.rank"
    )
    named = _rank_in_name(path)
    if named is not None:
        _warn(f"{shown}: trace {missing}; rank {named} taken from the file name", warnings)
        return named
    message = (
        f"{shown}: trace {missing} and its file name names no rank; assuming rank 0. "
        "Name the file like 'rank-3.json.gz' (or pass rank_hint= to read_kineto_trace) to "
        "set it"
    )
    _warn(message, warnings)
    return 0
