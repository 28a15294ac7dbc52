"""Streaming split of one Chrome-trace JSON document into its header, its events and its tail.

A PyTorch profiler trace is one JSON object whose ``traceEvents`` array holds almost all of the
bytes (files reach gigabytes), with small metadata keys before it (``schemaVersion``,
``deviceProperties``, ``distributedInfo``) and after it (``traceName``, ``displayTimeUnit``,
``baseTimeNanoseconds``). Parsing the whole document with ``json.load`` holds every event as a
Python dict at once; this module instead decompresses the file block by block, cuts the event
array at event boundaries into chunks of about a megabyte and hands each chunk to a parser, so
only one chunk is in flight at a time.

A chunk boundary is the last ``}`` ``,`` ``{`` sequence in the buffer whose prefix parses as a
list of events; a boundary that falls inside a string or a nested object fails to parse and the
previous candidate is tried. The caller supplies the chunk parser (``parse``: the JSON text of
an array of events in, anything out, :class:`ValueError` when the text is not valid JSON). A
file that ends early (truncated ``.gz``, a JSON document cut mid-event) yields every event up
to the last complete one before the cut and reports where it stopped; one whose events are
damaged inside (bytes zeroed or overwritten) skips the damaged events, picks up again at the
first event boundary after them that starts a whole event, and reports what it skipped.

:func:`extract_event_array` is the other way out: it copies the bare event array to files, for
a reader that parses JSON faster than Python can (DuckDB), parsing only the small header and
tail itself. The copy is cut into arrays of about :data:`PART_BYTES` at the boundaries between
top-level events that the PyTorch profiler's indentation shows, because DuckDB's working memory
grows with the size of the file it parses; a document without them is copied whole.
"""

from __future__ import annotations

import codecs
import io
import re
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain, pairwise
from pathlib import Path
from typing import Any, TypeVar

import orjson
from isal import isal_zlib

__all__ = [
    "TraceDocument",
    "extract_event_array",
    "iter_event_chunks",
    "loads_keys",
    "utf8_blocks",
]

T = TypeVar("T")

#: Decompressed bytes parsed per chunk: a few MB of JSON is a few ten thousand events.
CHUNK_BYTES = 1 << 20
_READ_BYTES = 1 << 20
_COMPRESSED_READ_BYTES = 256 << 10
#: Give up looking for ``"traceEvents"`` after this many header bytes (not a trace).
_MAX_HEAD_BYTES = 64 << 20
#: Bytes at the start of the array left that no event boundary parses in, past which they are
#: damage rather than one event larger than a chunk (an event of the PyTorch profiler is at
#: most a few KB).
_MAX_EVENT_BYTES = 4 * CHUNK_BYTES

#: What is kept of a buffer of damage with no whole event in it: where the next one may start.
_KEPT_AFTER_LONG_DAMAGE = 64 << 10

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_WHITESPACE_AND_COMMAS = b" \t\r\n,"
#: How much of the end of the document :func:`extract_event_array` keeps to find the array's end.
_TAIL_BYTES = 4 * CHUNK_BYTES
_PHASE = re.compile(rb'"ph"\s*:\s*"([^"]*)"')
_PHASE_KEY = b'"ph"'
#: Bytes of JSON per part of :func:`extract_event_array`'s copy.
PART_BYTES = 8 << 20
#: The end of one top-level event and the start of the next as the PyTorch profiler indents
#: them (a JSON string holds no raw newline, and nested objects are indented deeper).
_TOP_LEVEL_SEPARATOR = b"},\n  {"


@dataclass
class TraceDocument:
    """What the scan found besides the events: top-level keys and damage reports.

    :param header: top-level keys other than ``traceEvents`` (before and after the array).
    :param is_array: the document is a bare JSON array of events (the oldest Chrome-trace form).
    :param problems: ``(position, reason)`` pairs for damage that was skipped; ``position`` names
        the byte offset (in the decompressed text of a ``.gz``) where the events that could not
        be read start.
    :param compressed: the file is gzip.
    """

    header: dict[str, Any] = field(default_factory=dict)
    is_array: bool = False
    found_events: bool = False
    compressed: bool = False
    problems: list[tuple[str, str]] = field(default_factory=list)
    #: Events per ``ph`` value, counted by :func:`extract_event_array` on the raw text.
    phases: Counter[bytes] = field(default_factory=Counter)


