"""A job's raw files: which of them hold data, and how each one's rows are read.

:func:`classify` sorts the listing of a job's profiler output into the readers that take its
files: system metrics, framework events (``pevents``), Horovod timelines, TensorFlow profiler
traces and PyTorch profiler (Kineto) traces. A :class:`RawReading` reads the files that one
refresh converts, in order:

* the local SageMaker system and framework event files many at a time, in DuckDB scans
  (:mod:`stepscope.store.sagemaker_scan`), :data:`SCAN_BATCH_BYTES` of raw JSON at a time so
  that memory stays bounded, the next batch scanned in a worker thread while one is written
  (DuckDB's parse runs outside the GIL);
* the Kineto traces in worker threads, ahead of their turn (:mod:`stepscope.store.read_ahead`);
* the other files, and those a scan leaves out, by their per-file readers.
"""

from __future__ import annotations

import importlib
import io
import re
from collections.abc import Callable, Collection, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from stepscope.store import layout
from stepscope.store.filesystem import FileInfo, LocalFiles, SourceFiles
from stepscope.store.horovod import read_horovod_timeline
from stepscope.store.read_ahead import ReadAhead, default_depth
from stepscope.store.sagemaker import (
    BATCH_ROWS,
    FRAMEWORK_SOURCES,
    node_and_rank,
    parse_pevents_name,
    read_pevents_file,
)
from stepscope.store.sagemaker_scan import ScanFile, scan_pevents_files, scan_system_files
from stepscope.store.sagemaker_system import read_system_file
from stepscope.store.tfprofiler import (
    TfProfileMarker,
    parse_tf_metadata_name,
    read_tf_profiler_trace,
)

__all__ = [
    "KINETO_SUFFIXES",
    "SCAN_BATCH_BYTES",
    "RawFile",
    "RawReading",
    "classify",
    "is_trace_head",
    "kineto",
]

#: File name endings of PyTorch profiler traces.
KINETO_SUFFIXES = (".json", ".json.gz")
#: Raw JSON converted per DuckDB scan: the rows of a scan are held until they are written, and
#: the next scan runs meanwhile (two at most). Smaller batches hold less and cost more scans: at
#: 8 MB a backlog converts in about 60 % of the wall time of one 16 MB scan at a time, with
#: about 10 % more CPU and 15 % more peak memory (docs/benchmarks.md).
SCAN_BATCH_BYTES = 8 * 1024 * 1024
#: the readers whose local files are converted by DuckDB scans, and their scan
_SCANNED = {"system": scan_system_files, "pevents": scan_pevents_files}
_TF_TRACE_SUFFIX = ".trace.json.gz"
_RAW_HOROVOD_NAME = re.compile(r"horovod_timeline.*\.json$")


def kineto() -> Any:
    """The Kineto reader module, imported when a Kineto trace is met."""
    return importlib.import_module("stepscope.store.kineto")


@dataclass(frozen=True)
class RawFile:
    """A raw file to convert, with what its reader needs."""

    info: FileInfo
    reader: str  # system | pevents | horovod | tfprofiler | kineto
    node: str = ""
    rank: int = -1
    source: str = ""
    marker: TfProfileMarker | None = None
    #: a timeline file its writer left open when it died: read as it is, a torn last record
    #: being no damage
    left_open: bool = False


