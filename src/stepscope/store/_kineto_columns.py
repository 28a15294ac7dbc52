"""How Kineto events become Arrow columns: DuckDB over the whole array, or orjson by chunks.

Both produce the same ``RAW_SCHEMA`` table (a test holds them to it), before the per-file values
(rank, node, steps, the base time) are known:

* :func:`read_whole_array`, the fast path: the decompressed event array is copied to temporary
  files (:func:`~stepscope.store._kineto_json.extract_event_array`) and DuckDB's JSON reader parses
  them straight into columns, with the args the columns take and the category names translated
  in SQL;
* :func:`convert_chunk`, the fallback for damaged files and systems without room for the copy:
  one orjson-parsed chunk of events at a time, column by column.
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from stepscope.store._kineto_json import TraceDocument, extract_event_array

__all__ = [
    "FLOW_PHASES",
    "GPU_CATEGORIES",
    "KEPT_PHASES",
    "RAW_SCHEMA",
    "as_int",
    "convert_chunk",
    "read_whole_array",
]

logger = logging.getLogger(__name__)

#: Categories whose events run on a GPU stream (``pid`` = device, ``tid`` = stream).
GPU_CATEGORIES: tuple[str, ...] = (
    "kernel",
    "gpu_memcpy",
    "gpu_memset",
    "gpu_user_annotation",
    "cuda_sync",
    "cuda_profiler_range",
)

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
KEPT_PHASES = frozenset(("X", "i", "I", "C"))
FLOW_PHASES = frozenset(("s", "t", "f"))
_DIGITS = re.compile(r"-?\d+")
_INT64_END = 1 << 63
# Columns parsed from one chunk, before the per-file constants (rank, node) and steps are known.
RAW_SCHEMA = pa.schema(
    [
        ("category", pa.string()),
        ("name", pa.string()),
        ("ph", pa.string()),
        ("ts", pa.float64()),  # null when there is none (such events are dropped)
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


def as_int(value: Any) -> int:
    """An int from an int, a float, a numeric or hex string, or a label like ``"stream 7"``;
    -1 for anything else, and for a number that no int64 column can hold."""
    if type(value) is int:
        number = value
    elif isinstance(value, float):
        number = int(value) if abs(value) < _INT64_END else -1
    elif isinstance(value, str):
        try:
            number = int(value.strip(), 0)
        except ValueError:
            match = _DIGITS.search(value)
            number = int(match.group()) if match else -1
    else:
        return -1
    return number if -_INT64_END <= number < _INT64_END else -1


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
    SELECT CASE coalesce(ph, '') WHEN 'I' THEN 'i' ELSE coalesce(ph, '') END AS ph,
           coalesce(name, '') AS name, pid AS pid_text, tid AS tid_text,
           ts, coalesce(dur, 0) AS dur_us,
           -- DuckDB holds a JSON value as minified text: an object starts with its brace
           CASE WHEN starts_with(args, '{{') THEN args END AS args,
           CASE WHEN name = '[memory]' AND coalesce(cat, '') IN ('', 'cpu_instant_event')
                THEN 'cpu_instant_event'
                ELSE CASE coalesce(cat, '') {legacy} ELSE coalesce(cat, '') END END
               AS category
    FROM read_json($paths, format = 'array', maximum_object_size = 16777216,
                   columns = {{ph: 'VARCHAR', cat: 'VARCHAR', name: 'VARCHAR', pid: 'VARCHAR',
                               tid: 'VARCHAR', ts: 'DOUBLE', dur: 'DOUBLE', args: 'JSON'}})
    WHERE ph IN ('X', 'i', 'I', 'C')
),
fields AS (
    SELECT *, kineto_int(pid_text) AS pid, kineto_int(tid_text) AS tid,
           json_extract_string(args, {paths}) AS v, category IN ({gpu}) AS on_gpu
    FROM source
),
flagged AS (SELECT *, v[9] = '1' AS cuda_memory FROM fields),
converted AS (
SELECT category, name, ph, ts, dur_us, pid, tid,
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
       CASE WHEN args IS NOT NULL THEN CAST(json_merge_patch(args,
            CASE WHEN on_gpu THEN '{{{drop},"device":null,"stream":null,"bytes":null}}'
                 WHEN category = 'cpu_instant_event' AND cuda_memory
                     THEN '{{{drop},"Bytes":null,"Device Id":null}}'
                 WHEN category = 'cpu_instant_event' THEN '{{{drop},"Bytes":null}}'
                 ELSE '{{{drop}}}' END) AS VARCHAR) END AS rest
FROM flagged
)
-- "rest" is its own column so that the merge runs once per row (nullif() would repeat it)
SELECT * EXCLUDE (rest), CASE WHEN rest IS NULL OR rest = '{{}}' THEN '' ELSE rest END AS args
FROM converted
""".format(
    legacy=_LEGACY_SQL,
    paths="[" + ", ".join(f"'{p}'" for p in _ARGS_PATHS) + "]",
    gpu=_GPU_SQL,
    drop=_DROP_KEYS,
)