def _decompressed_blocks(path: Path | bytes, document: TraceDocument) -> Iterator[bytes]:
    """Yield the file's bytes (or the given content), gunzipped when they start with the gzip
    magic number."""
    with io.BytesIO(path) if isinstance(path, bytes) else open(path, "rb") as raw:
        first = raw.read(_READ_BYTES)
        if not first.startswith(b"\x1f\x8b"):
            while first:
                yield first
                first = raw.read(_READ_BYTES)
            return
        document.compressed = True
        # ISA-L inflates the same gzip streams as zlib, about three times faster
        inflater = isal_zlib.decompressobj(wbits=31)
        compressed_offset = 0
        block = first
        while block:
            try:
                # Bounded output per call: a 1 MB .gz block can hold 30 MB of repetitive JSON.
                out = inflater.decompress(block, _READ_BYTES)
                while out:
                    yield out
                    out = inflater.decompress(inflater.unconsumed_tail, _READ_BYTES)
            except isal_zlib.error as exc:  # type: ignore[misc]  # the stub types it as an instance
                document.problems.append(
                    (f"compressed byte {compressed_offset}", f"gzip data is corrupt ({exc})")
                )
                return
            compressed_offset += len(block)
            if inflater.eof:
                # Zeros after a member are padding, which gzip(1) and Python's gzip skip; a
                # second member (concatenated .gz files) continues the same stream.
                block = inflater.unused_data.lstrip(b"\0")
                while not block and (more := raw.read(_COMPRESSED_READ_BYTES)):
                    block = more.lstrip(b"\0")
                if block:
                    inflater = isal_zlib.decompressobj(wbits=31)
                continue
            block = raw.read(_COMPRESSED_READ_BYTES)
        if not inflater.eof:
            document.problems.append(
                (f"compressed byte {compressed_offset}", "gzip stream ends early (truncated file)")
            )


def utf8_blocks(blocks: Iterable[bytes]) -> Iterator[bytes]:
    """The blocks of a JSON text as UTF-8 without a byte order mark.

    JSON lets a reader accept a UTF-8 byte order mark, and UTF-16 text, which Windows tools
    write (PowerShell's ``Out-File``, Notepad's "Unicode"); UTF-16 is told by its mark or, as
    RFC 4627 says, by the zero bytes of its first ASCII character, and is transcoded as it
    streams (a byte that ends the text in the middle of a character becomes U+FFFD).
    """
    rest = iter(blocks)
    first = next(rest, b"")
    encoding = _utf16_encoding(first)
    if encoding is None:
        yield first.removeprefix(codecs.BOM_UTF8)
        yield from rest
        return
    decoder = codecs.getincrementaldecoder(encoding)("replace")
    for block in chain([first], rest):
        yield decoder.decode(block).encode()
    yield decoder.decode(b"", final=True).encode()


def _utf16_encoding(start: bytes) -> str | None:
    """The UTF-16 codec that reads a text starting with ``start``, None for UTF-8."""
    if start.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"  # the codec reads the mark and drops it
    if len(start) >= 2 and start[0] and not start[1]:
        return "utf-16-le"
    if len(start) >= 2 and not start[0] and start[1]:
        return "utf-16-be"
    return None


def _parse_events_prefix(buffer: bytes, parse: Callable[[bytes], T]) -> tuple[T | None, int]:
    """Parse the longest prefix of ``buffer`` that is a comma-separated run of whole events.

    Returns the parsed chunk and how many bytes it used (``None, 0`` when no boundary parses).
    """
    # Look near the end first (a boundary is every few hundred bytes in a real trace), then
    # anywhere, for traces with huge events or boundaries that do not parse.
    for window_start in (max(0, len(buffer) - (64 << 10)), 0):
        candidates = [m.start() + 1 for m in _BOUNDARY.finditer(buffer, window_start)]
        for cut in reversed(candidates[-16:]):
            try:
                return parse(b"[" + buffer[:cut] + b"]"), cut
            except ValueError:
                continue
        if window_start == 0:
            break
    return None, 0


