"""Reader of PyTorch profiler (Kineto) Chrome-trace files into EVENT_SCHEMA record batches.

One file is one process (one rank). :func:`read_kineto_trace` streams the file (see
:mod:`stepscope.store._kineto_json`) and never holds it as Python objects, only as compact Arrow
columns. The fast path copies the decompressed event array to a temporary file (the header and
tail keys are parsed on the way) and lets DuckDB's JSON reader turn it into columns on all
cores. A damaged file (truncated ``.gz``, a document cut mid-event), or a system without room
for the temporary copy, is read instead chunk by chunk with orjson, which keeps every event
before the damage.

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
  epoch magnitudes a float64 keeps 0.25 µs of resolution, so ns fractions are rounded there.
* ``step``: N of the ``ProfilerStep#N`` range whose time span contains the event's start (CPU
  events, any thread of the process); GPU events take the step of the runtime or driver call
  that launched them (joined on ``correlation``), and only fall back to their own start time
  when no launch is in the file. ``-1`` outside every step.
* ``device``, ``stream``, ``correlation``, ``external_id``, ``bytes``: from ``args`` (``device``
  falls back to the GPU event's ``pid``, ``stream`` to its ``tid``; ``[memory]`` events give
  ``Device Id`` for CUDA memory and ``Bytes``); ``args``: every other arg as compact JSON, e.g.
  ``Input type``, NCCL fields, ``Total Allocated``, ``Python id`` / ``Python parent id``.

Rank: ``distributedInfo.rank``; else ``rank_hint``; else the file name (``rank-3``, ``rank_3``,
``rank3``, or the SageMaker node id ``3-algo-1``); else 0, with a warning. A damaged file (a
truncated ``.gz``, a document cut mid-event) keeps every event read before the damage and logs a
warning naming the file and the position.
"""

from __future__ import annotations

import gzip
import logging
import re
import shutil
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.errors import CorruptFileError, UnsupportedFormatError
from stepscope.store._kineto_json import TraceDocument, extract_event_array, iter_event_chunks
from stepscope.store.schema import EVENT_SCHEMA

__all__ = ["GPU_CATEGORIES", "KinetoTrace", "is_kineto_trace", "read_kineto_trace"]

logger = logging.getLogger(__name__)

#: Rows per record batch handed out by :meth:`KinetoTrace.batches`.
BATCH_ROWS = 65_536

#: Categories whose events run on a GPU stream (``pid`` = device, ``tid`` = stream).
GPU_CATEGORIES: tuple[str, ...] = (
    "kernel",
    "gpu_memcpy",
    "gpu_memset",
    "gpu_user_annotation",
    "cuda_sync",
    "cuda_profiler_range",
)

#: Categories of the CPU-side calls that launch GPU work (their ``correlation`` is the GPU one's).
LAUNCH_CATEGORIES: tuple[str, ...] = ("cuda_runtime", "cuda_driver")

# 2021-era category names -> the modern ones.
_LEGACY_CATEGORIES: dict[str, str] = {
    "Operator": "cpu_op",
    "Runtime": "cuda_runtime",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "async": "ac2g",
    "async_cpu_to_gpu": "ac2g",
    "python": "python_function",
}
_GPU = frozenset(GPU_CATEGORIES)
_KEPT_PHASES = frozenset(("X", "i", "I", "C"))
_FLOW_PHASES = frozenset(("s", "t", "f"))
_DIGITS = re.compile(r"-?\d+")
_RANK_IN_NAME = (
    re.compile(r"rank[-_]?(\d+)", re.IGNORECASE),
    re.compile(r"(?:^|[^0-9A-Za-z])(\d+)-algo-\d+"),
)
_SNIFF_BYTES = 256 << 10
_KINETO_HEADER_KEYS = (b'"schemaVersion"', b'"deviceProperties"', b'"distributedInfo"')
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
        ``flow_events``, ``metadata_events``, ``skipped_events``, ``start_us``, ``end_us``.
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