def read_whole_array(path: Path, counts: dict[str, int]) -> tuple[pa.Table, TraceDocument] | None:
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
        try:
            parts = extract_event_array(path, document, folder)
        except OSError as exc:
            logger.debug("%s: no temporary copy of the events (%s); reading in chunks", path, exc)
            return None
        if parts is None:
            return None
        con = duckdb.connect()
        try:
            # one thread: the parts are read in order, the working memory stays that of one
            # part, and a folder of traces is read several at a time (store.read_ahead)
            con.execute("SET threads = 1")
            con.execute(_INT_MACRO)
            files = [str(part) for part in parts]
            table = con.sql(_ARRAY_SQL, params={"paths": files}).to_arrow_table()
        except duckdb.Error as exc:
            logger.debug("%s: DuckDB could not read the events (%s); reading in chunks", path, exc)
            return None
        finally:
            con.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for phase, count in document.phases.items():
        text = phase.decode("utf-8", "replace")
        if text in FLOW_PHASES:
            counts["flow"] += count
        elif text == "M":
            counts["metadata"] += count
        elif text not in KEPT_PHASES:
            counts["skipped"] += count
    return table.cast(RAW_SCHEMA), document


def convert_chunk(events: list[Any], counts: dict[str, int]) -> pa.RecordBatch:
    """Turn one chunk of parsed events into a record batch in ``RAW_SCHEMA``.

    Column by column (list comprehensions run several times faster than one loop that appends
    to thirteen lists); only GPU and allocator events, a minority, take a per-event path. A
    null or stray value gets what DuckDB's reader makes of it on the fast path (-1, "" or 0,
    or its text or number; a ``ts`` that is no number stays null) rather than failing the
    chunk, which would lose the whole file.
    """
    kept = [e for e in events if type(e) is dict and e.get("ph") in KEPT_PHASES]
    if len(kept) != len(events):
        for event in events:
            ph = event.get("ph") if type(event) is dict else None
            if ph in FLOW_PHASES:
                counts["flow"] += 1
            elif ph == "M":
                counts["metadata"] += 1
            elif ph not in KEPT_PHASES:
                counts["skipped"] += 1
    rows = len(kept)
    legacy = _LEGACY_CATEGORIES
    category = [legacy.get(c, c) if type(c) is str else c for c in [e.get("cat") for e in kept]]
    name = [e.get("name", "") for e in kept]
    phase = [e["ph"] for e in kept]
    pid = [p if type(p) is int else as_int(p) for p in [e.get("pid", -1) for e in kept]]
    tid = [t if type(t) is int else as_int(t) for t in [e.get("tid", -1) for e in kept]]
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
        device[i] = _or(a.pop("device", None), pid[i])
        stream[i] = _or(a.pop("stream", None), tid[i])
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
            _strings(category),
            _strings(name),
            pa.array(phase, pa.string()),
            _floats([e.get("ts") for e in kept], missing=None),
            _floats([e.get("dur") for e in kept], missing=0.0),
            _ints(pid),
            _ints(tid),
            _ints(device),
            _ints(stream),
            _ints(correlation),
            _ints(external),
            _ints(nbytes),
            pa.array([dumps(a) if a else b"" for a in args], pa.binary()).cast(pa.string()),
        ],
        schema=RAW_SCHEMA,
    )


def _or(value: Any, default: Any) -> Any:
    """``value``, or ``default`` when it is None (a JSON null)."""
    return default if value is None else value


def _ints(values: list[Any]) -> pa.Array:
    """An int64 array; values that are not ints (``"0x0"``, ``"stream 7"``, None) are coerced."""
    try:
        return pc.fill_null(pa.array(values, pa.int64()), -1)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array([as_int(v) for v in values], pa.int64())


def _strings(values: list[Any]) -> pa.Array:
    """A string array; a missing value becomes "", a stray non-string one its text."""
    try:
        return pc.fill_null(pa.array(values, pa.string()), "")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array(["" if v is None else str(v) for v in values], pa.string())


def _float(value: Any, missing: float | None) -> float | None:
    """A number, or a number written as text; ``missing`` for anything else."""
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value) if isinstance(value, str) else missing
    except ValueError:
        return missing


def _floats(values: list[Any], *, missing: float | None) -> pa.Array:
    """A float64 array from numbers, and numbers written as text (a string ``ts``); a missing
    value or a non-number becomes ``missing`` (None: a null, as DuckDB's reader gives)."""
    try:
        array = pa.array(values, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        array = pa.array([_float(v, missing) for v in values], pa.float64())
    return array if missing is None else pc.fill_null(array, missing)
