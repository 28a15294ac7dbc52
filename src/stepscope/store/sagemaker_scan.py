"""Many SageMaker Debugger raw files converted in one DuckDB JSON scan.

Parsing JSON into Python objects costs a few microseconds per record; DuckDB's JSON reader
parses the same bytes into columns several times faster, and one scan over many files saves
the per-query cost that one query per file pays (an hour of one node is 60 system files and 120
framework files). :func:`scan_system_files` and :func:`scan_pevents_files` give, for each file,
the table that :func:`~stepscope.store.sagemaker_system.read_system_file` or
:func:`~stepscope.store.sagemaker.read_pevents_file` would give, or None when the scan cannot
promise that: a damaged record (a system metric's value out of range too), a field of an
unusual type, ``B``/``E`` pairs or instants, two start times. The caller reads those files with the per-file readers, which keep every good
record and name what was skipped.

A scan runs on one DuckDB thread: on a busy machine a second one only adds CPU time. A refresh
with a backlog runs the next scan beside the writing of the previous one's rows
(:class:`~stepscope.store.raw_files.RawReading`), so it holds at most two scans' rows. Two
things the per-file readers do with Python's types are decided by DuckDB's here, for files no
writer we know produces: an event ``name`` that is not a JSON string is taken as its JSON text,
and a ``pid`` written as text as the number.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from stepscope._sql import sql_text
from stepscope.store.sagemaker import args_columns, process_names, times_out_of_range
from stepscope.store.sagemaker_system import values_out_of_range
from stepscope.store.schema import EVENT_SCHEMA, SYSTEM_SCHEMA

__all__ = ["ScanFile", "scan_pevents_files", "scan_system_files"]


@dataclass(frozen=True)
class ScanFile:
    """One local raw file to scan, with what its rows get from the file name.

    :ivar path: the file on the local disk.
    :ivar node: the node (system files: the default ``NodeId``).
    :ivar source: the ``source`` column of framework events.
    :ivar rank: the ``rank`` column of framework events.
    """

    path: str
    node: str
    source: str = ""
    rank: int = -1


def _sql_list(files: Sequence[ScanFile]) -> str:
    return "[" + ", ".join(sql_text(f.path) for f in files) + "]"


#: What a scan gives: all rows, in file order, and the 0-based file of each row.
_Scanned = tuple[pa.Table, np.ndarray]
#: Turns a scan of some files into each file's table (None: read it with the per-file reader).
_Convert = Callable[[Sequence[ScanFile], pa.Table, np.ndarray], list[pa.Table | None]]


def _scan(con: Any, files: Sequence[ScanFile], query: str) -> _Scanned | None:
    """Run ``query`` (``{files}`` in it is replaced by the SQL list of the paths; its first
    column ``file`` is each row's 1-based file position); None when DuckDB cannot read one of
    the files."""
    import duckdb

    try:
        table = con.sql(query.replace("{files}", _sql_list(files))).to_arrow_table()
    except duckdb.Error:
        return None
    positions = _ints(table.column("file"))
    if positions.size and np.any(np.diff(positions) < 0):
        table = table.take(pc.sort_indices(table.column("file")))  # stable: keeps file order
        positions = _ints(table.column("file"))
    return table.drop_columns(["file"]), positions - 1


def _scan_each(
    con: Any, files: Sequence[ScanFile], query: str, convert: _Convert
) -> list[pa.Table | None]:
    """Scan ``files`` together, or, when one of them cannot be read, each alone."""
    scanned = _scan(con, files, query)
    if scanned is not None:
        return convert(files, *scanned)
    if len(files) == 1:
        return [None]
    return [table for f in files for table in _scan_each(con, [f], query, convert)]


def _ints(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Integers without nulls as a numpy array."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    ints: np.ndarray = values.to_numpy()
    return ints


def _rows(mask: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The positions where ``mask`` is true (null counts as false)."""
    return _ints(pc.indices_nonzero(mask))


def _files_with(mask: pa.Array, file_of_row: np.ndarray, n_files: int) -> np.ndarray:
    """Which files have a row where ``mask`` is true (null counts as false)."""
    return np.bincount(file_of_row[_rows(mask)], minlength=n_files) > 0


def _split(table: pa.Table, file_of_row: np.ndarray, skip: np.ndarray) -> list[pa.Table | None]:
    """Each file's rows (``file_of_row`` is sorted), in memory of their own; None for the files
    in ``skip``.

    A copy, not a slice: a slice keeps the whole scan alive for as long as the file's rows wait
    in a segment being written, and a stream with few rows per file (``model_timeline``) waits
    for many scans. The copies cost about 0.02 s of CPU per hour of one node.
    """
    bounds = np.searchsorted(file_of_row, np.arange(len(skip) + 1)).tolist()
    return [
        None if skip[i] else _copy(table.slice(bounds[i], bounds[i + 1] - bounds[i]))
        for i in range(len(skip))
    ]


def _copy(table: pa.Table) -> pa.Table:
    """``table``'s rows in buffers of their own: each column's part copied whole, several times
    faster than a ``take`` of the same rows."""
    return pa.table([column.combine_chunks() for column in table.columns], schema=table.schema)


# --------------------------------------------------------------------------- system records

_SYSTEM_QUERY = (
    "SELECT list_position({files}, filename) AS file, "
    "CAST(floor(Timestamp * 1e6 + 0.5) AS BIGINT) AS timestamp_us, "
    "nullif(NodeId, '') AS node, Type AS type, coalesce(Name, '') AS name, "
    "coalesce(Dimension, '') AS dimension, Value AS value "
    "FROM read_json({files}, format = 'newline_delimited', filename = true, columns = "
    "{'Type': 'VARCHAR', 'Name': 'VARCHAR', 'Dimension': 'VARCHAR', 'Value': 'DOUBLE', "
    "'NodeId': 'VARCHAR', 'Timestamp': 'DOUBLE'})"
)


def scan_system_files(con: Any, files: Sequence[ScanFile]) -> list[pa.Table | None]:
    """The SYSTEM_SCHEMA rows of each system-metrics file, or None for a file whose records
    are not all complete (see the module docstring).

    :param con: a DuckDB connection the caller keeps for the refresh.
    :param files: the files, with the node their names give.
    """
    return _scan_each(con, files, _SYSTEM_QUERY, _system_tables)


def _system_tables(
    files: Sequence[ScanFile], table: pa.Table, file_of_row: np.ndarray
) -> list[pa.Table | None]:
    damaged = np.zeros(len(files), bool)
    for column in ("timestamp_us", "type", "value"):
        damaged |= _files_with(pc.is_null(table.column(column)), file_of_row, len(files))
    out_of_range = values_out_of_range(table["name"], table["dimension"], table["value"])
    damaged |= _files_with(out_of_range, file_of_row, len(files))
    # a damaged record: the per-file reader keeps the good ones and warns
    keep = pa.array(~damaged[file_of_row])
    table, file_of_row = table.filter(keep), file_of_row[~damaged[file_of_row]]
    nodes = pa.array([f.node for f in files], pa.string()).take(pa.array(file_of_row))
    table = table.set_column(1, "node", pc.coalesce(table.column("node"), nodes))
    return _split(table.cast(SYSTEM_SCHEMA), file_of_row, damaged)


# --------------------------------------------------------------------------- framework events

#: args keys that become columns (see :func:`~stepscope.store.sagemaker.args_columns`).
_ARGS_KEYS = ("step_num", "pid", "thread_id", "tid", "bytes", "bytes_fetched", "device")
_ARGS_STRUCT = "{" + ", ".join(f'"{key}": "VARCHAR"' for key in _ARGS_KEYS) + "}"
_EVENTS_QUERY = (
    "SELECT list_position({files}, filename) AS file, ph, name, pid, tid, ts, dur, "
    f"json_transform(args, '{_ARGS_STRUCT}') AS known, len(json_keys(args)) AS keys, args "
    "FROM read_json({files}, format = 'array', filename = true, columns = "
    "{'name': 'VARCHAR', 'ph': 'VARCHAR', 'pid': 'VARCHAR', 'tid': 'VARCHAR', "
    "'ts': 'DOUBLE', 'dur': 'DOUBLE', 'args': 'JSON'})"
)
#: An integer as the per-file reader takes it from text or a JSON number (wider ones are odd).
_PLAIN_INT = r"^-?[0-9]{1,18}$"


def scan_pevents_files(con: Any, files: Sequence[ScanFile]) -> list[pa.Table | None]:
    """The EVENT_SCHEMA rows of each framework events file (``*_pythontimeline.json`` and the
    other suffixes), or None for a file the scan cannot convert exactly (see the module
    docstring).

    :param con: a DuckDB connection the caller keeps for the refresh.
    :param files: the files, with the source, node and rank their names give.
    """
    return _scan_each(con, files, _EVENTS_QUERY, _events_tables)


def _plain_ints(text: pa.Array) -> tuple[pa.Array, pa.Array | None]:
    """Text integers as int64 (null stays null), and where a value is not one (None when every
    value is one or null)."""
    try:
        return pc.cast(text, pa.int64()), None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        plain = pc.match_substring_regex(text, _PLAIN_INT)
        return pc.cast(pc.if_else(plain, text, None), pa.int64()), pc.fill_null(
            pc.invert(plain), False
        )


def _file_metadata(
    files: Sequence[ScanFile], meta: pa.Table, file_of_meta: np.ndarray
) -> list[tuple[float, dict[Any, str]] | None]:
    """Each file's start time and phases (see :func:`~stepscope.store.sagemaker.process_names`);
    None for a file whose metadata disagree or has a pid that is not an integer."""
    events: list[list[dict[str, Any]]] = [[] for _ in files]
    odd = np.zeros(len(files), bool)
    for index, row in zip(file_of_meta.tolist(), meta.to_pylist(), strict=True):
        try:
            row["pid"] = int(row["pid"]) if row["pid"] is not None else None
        except ValueError:
            odd[index] = True
        row["args"] = orjson.loads(row["args"]) if row["args"] is not None else None
        events[index].append(row)
    return [None if odd[i] else process_names(events[i]) for i in range(len(files))]


def _events_tables(
    files: Sequence[ScanFile], table: pa.Table, file_of_row: np.ndarray
) -> list[pa.Table | None]:
    n_files = len(files)
    ph = table.column("ph")
    is_span = pc.fill_null(pc.equal(ph, "X"), False)
    is_meta = pc.fill_null(pc.equal(ph, "M"), False)
    # B/E pairs and instants (and files with no event at all) are the per-file reader's business
    skip = _files_with(
        pc.invert(pc.or_(pc.or_(is_span, is_meta), pc.is_null(ph))), file_of_row, n_files
    )
    counted = np.bincount(file_of_row[_rows(pc.or_(is_span, is_meta))], minlength=n_files)
    skip |= counted == 0
    meta_rows = _rows(is_meta)
    metadata = _file_metadata(
        files, table.filter(is_meta).select(["name", "pid", "args"]), file_of_row[meta_rows]
    )
    skip |= np.array([m is None for m in metadata], bool)
    span_rows = _rows(is_span)
    spans, file_of_span = table.filter(is_span), file_of_row[span_rows]
    pid_key, odd_pid = _plain_ints(spans.column("pid").combine_chunks())
    event_tid, odd_tid = _plain_ints(spans.column("tid").combine_chunks())
    start_us = [m[0] if m else 0.0 for m in metadata]
    n = spans.num_rows
    on_file = pa.array(file_of_span)
    starts = pc.add(spans.column("ts"), pa.array(start_us, pa.float64()).take(on_file))
    durations = pc.fill_null(spans.column("dur"), 0.0)
    for damaged in (
        pc.is_null(spans.column("ts")),
        pc.is_null(spans.column("name")),
        odd_pid,
        odd_tid,
        times_out_of_range(starts, pc.add(starts, durations)),
        pc.less(durations, 0.0),
    ):
        if damaged is not None:
            skip |= _files_with(damaged, file_of_span, n_files)
    columns, unreadable = _args_of_spans(spans, event_tid)
    skip[file_of_span[unreadable]] = True  # the per-file reader says what it cannot read
    events = pa.table(
        [
            pa.array([f.source for f in files], pa.string()).take(on_file),
            pa.array([f.node for f in files], pa.string()).take(on_file),
            pa.array([f.rank for f in files], pa.int32()).take(on_file),
            _categories(metadata, pid_key, file_of_span),
            spans.column("name").combine_chunks().fill_null(""),
            pa.repeat(pa.scalar("X", pa.string()), n),
            starts,
            durations,
            *columns[:4],
            *[pa.repeat(pa.scalar(-1, pa.int64()), n)] * 3,
            *columns[4:],
        ],
        schema=EVENT_SCHEMA,
    )
    return _split(events, file_of_span, skip)


def _categories(
    metadata: list[tuple[float, dict[Any, str]] | None], pid_key: pa.Array, file_of_span: np.ndarray
) -> pa.Array:
    """The phase each span's file gives its ``pid`` (``Unknown`` when none)."""
    encoded = pc.dictionary_encode(pid_key)
    pids: list[Any] = [*encoded.dictionary.to_pylist(), None]  # a missing pid is the last code
    codes = _ints(encoded.indices.fill_null(len(pids) - 1))
    names = [
        (m[1] if m else {}).get(pid, "Unknown") for m in metadata for pid in pids
    ]  # one name per (file, pid), file-major
    return pa.array(names, pa.string()).take(pa.array(file_of_span * len(pids) + codes))


def _args_of_spans(spans: pa.Table, event_tid: pa.Array) -> tuple[list[pa.Array], np.ndarray]:
    """``pid``, ``tid``, ``step``, ``device``, ``bytes`` and ``args`` of the spans, and the
    spans whose args are no JSON (their files are left to the per-file reader).

    Spans whose args are plain (only keys that become columns, each an integer) are converted
    here; the others (a key left over, a value that is not an integer) go through
    :func:`~stepscope.store.sagemaker.args_columns` from their parsed args, as the per-file
    reader converts them.
    """
    n = spans.num_rows
    special = pa.repeat(pa.scalar(False), n)
    popped = pa.repeat(pa.scalar(0, pa.int64()), n)
    values: dict[str, pa.Array] = {}
    for key, text in zip(_ARGS_KEYS, spans.column("known").combine_chunks().flatten(), strict=True):
        ints, odd = _plain_ints(text)
        values[key] = ints
        if odd is not None:
            special = pc.or_(special, odd)
        present = pc.is_valid(text)  # a key whose value is null counts as absent: special then
        if key == "tid":
            present = pc.and_(present, pc.is_null(values["thread_id"]))
        elif key == "bytes_fetched":
            present = pc.and_(present, pc.is_null(values["bytes"]))
        elif key == "device":
            present = pc.and_(present, pc.fill_null(pc.greater_equal(ints, 0), False))
        popped = pc.add(popped, pc.cast(present, pa.int64()))
    keys = pc.fill_null(spans.column("keys").combine_chunks(), 0)
    special = pc.or_(special, pc.greater(keys, popped))
    columns = [
        pc.fill_null(values["pid"], -1),
        pc.coalesce(
            values["thread_id"],
            pc.if_else(pc.is_null(values["thread_id"]), values["tid"], None),
            event_tid,
            -1,
        ),
        pc.fill_null(values["step_num"], -1),
        pc.fill_null(values["device"], -1),
        pc.coalesce(
            values["bytes"],
            pc.if_else(pc.is_null(values["bytes"]), values["bytes_fetched"], None),
            -1,
        ),
        pa.repeat(pa.scalar("", pa.string()), n),
    ]
    rows = pc.indices_nonzero(special)
    unreadable: list[int] = []
    if len(rows) == 0:
        return columns, np.array(unreadable, np.int64)
    texts = spans.column("args").take(rows).to_pylist()
    parsed = []
    for row, text in zip(rows.to_pylist(), texts, strict=True):
        try:
            parsed.append(orjson.loads(text) if text is not None else None)
        except orjson.JSONDecodeError:  # NaN, which DuckDB reads: no JSON orjson takes
            parsed.append(None)
            unreadable.append(row)
    exact = args_columns(parsed, event_tid.take(rows).to_pylist())
    fixed = [
        pc.replace_with_mask(column, special, fix)
        for column, fix in zip(columns, exact, strict=True)
    ]
    return fixed, np.array(unreadable, np.int64)