def is_kineto_trace(path: str | Path) -> bool:
    """Cheap sniff: does ``path`` look like a PyTorch profiler trace? Never raises.

    Reads at most the first 256 KB (decompressed): the document must be a JSON object with a
    ``traceEvents`` array and either Kineto's header keys or a Kineto event category, which
    tells it apart from TensorFlow profiler traces and SageMaker's event arrays.
    """
    try:
        with open(path, "rb") as raw:
            magic = raw.read(2)
        opener = gzip.open if magic == b"\x1f\x8b" else open
        with opener(path, "rb") as handle:
            head = handle.read(_SNIFF_BYTES)
    except (OSError, EOFError, zlib.error):
        return False
    if head.lstrip()[:1] != b"{" or b'"traceEvents"' not in head:
        return False
    return any(key in head for key in _KINETO_HEADER_KEYS) or bool(_KINETO_CATEGORY.search(head))


def read_kineto_trace(
    path: str | Path, *, rank_hint: int | None = None, node: str = ""
) -> KinetoTrace:
    """Read one Kineto trace (``.json`` or ``.json.gz``) into a :class:`KinetoTrace`.

    :param path: the trace file.
    :param rank_hint: the rank to use when the file has no ``distributedInfo.rank`` (e.g. the
        caller knows it from the SageMaker node id in the folder layout).
    :param node: the value of the ``node`` column (a host-level name such as ``"algo-1"``).
    :raises FileNotFoundError: ``path`` is not a file.
    :raises UnsupportedFormatError: the file is not a Chrome-trace JSON document with events.
    :raises CorruptFileError: an event holds a value no column can take (damage that stops at
        a clean cut is only logged, see the module docstring).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(path)
    counts = {"flow": 0, "metadata": 0, "skipped": 0}
    whole = _read_whole_array(path, counts)
    if whole is not None:
        raw, document = whole
    else:
        counts = {"flow": 0, "metadata": 0, "skipped": 0}
        document = TraceDocument()

        def parse(text: bytes) -> pa.RecordBatch:
            # orjson.JSONDecodeError is a ValueError: the chunker then tries an earlier cut.
            events = orjson.loads(text)
            try:
                return _convert_chunk(events if isinstance(events, list) else [], counts)
            except ValueError as exc:  # not a bad cut: a value no column could hold
                raise CorruptFileError(str(path), "an event chunk", str(exc)) from exc

        batches = [b for b in iter_event_chunks(path, document, parse) if b.num_rows]
        raw = pa.Table.from_batches(batches, schema=_RAW_SCHEMA)
    if not document.found_events and not document.is_array:
        raise UnsupportedFormatError(
            str(path), "a PyTorch profiler trace (a JSON object with a traceEvents array)"
        )
    header = document.header
    warnings = [f"{path}: {reason} at {position}" for position, reason in document.problems]
    for message in warnings:
        logger.warning("%s; the events read before it are kept", message)
    rank = _resolve_rank(header, path, rank_hint, warnings)
    base_ns = header.get("baseTimeNanoseconds")
    base_time_ns = int(base_ns) if isinstance(base_ns, (int, float)) else None
    steps = _assign_steps(raw)
    table = _to_event_table(raw, steps, rank=rank, node=node, base_time_ns=base_time_ns)
    distributed = header.get("distributedInfo")
    distributed = distributed if isinstance(distributed, dict) else {}
    start = pc.min(table["start_us"]).as_py() if table.num_rows else None
    end = pc.max(pc.add(table["start_us"], table["dur_us"])).as_py() if table.num_rows else None
    metadata: dict[str, Any] = {
        "path": str(path),
        "rank": rank,
        "world_size": distributed.get("world_size"),
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


# Columns parsed from one chunk, before the per-file constants (rank, node) and steps are known.
_RAW_SCHEMA = pa.schema(
    [
        ("category", pa.string()),
        ("name", pa.string()),
        ("ph", pa.string()),
        ("ts", pa.float64()),
        ("dur_us", pa.float64()),
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        ("device", pa.int64()),
        ("stream", pa.int64()),
        ("correlation", pa.int64()),
        ("external_id", pa.int64()),
        ("bytes", pa.int64()),
        ("args", pa.string()),
    ]
)


def _as_int(value: Any) -> int:
    """An int from an int, a float, a numeric or hex string, or a label like ``"stream 7"``."""
    if type(value) is int:
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip(), 0)
        except ValueError:
            match = _DIGITS.search(value)
            return int(match.group()) if match else -1
    return -1


# The fast path: DuckDB parses the whole event array (C++, all cores) straight into columns.
_ARGS_PATHS = (
    "$.correlation",
    '$."External id"',
    '$."external id"',
    "$.device",
    "$.stream",
    "$.bytes",
    "$.Bytes",
    '$."Device Id"',
    '$."Device Type"',
)
_DROP_KEYS = '"External id":null,"external id":null,"correlation":null'
_GPU_SQL = ", ".join(f"'{c}'" for c in GPU_CATEGORIES)
_LEGACY_SQL = " ".join(f"WHEN '{old}' THEN '{new}'" for old, new in _LEGACY_CATEGORIES.items())
_INT_MACRO = r"""
CREATE OR REPLACE TEMP MACRO kineto_int(s) AS coalesce(
    TRY_CAST(s AS BIGINT),
    TRY_CAST(TRY_CAST(s AS DOUBLE) AS BIGINT),
    TRY_CAST(regexp_extract(s, '-?[0-9]+') AS BIGINT),
    -1)