def _parse_longest_prefix(buffer: bytes, parse: Callable[[bytes], T]) -> tuple[T | None, int]:
    """Parse the longest run of whole events ``buffer`` starts with, when the damage lies
    before its last boundaries (:func:`_parse_events_prefix` tries those only): a bisection
    over all of them, since the runs that end before the damage parse and those after do not."""
    cuts = [m.start() + 1 for m in _BOUNDARY.finditer(buffer)]
    best: tuple[T | None, int] = (None, 0)
    low, high = 0, len(cuts) - 1
    while low <= high:
        middle = (low + high) // 2
        try:
            best = parse(b"[" + buffer[: cuts[middle]] + b"]"), cuts[middle]
            low = middle + 1
        except ValueError:
            high = middle - 1
    return best


def _parse_events_final(buffer: bytes, parse: Callable[[bytes], T]) -> tuple[T | None, int]:
    """Parse what is left of a damaged array: the longest run of whole events it starts with."""
    body = buffer.rstrip()
    try:
        return parse(b"[" + body + b"]"), len(buffer)
    except ValueError:
        pass
    for attempt in (_parse_events_prefix, _parse_longest_prefix):
        chunk, used = attempt(buffer, parse)
        if chunk is not None:
            return chunk, used
    # Maybe the buffer holds exactly one complete event followed by garbage: it ends at a "}"
    # no later than the first boundary (one damaged event is not tried at each of its own).
    first = _BOUNDARY.search(body)
    limit = first.start() + 1 if first else 1 << 20
    closing = body.find(b"}")
    while 0 <= closing < limit:
        try:
            return parse(b"[" + body[: closing + 1] + b"]"), closing + 1
        except ValueError:
            closing = body.find(b"}", closing + 1)
    return None, 0


def _resynchronise(
    buffer: bytes, parse: Callable[[bytes], T], *, at_end: bool
) -> tuple[int, int, T | None] | None:
    """The first whole event after the damaged ones ``buffer`` starts with: where it starts,
    where it ends, and it parsed. That is the text after the first event boundary that parses
    as one event up to the next boundary (after a boundary inside a damaged event it does not),
    or, when ``buffer`` is the rest of the file (``at_end``), the last event before the array's
    end, or no event but that end (returned as an empty span before its ``]``). None when there
    is none; each attempt parses one event, so the scan costs about one parse of the buffer."""
    boundaries = list(_BOUNDARY.finditer(buffer))
    for boundary, following in pairwise(boundaries):
        start, end = boundary.end() - 1, following.start() + 1
        try:
            return start, end, parse(b"[" + buffer[start:end] + b"]")
        except ValueError:
            continue
    if not at_end:
        return None
    if boundaries:
        start = boundaries[-1].end() - 1
        split = _split_array_end(buffer[start:], parse)
        if split is not None:
            chunk, tail = split
            return start, len(buffer) - len(tail) - 1, chunk
    array_end = _find_array_end(buffer, TraceDocument())  # the caller parses the tail later
    return None if array_end is None else (array_end - 1, array_end - 1, None)


def _split_array_end(buffer: bytes, parse: Callable[[bytes], T]) -> tuple[T | None, bytes] | None:
    """If the event array ends in ``buffer`` (a top-level ``]`` after the last event), split there.

    Returns the parsed events before the ``]`` (None when there are none) and the bytes after
    it. Only called on a buffer that starts at an event boundary; a ``]`` inside a string or a
    nested list is rejected because the text before it does not parse.
    """
    position = buffer.rfind(b"]")
    attempts = 0
    while position >= 0 and attempts < 16:
        head = buffer[:position].rstrip()
        if not head:
            return None, buffer[position + 1 :]
        if head.endswith(b"}"):
            attempts += 1
            try:
                return parse(b"[" + head + b"]"), buffer[position + 1 :]
            except ValueError:
                pass
        position = buffer.rfind(b"]", 0, position)
    return None