def classify(
    files: SourceFiles,
    listing: list[FileInfo],
    *,
    prefix: str,
    traces_only: bool,
    known_trace: Callable[[str], bool],
    dead_writers: Collection[tuple[str, int]] = (),
) -> list[RawFile]:
    """Which of ``listing``'s files hold data, and how each is read.

    :param prefix: where the profiler output starts in the job (``"profiler-output/"`` or "").
    :param traces_only: the job is a folder of Kineto traces (or one trace: a listing of one
        file named ""); JSON files that are not traces are left out.
    :param known_trace: whether a path was converted as a Kineto trace before (no need to open
        it again to tell).
    :param dead_writers: ``(node_id, pid)`` of the ranks known to have died: the open timeline
        files (``framework/<node_id>_<suffix>.<pid>.tmp``) they left are read; other ``.tmp``
        files are being written, and published by a rename when complete.
    """
    if traces_only:
        return [
            RawFile(info, "kineto")
            for info in listing
            if not info.path
            or (info.path.endswith(KINETO_SUFFIXES) and _is_trace(files, info, known_trace))
        ]
    markers: dict[str, TfProfileMarker] = {}
    for info in listing:
        name = info.path.rsplit("/", 1)[-1]
        if name.endswith(".metadata") and "/detailed_profiling/" in info.path:
            marker = parse_tf_metadata_name(name)
            if marker is not None:
                markers[info.path.rsplit("/", 1)[0]] = marker
    raw: list[RawFile] = []
    for info in listing:
        rel = info.path[len(prefix) :]
        name = rel.rsplit("/", 1)[-1]
        if name.endswith(".tmp") or name.startswith("."):
            left = _left_open(rel, name, dead_writers)
            if left is not None:
                raw.append(RawFile(info, "pevents", *left, left_open=True))
            continue
        if rel.startswith("system/"):
            system = layout.parse_system_file_name(name)
            if system is not None:
                raw.append(RawFile(info, "system", node=system.node))
        elif rel.startswith("framework/pevents/"):
            pevents = parse_pevents_name(name)
            if pevents is not None:
                raw.append(
                    RawFile(info, "pevents", pevents.node, pevents.rank, source=pevents.source)
                )
        elif "/detailed_profiling/" in rel and name.endswith(_TF_TRACE_SUFFIX):
            if "/pytorch/" in rel:
                raw.append(_detailed_trace(info, name))
            else:
                step_folder = info.path.split("/plugins/profile/", 1)[0]
                raw.append(RawFile(info, "tfprofiler", marker=markers.get(step_folder)))
        elif "/detailed_profiling/" in rel and "/pytorch/" in rel:
            if name.endswith(KINETO_SUFFIXES):
                raw.append(_detailed_trace(info, name))
        elif rel.startswith("framework/") and _RAW_HOROVOD_NAME.search(name):
            raw.append(RawFile(info, "horovod"))
    return raw


def _left_open(
    rel: str, name: str, dead_writers: Collection[tuple[str, int]]
) -> tuple[str, int, str] | None:
    """``(node, rank, source)`` of a timeline file a dead writer left open, else None."""
    match = layout.FRAMEWORK_TMP_RE.match(name) if rel == f"framework/{name}" else None
    if match is None or match["pid"] is None:
        return None
    if (match["node_id"], int(match["pid"])) not in dead_writers:
        return None
    node, rank = node_and_rank(match["node_id"])
    return node, rank, FRAMEWORK_SOURCES[match["suffix"]]


def _is_trace(files: SourceFiles, info: FileInfo, known_trace: Callable[[str], bool]) -> bool:
    """Whether a JSON file of a folder of traces is a Kineto trace (other JSON is ignored). An
    empty one is taken for a rank's trace that its writer never wrote, so that reading it says
    so."""
    rel = info.path
    if known_trace(rel) or info.size_bytes == 0:
        return True
    return is_trace_head(files, rel)


def is_trace_head(files: SourceFiles, rel: str) -> bool:
    """Whether the file ``rel`` starts like a Kineto trace; only its first bytes are read (a
    remote file is not downloaded for it, at each refresh for a JSON file of another kind)."""
    try:
        head = files.read_head(rel, kineto().SNIFF_BYTES)
    except OSError:  # a folder named like a trace, or a file gone since it was listed
        return False
    return bool(kineto().is_kineto_trace(io.BytesIO(head)))


def _detailed_trace(info: FileInfo, name: str) -> RawFile:
    """A Kineto trace of a job's detailed profiling, its node and rank from its file name."""
    detailed = layout.DETAILED_TRACE_RE.match(name)
    if detailed is None:
        return RawFile(info, "kineto")
    node, rank = node_and_rank(detailed["node_id"])
    return RawFile(info, "kineto", node=node, rank=rank)