"""
_ARRAY_SQL = """
WITH source AS (
    SELECT coalesce(ph, '') AS ph, coalesce(name, '') AS name,
           kineto_int(pid) AS pid, kineto_int(tid) AS tid,
           coalesce(ts, 0) AS ts, coalesce(dur, 0) AS dur_us,
           CASE WHEN json_type(args) = 'OBJECT' THEN args END AS args,
           CASE WHEN name = '[memory]' AND coalesce(cat, '') IN ('', 'cpu_instant_event')
                THEN 'cpu_instant_event'
                ELSE CASE coalesce(cat, '') {legacy} ELSE coalesce(cat, '') END END
               AS category
    FROM read_json($path, format = 'array', maximum_object_size = 16777216,
                   columns = {{ph: 'VARCHAR', cat: 'VARCHAR', name: 'VARCHAR', pid: 'VARCHAR',
                               tid: 'VARCHAR', ts: 'DOUBLE', dur: 'DOUBLE', args: 'JSON'}})
),
fields AS (
    SELECT *, json_extract_string(args, {paths}) AS v, category IN ({gpu}) AS on_gpu
    FROM source
),
flagged AS (SELECT *, v[9] = '1' AS cuda_memory FROM fields)
SELECT category, name, CASE ph WHEN 'I' THEN 'i' ELSE ph END AS ph, ts, dur_us, pid, tid,
       CASE WHEN on_gpu THEN CASE WHEN v[4] IS NULL THEN pid ELSE kineto_int(v[4]) END
            WHEN category = 'cpu_instant_event' AND cuda_memory THEN kineto_int(v[8])
            ELSE -1 END AS device,
       CASE WHEN on_gpu THEN CASE WHEN v[5] IS NULL THEN tid ELSE kineto_int(v[5]) END
            ELSE -1 END AS stream,
       coalesce(TRY_CAST(v[1] AS BIGINT), -1) AS correlation,
       coalesce(TRY_CAST(v[2] AS BIGINT), TRY_CAST(v[3] AS BIGINT), -1) AS external_id,
       CASE WHEN on_gpu THEN coalesce(TRY_CAST(v[6] AS BIGINT), -1)
            WHEN category = 'cpu_instant_event' THEN coalesce(TRY_CAST(v[7] AS BIGINT), -1)
            ELSE -1 END AS bytes,
       CASE WHEN args IS NULL THEN ''
            ELSE coalesce(nullif(CAST(json_merge_patch(args,
                CASE WHEN on_gpu THEN '{{{drop},"device":null,"stream":null,"bytes":null}}'
                     WHEN category = 'cpu_instant_event' AND cuda_memory
                         THEN '{{{drop},"Bytes":null,"Device Id":null}}'
                     WHEN category = 'cpu_instant_event' THEN '{{{drop},"Bytes":null}}'
                     ELSE '{{{drop}}}' END) AS VARCHAR), '{{}}'), '') END AS args