def loads_keys(text: bytes) -> Any:
    """``text`` parsed as JSON, a byte that is not UTF-8 read as U+FFFD: one such byte in a
    device's or a host's name must not lose the keys beside it (``distributedInfo``,
    ``baseTimeNanoseconds``).

    :raises orjson.JSONDecodeError: ``text`` is not JSON.
    """
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        readable = text.decode("utf-8", "replace")
        if readable.encode() == text:  # valid UTF-8: the error was another
            raise
        return orjson.loads(readable)


def _parse_header(head: bytes, document: TraceDocument) -> None:
    text = head.strip()
    if text.startswith(b"{"):
        text = text[1:]
    text = text.rstrip().rstrip(b",")
    if not text.strip():
        return
    try:
        value = loads_keys(b"{" + text + b"}")
    except orjson.JSONDecodeError as exc:
        document.problems.append(("header", f"top-level keys before traceEvents unreadable: {exc}"))
        return
    document.header.update(value)


def _parse_tail(tail: bytes, document: TraceDocument) -> None:
    text = tail.strip().lstrip(b",").strip()
    if not text or text == b"}":
        return
    try:
        value = loads_keys(b"{" + text)
    except orjson.JSONDecodeError as exc:
        document.problems.append(("tail", f"top-level keys after traceEvents unreadable: {exc}"))
        return
    if isinstance(value, dict):
        document.header.update(value)


def iter_event_chunks(
    path: Path | bytes, document: TraceDocument, parse: Callable[[bytes], T]
) -> Iterator[T]:
    """Yield the trace's events chunk by chunk, each parsed by ``parse``, filling ``document``.

    :param path: a ``.json`` or ``.json.gz`` Chrome-trace file, or such a file's content.
    :param document: receives the header keys, the array flag and any damage found.
    :param parse: turns the JSON text of an array of events into a chunk; raises
        :class:`ValueError` when the text is not valid JSON.
    """
    blocks = utf8_blocks(_decompressed_blocks(path, document))
    buffer = b""
    offset = 0  # decompressed offset of buffer[0]
    # 1. Find where the event array starts.
    for block in blocks:
        buffer += block
        start = buffer.lstrip()[:1]
        if start == b"[":
            document.is_array = True
            skip = buffer.index(b"[") + 1
            offset, buffer = skip, buffer[skip:]
            break
        if start and start != b"{":
            return
        match = _EVENTS_KEY.search(buffer)
        if match:
            _parse_header(buffer[: match.start()], document)
            offset, buffer = match.end(), buffer[match.end() :]
            break
        if len(buffer) > _MAX_HEAD_BYTES:
            return
    else:
        if not buffer and not document.problems:  # its writer died, or found the disk full
            empty = "holds no text once gunzipped" if document.compressed else "is empty"
            document.problems.append(("byte 0", f"the file {empty}"))
            return
        # No event array at all: maybe a small JSON object of some other kind.
        if buffer.lstrip()[:1] == b"{":
            try:
                value = orjson.loads(buffer)
            except orjson.JSONDecodeError:
                where = "decompressed byte" if document.compressed else "byte"
                reason = "the document ends before its traceEvents array"
                document.problems.append((f"{where} {len(buffer)}", reason))
                return
            if isinstance(value, dict):
                document.header.update(value)
        return
    document.found_events = True
    # 2. Cut the array into chunks at event boundaries.
    exhausted = False
    wanted = CHUNK_BYTES  # grown to the cap when no event boundary parses
    where = "decompressed byte" if document.compressed else "byte"
    while True:
        while len(buffer) < wanted and not exhausted:
            more = next(blocks, None)
            if more is None:
                exhausted = True
            else:
                buffer += more
        stripped = buffer.lstrip(_WHITESPACE_AND_COMMAS)
        offset += len(buffer) - len(stripped)
        buffer = stripped
        if buffer.startswith(b"]"):
            _parse_tail(buffer[1:] + b"".join(blocks), document)
            return
        if not exhausted:
            chunk, used = _parse_events_prefix(buffer, parse)
            if chunk is None:  # damage before the last boundaries, or one event larger
                chunk, used = _parse_longest_prefix(buffer, parse)
            if chunk is None and len(buffer) < _MAX_EVENT_BYTES:
                # One event larger than the chunk, or damage: read up to the cap at once.
                wanted = _MAX_EVENT_BYTES
                continue
            wanted = CHUNK_BYTES
            if chunk is None:
                found = _skip_damage(buffer, parse, document, f"{where} {offset}", at_end=False)
                assert found is not None  # only the end of the file has no event after damage
                used, chunk = found
                if chunk is not None:
                    yield chunk
                offset += used
                buffer = buffer[used:]
                continue
            yield chunk
            offset += used
            buffer = buffer[used:]
            continue
        split = _split_array_end(buffer, parse)
        if split is not None:
            chunk, tail = split
            if chunk is not None:
                yield chunk
            _parse_tail(tail, document)
            return
        chunk, used = _parse_events_final(buffer, parse)
        if chunk is not None:
            yield chunk
            offset += used
            buffer = buffer[used:]
            if used:
                continue  # damage after those events now starts the buffer
        found = _skip_damage(buffer, parse, document, f"{where} {offset}", at_end=True)
        if found is None:
            return
        used, chunk = found
        if chunk is not None:
            yield chunk
        offset += used
        buffer = buffer[used:]