class RawReading:
    """Reading the raw files one refresh converts (see the module docstring).

    Use it as a context manager; iterating gives each pending file in order with its rows when
    a scan converted it (else None), and :meth:`batches` its record batches.

    :param files: the job's files.
    :param pending: the files to read, in order.
    """

    def __init__(self, files: SourceFiles, pending: list[RawFile]) -> None:
        self._files = files
        self._pending = pending
        traces = {raw.info.path: raw for raw in pending if raw.reader == "kineto"}
        self._traces = ReadAhead(traces, lambda rel: self._read_trace(traces[rel]), default_depth())
        self._duckdb: Any = None  # one connection for the scans of one refresh

    def __enter__(self) -> RawReading:
        self._traces.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._traces.__exit__(*exc_info)
        if self._duckdb is not None:
            self._duckdb.close()
            self._duckdb = None

    def __iter__(self) -> Iterator[tuple[RawFile, pa.Table | None]]:
        if not isinstance(self._files, LocalFiles):
            yield from ((raw, None) for raw in self._pending)
            return
        batches: list[list[RawFile]] = []
        size_bytes = SCAN_BATCH_BYTES  # the first file starts a batch
        for raw in self._pending:
            if size_bytes >= SCAN_BATCH_BYTES:
                batches.append([])
                size_bytes = 0
            batches[-1].append(raw)
            size_bytes += raw.info.size_bytes
        if any(raw.reader in _SCANNED for raw in self._pending):
            self._connection()  # made here: the scans below may run in a worker thread
        # a backlog (a job read for the first time) scans its next batch while this one is
        # written, given a second core; a refresh of a job being written has one batch
        depth = min(2, default_depth())
        ahead = ReadAhead(range(len(batches)), lambda i: self._scan_batch(batches[i]), depth)
        with ahead:
            for index, batch in enumerate(batches):
                scanned = ahead.take(index)
                for i, raw in enumerate(batch):
                    yield raw, scanned.get(i)

    @contextmanager
    def batches(
        self,
        raw: RawFile,
        display: str,
        extra: dict[str, Any],
        scanned: pa.Table | None,
        *,
        growing: bool = False,
    ) -> Iterator[Iterator[pa.RecordBatch]]:
        """The record batches of one raw file (of ``scanned`` when a scan converted it), with
        the file open while they are consumed.

        :param display: the file's name in warnings.
        :param extra: gets what the manifest keeps besides the rows (a trace's ``kineto``
            metadata).
        :param growing: the file is still being written (see
            :func:`~stepscope.store.sagemaker_system.read_system_file`).
        """
        if scanned is not None:
            yield iter(scanned.to_batches(max_chunksize=BATCH_ROWS))
            return
        rel = raw.info.path
        if raw.reader == "kineto":
            trace = self._traces.take(rel)
            extra["kineto"] = trace.metadata
            yield trace.batches()
            return
        if raw.reader == "tfprofiler":
            data = self._files.read_bytes(rel)
            yield read_tf_profiler_trace(data, path=display, marker=raw.marker)
            return
        with self._files.open(rel) as stream:
            if raw.reader == "system":
                yield read_system_file(stream, path=display, node=raw.node, growing=growing)
            elif raw.reader == "pevents":
                yield read_pevents_file(
                    stream,
                    path=display,
                    source=raw.source,
                    node=raw.node,
                    rank=raw.rank,
                    growing=growing or raw.left_open,
                )
            else:
                yield read_horovod_timeline(stream, path=display, ends_at_us=raw.info.mtime * 1e6)

    def _scan_batch(self, batch: list[RawFile]) -> dict[int, pa.Table | None]:
        """The rows of the batch's files a scan converted, by position in ``batch``; runs in a
        worker thread, on a connection of its own to the refresh's database."""
        assert isinstance(self._files, LocalFiles)
        root = self._files.root
        scanned: dict[int, pa.Table | None] = {}
        if not any(raw.reader in _SCANNED for raw in batch):
            return scanned
        con = self._connection().cursor()
        try:
            for reader, scan in _SCANNED.items():
                # a file left open has no closing "]" for a scan: its own reader reads it
                members = [
                    i for i, raw in enumerate(batch) if raw.reader == reader and not raw.left_open
                ]
                if members:
                    files = [
                        ScanFile(
                            str(root / batch[i].info.path),
                            batch[i].node,
                            batch[i].source,
                            batch[i].rank,
                        )
                        for i in members
                    ]
                    scanned.update(zip(members, scan(con, files), strict=True))
        finally:
            con.close()
        return scanned

    def _connection(self) -> Any:
        if self._duckdb is None:
            import duckdb

            self._duckdb = duckdb.connect()
            # one thread per scan: on a busy machine more only add CPU time (see sagemaker_scan)
            self._duckdb.execute("SET threads = 1")
        return self._duckdb

    def _read_trace(self, raw: RawFile) -> Any:
        """One Kineto trace, parsed whole (a remote one through a local copy); thread-safe."""
        rel = raw.info.path
        name = None  # a local file is named by its path
        if isinstance(self._files, LocalFiles):
            local_file: AbstractContextManager[Path] = nullcontext(self._files.root / rel)
        else:
            local_file = self._files.local_path(rel)
            name = f"{self._files.url}/{rel}" if rel else self._files.url
        with local_file as local:
            return kineto().read_kineto_trace(
                local, rank_hint=raw.rank if raw.rank >= 0 else None, node=raw.node, name=name
            )