FROM flagged
WHERE ph IN ('X', 'i', 'I', 'C')
""".format(
    legacy=_LEGACY_SQL,
    paths="[" + ", ".join(f"'{p}'" for p in _ARGS_PATHS) + "]",
    gpu=_GPU_SQL,
    drop=_DROP_KEYS,
)


def _read_whole_array(path: Path, counts: dict[str, int]) -> tuple[pa.Table, TraceDocument] | None:
    """Read the events with DuckDB through a temporary copy of the event array.

    Returns None when the file is damaged, the temporary copy cannot be written, or DuckDB
    rejects the array; the caller then reads the file chunk by chunk (which also recovers
    the events before any damage).
    """
    import duckdb

    document = TraceDocument()
    try:
        folder = Path(tempfile.mkdtemp(prefix="stepscope-kineto-"))
    except OSError as exc:
        logger.debug("%s: no temporary folder (%s); reading in chunks", path, exc)
        return None
    try:
        copy = folder / "events.json"
        try:
            with open(copy, "wb") as handle:
                complete = extract_event_array(path, document, handle)
        except OSError as exc:
            logger.debug("%s: no temporary copy of the events (%s); reading in chunks", path, exc)
            return None
        if not complete:
            return None
        con = duckdb.connect()
        try:
            con.execute(_INT_MACRO)
            table = con.sql(_ARRAY_SQL, params={"path": str(copy)}).to_arrow_table()
        except duckdb.Error as exc:
            logger.debug("%s: DuckDB could not read the events (%s); reading in chunks", path, exc)
            return None
        finally:
            con.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for phase, count in document.phases.items():
        text = phase.decode("utf-8", "replace")
        if text in _FLOW_PHASES:
            counts["flow"] += count
        elif text == "M":
            counts["metadata"] += count
        elif text not in _KEPT_PHASES:
            counts["skipped"] += count
    return table.cast(_RAW_SCHEMA), document


def _convert_chunk(events: list[Any], counts: dict[str, int]) -> pa.RecordBatch:
    """Turn one chunk of parsed events into a record batch in ``_RAW_SCHEMA``.

    Column by column (list comprehensions run several times faster than one loop that appends
    to thirteen lists); only GPU and allocator events, a minority, take a per-event path.
    """
    kept = [e for e in events if type(e) is dict and e.get("ph") in _KEPT_PHASES]
    if len(kept) != len(events):
        for event in events:
            ph = event.get("ph") if type(event) is dict else None
            if ph in _FLOW_PHASES:
                counts["flow"] += 1
            elif ph == "M":
                counts["metadata"] += 1
            elif ph not in _KEPT_PHASES:
                counts["skipped"] += 1
    rows = len(kept)
    legacy = _LEGACY_CATEGORIES
    category = [legacy.get(c, c) if c else "" for c in [e.get("cat") for e in kept]]
    name = [e.get("name", "") for e in kept]
    phase = [e["ph"] for e in kept]
    pid = [p if type(p) is int else _as_int(p) for p in [e.get("pid", -1) for e in kept]]
    tid = [t if type(t) is int else _as_int(t) for t in [e.get("tid", -1) for e in kept]]
    args = [a if type(a) is dict else None for a in [e.get("args") for e in kept]]
    correlation = [a.pop("correlation", -1) if a else -1 for a in args]
    external = [a.pop("External id", None) if a else -1 for a in args]
    external = [
        (a.pop("external id", -1) if a is not None else -1) if x is None else x
        for x, a in zip(external, args, strict=True)
    ]
    device = [-1] * rows
    stream = [-1] * rows
    nbytes = [-1] * rows
    for i in [i for i, c in enumerate(category) if c in _GPU]:
        a = args[i] or {}
        device[i] = a.pop("device", pid[i])
        stream[i] = a.pop("stream", tid[i])
        nbytes[i] = a.pop("bytes", -1)
    for i in [i for i, n in enumerate(name) if n == "[memory]"]:
        category[i] = "cpu_instant_event"
        a = args[i] or {}
        if a.get("Device Type") == 1:
            device[i] = a.pop("Device Id", -1)
        nbytes[i] = a.pop("Bytes", -1)
    if "I" in phase:
        phase = ["i" if p == "I" else p for p in phase]
    dumps = orjson.dumps
    return pa.record_batch(
        [
            pa.array(category, pa.string()),
            _strings(name),
            pa.array(phase, pa.string()),
            _floats([e.get("ts", 0.0) for e in kept]),
            _floats([e.get("dur", 0.0) for e in kept]),
            pa.array(pid, pa.int64()),
            pa.array(tid, pa.int64()),
            _ints(device),
            _ints(stream),
            _ints(correlation),
            _ints(external),
            _ints(nbytes),
            pa.array([dumps(a) if a else b"" for a in args], pa.binary()).cast(pa.string()),
        ],
        schema=_RAW_SCHEMA,
    )


def _ints(values: list[Any]) -> pa.Array:
    """An int64 array; values that are not ints (``"0x0"``, ``"stream 7"``, None) are coerced."""
    try:
        return pa.array(values, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array([_as_int(v) for v in values], pa.int64())


def _strings(values: list[Any]) -> pa.Array:
    """A string array; a stray non-string name becomes its text."""
    try:
        return pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array(["" if v is None else str(v) for v in values], pa.string())


def _floats(values: list[Any]) -> pa.Array:
    """A float64 array from numbers; a stray non-number (a string ``ts``) becomes 0."""
    try:
        return pa.array(values, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array(
            [float(v) if isinstance(v, (int, float)) else 0.0 for v in values], pa.float64()
        )


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
        [_as_int(text[len("ProfilerStep#") :]) for text in name.take(step_rows).to_pylist()],
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


def _to_event_table(
    raw: pa.Table, steps: pa.Array, *, rank: int, node: str, base_time_ns: int | None
) -> pa.Table:
    rows = raw.num_rows
    start = raw["ts"]
    if base_time_ns:
        start = pc.add(start, base_time_ns / 1000.0)
    columns = {
        "source": pa.array(["kineto"] * rows, pa.string()),
        "node": pa.array([node] * rows, pa.string()),
        "rank": pa.array([rank] * rows, pa.int32()),
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


def _resolve_rank(
    header: dict[str, Any], path: Path, rank_hint: int | None, warnings: list[str]
) -> int:
    """Rank from ``distributedInfo``, the caller's hint, the file name, or 0 (with a warning)."""
    info = header.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return int(info["rank"])
    if rank_hint is not None:
        return int(rank_hint)
    missing = (
        "has no distributedInfo" if not isinstance(info, dict) else "has no distributedInfo.rank"
    )
    for pattern in _RANK_IN_NAME:
        match = pattern.search(path.name)
        if match:
            message = f"{path}: trace {missing}; rank {match.group(1)} taken from the file name"
            logger.warning(message)
            warnings.append(message)
            return int(match.group(1))
    message = (
        f"{path}: trace {missing} and its file name names no rank; assuming rank 0. "
        "Pass rank_hint=, or name the file like 'rank-3.json.gz', to set it"
    )
    logger.warning(message)
    warnings.append(message)
    return 0