def _skip_damage(
    buffer: bytes,
    parse: Callable[[bytes], T],
    document: TraceDocument,
    position: str,
    *,
    at_end: bool,
) -> tuple[int, T | None] | None:
    """Skip the damaged events ``buffer`` starts with, reporting them in ``document`` at
    ``position``: how many bytes the damage and the first whole event after it take, and that
    event parsed (None when the array ends there, or when no whole event follows in a buffer
    that is not the end of the file: all but its end is skipped then). None when ``buffer`` is
    the rest of the file (``at_end``) and no whole event follows: the file ends early."""
    found = _resynchronise(buffer, parse, at_end=at_end)
    if found is None and at_end:
        document.problems.append((position, "the event array ends early"))
        return None
    if found is None:  # damage longer than the cap: skip it but for where the next event may start
        start = end = max(len(buffer) - _KEPT_AFTER_LONG_DAMAGE, 1)
        chunk = None
    else:
        start, end, chunk = found
    reason = f"the event array is damaged ({start} bytes skipped, the events after them kept)"
    document.problems.append((position, reason))
    return end, chunk


def _find_array_end(tail: bytes, document: TraceDocument) -> int | None:
    """Offset in ``tail`` just after the ``]`` closing the event array, parsing what follows.

    ``tail`` is the end of the document. The closing ``]`` is the last one that follows an
    event (``}``) or the opening ``[``, and that is followed by the rest of the top-level
    object (``, "traceName": ... }``) or by nothing (a bare array).
    """
    position = tail.rfind(b"]")
    while position >= 0:
        before = tail[:position].rstrip()
        after = tail[position + 1 :].strip()
        if before.endswith((b"}", b"[")):
            if not after:
                return position + 1
            if after == b"}":
                return position + 1
            if after.startswith(b","):
                try:
                    value = loads_keys(b"{" + after[1:])
                except orjson.JSONDecodeError:
                    value = None
                if isinstance(value, dict):
                    document.header.update(value)
                    return position + 1
        position = tail.rfind(b"]", 0, position)
    return None


def extract_event_array(path: Path, document: TraceDocument, folder: Path) -> list[Path] | None:
    """Copy the trace's event array (``[`` ... ``]``) into ``folder``, streaming, as one or more
    JSON arrays whose concatenation is the event array.

    The header and tail keys go into ``document``. Returns the files written, in order; None
    when the file is damaged or has no event array (the caller should then read the file with
    :func:`iter_event_chunks`). The blocks are written as they are decompressed; only the last
    few megabytes are kept, to find where the array ends and parse the keys after it.
    """
    blocks = utf8_blocks(_decompressed_blocks(path, document))
    buffer = b""
    for block in blocks:
        buffer += block
        start = buffer.lstrip()[:1]
        if start == b"[":
            document.is_array = True
            buffer = buffer[buffer.index(b"[") :]
            break
        if start and start != b"{":
            return None
        match = _EVENTS_KEY.search(buffer)
        if match:
            _parse_header(buffer[: match.start()], document)
            buffer = buffer[match.end() - 1 :]
            break
        if len(buffer) > _MAX_HEAD_BYTES:
            return None
    else:
        return None
    document.found_events = True
    recent: deque[bytes] = deque()  # the last blocks written, at least _TAIL_BYTES of them
    recent_bytes = 0
    uncounted = b""  # text after the last "ph" key seen, whose phase is counted with the next block
    with _ArrayParts(folder) as parts:
        for block in _chain(buffer, blocks):
            parts.write(block)
            recent.append(block)
            recent_bytes += len(block)
            while recent_bytes - len(recent[0]) >= _TAIL_BYTES:
                recent_bytes -= len(recent.popleft())
            text = uncounted + block
            cut = _last_phase_key(text)
            document.phases.update(_PHASE.findall(text, 0, cut))
            uncounted = text[cut:] if cut else text[-len(_PHASE_KEY) :]
        document.phases.update(_PHASE.findall(uncounted))
        if document.problems:
            return None
        tail = b"".join(recent)
        end = _find_array_end(tail, document)
        if end is None:
            return None
        if not parts.end_at(parts.written - len(tail) + end):
            return None
    return parts.paths


class _ArrayParts:
    """Files that together hold one JSON array, each a JSON array of its own.

    Written as a stream; once a part holds :data:`PART_BYTES`, the next top-level event
    boundary in a block ends it (``]`` closes it, ``[`` opens the next). :meth:`end_at` cuts the
    stream at an offset in the last part (after the array's ``]``).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.paths: list[Path] = []
        self.written = 0  # bytes of the stream written, over all parts
        self._part_start = 0  # the stream offset the current part starts at
        self._file: Any = None
        self._opening = b""  # what the current part holds before its stream bytes

    def __enter__(self) -> _ArrayParts:
        self._open(b"")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._file.close()

    def write(self, block: bytes) -> None:
        while True:
            room = PART_BYTES - (self.written - self._part_start)
            cut = block.find(_TOP_LEVEL_SEPARATOR, max(room, 0)) if room < len(block) else -1
            if cut < 0:
                break
            self._file.write(block[: cut + 1] + b"]")
            self.written += cut + 2  # the "}" and the "," (not copied)
            self._file.close()
            self._open(b"[")
            block = block[cut + 2 :]
        self._file.write(block)
        self.written += len(block)

    def end_at(self, offset: int) -> bool:
        """Drop what follows stream ``offset``; False when that is not in the last part (a
        boundary was taken for one after the array's end)."""
        if offset < self._part_start:
            return False
        self._file.truncate(len(self._opening) + offset - self._part_start)
        return True

    def _open(self, opening: bytes) -> None:
        path = self.folder / f"events-{len(self.paths):04d}.json"
        self._file = open(path, "wb")  # closed when the next part opens, or by __exit__
        self.paths.append(path)
        self._part_start = self.written
        self._opening = opening
        self._file.write(opening)


def _last_phase_key(text: bytes) -> int:
    """Where the last ``"ph"`` key of ``text`` starts (0 when there is none).

    Every phase match starts at a ``"ph"`` key, so the matches before that position end before
    it and can be counted now, while the one it starts may continue in the next block. A
    ``"ph"`` that follows a colon is a value, not a key, and is passed over.
    """
    position = text.rfind(_PHASE_KEY)
    while position > 0 and text[max(0, position - 256) : position].rstrip().endswith(b":"):
        position = text.rfind(_PHASE_KEY, 0, position)
    return max(position, 0)


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest
