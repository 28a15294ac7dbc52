"""One profiled job, whatever wrote it: :func:`open_job` and :class:`JobData`.

``open_job`` recognises

* a **stepscope job folder**: ``job.json`` and ``profiler-output/``;
* a **SageMaker Debugger profiler output** (``system/`` and/or ``framework/`` at the top), or a
  folder holding one as ``profiler-output/`` — on the local disk or at ``s3://bucket/prefix``;
* a **PyTorch profiler (Kineto) trace** file, or a folder of them.

:class:`JobData` turns the raw files into the columnar cache (:mod:`stepscope.store.cache`) on
:meth:`JobData.refresh`, reading only what is new, and serves them as the DuckDB views
``system`` and ``events``. Analyses, rules, the report and the UI read a job only through it.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any, Literal, TypeVar

import orjson
import pyarrow as pa

from stepscope.errors import (
    ConfigError,
    CorruptFileError,
    JobNotFoundError,
    StorageAccessError,
    StoreError,
    UnsupportedFormatError,
)
from stepscope.store import layout
from stepscope.store.cache import KINDS, ColumnarCache, cache_dir_for
from stepscope.store.filesystem import FileInfo, LocalFiles, RemoteFiles, SourceFiles, source_files
from stepscope.store.job_status import (
    COMPLETED,
    Status,
    dead_writers,
    job_status,
    rank_records,
)
from stepscope.store.raw_files import (
    KINETO_SUFFIXES,
    RawFile,
    RawReading,
    classify,
    is_trace_head,
)

__all__ = ["JobData", "JobKind", "holds_job", "open_job"]

logger = logging.getLogger(__name__)

JobKind = Literal["stepscope", "sagemaker", "kineto"]
_T = TypeVar("_T")

_RECOGNISED = (
    "a stepscope job folder (job.json and profiler-output/), a SageMaker Debugger profiler "
    "output folder (system/ and/or framework/, or a folder holding profiler-output/), local or "
    "s3://, a PyTorch profiler (Kineto) trace file (.json, .json.gz) or a folder of them"
)


def open_job(
    path: str | os.PathLike[str],
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    storage_options: dict[str, Any] | None = None,
    confined: bool = False,
) -> JobData:
    """Open a profiled job for reading (nothing is read until :meth:`JobData.refresh`).

    :param path: a stepscope job folder, a SageMaker Debugger profiler output (local or
        ``s3://bucket/prefix``), a Kineto trace file or a folder of Kineto traces.
    :param cache_dir: where the columnar cache goes; default ``<job>/.stepscope/cache`` when the
        job folder is writable, else ``$STEPSCOPE_CACHE_DIR/<hash>`` or
        ``~/.cache/stepscope/<hash>``.
    :param storage_options: fsspec options for remote paths, e.g.
        ``{"client_kwargs": {"endpoint_url": ...}}`` for an S3-compatible store.
    :param confined: read no file of a local job through a symbolic link leading out of
        ``path`` (each is skipped with a warning), nor write its cache through any link (the user
        cache is used instead), as the Profiler UI opens jobs; default ``False``: links are
        followed.
    :raises JobNotFoundError: when nothing exists at ``path``.
    :raises UnsupportedFormatError: when it exists but holds none of the recognised layouts.
    :raises CorruptFileError: when it is an empty file.
    """
    text = os.fspath(path)
    files = source_files(text, storage_options, confined=confined)
    if not files.exists():
        raise JobNotFoundError(text, files.missing_detail())
    single_file = files.is_file("")
    if single_file:
        if files.file_info("").size_bytes == 0:
            raise CorruptFileError(text, "byte 0", "the file is empty")
        if not _is_kineto_file(files, text):
            raise UnsupportedFormatError(text, _RECOGNISED)
        kind: JobKind = "kineto"
        prefix = ""
    else:
        kind, prefix = _detect(files, text)
    cache_root = Path(cache_dir) if cache_dir is not None else None
    if cache_root is None:
        cache_root = cache_dir_for(files, single_file=single_file)
    cache = ColumnarCache(cache_root, refuse_links=confined)
    return JobData(files, kind, prefix, cache, single_file=single_file)


def holds_job(path: str | os.PathLike[str]) -> bool:
    """Whether the local folder ``path`` holds what :func:`open_job` reads as a job folder: a
    stepscope job, SageMaker profiler output or PyTorch profiler traces."""
    files = LocalFiles(path)
    if not files.exists() or files.is_file(""):
        return False
    try:
        _detect(files, os.fspath(path))
    except UnsupportedFormatError:
        return False
    return True


def _is_kineto_file(files: SourceFiles, text: str) -> bool:
    """Whether the file at ``files``' root (named ``text``) is a Kineto trace."""
    return text.endswith(KINETO_SUFFIXES) and is_trace_head(files, "")


def _detect(files: SourceFiles, text: str) -> tuple[JobKind, str]:
    """The kind of folder and the prefix of its profiler output inside it."""
    names = set(files.list_dir())
    if "job.json" in names:  # profiler-output/ may not exist yet while the job starts
        return "stepscope", "profiler-output/"
    if names & {"system", "framework"}:
        return "sagemaker", ""
    if "profiler-output" in names:
        return "sagemaker", "profiler-output/"
    candidates = [n for n in names if n.endswith(KINETO_SUFFIXES)]
    if any(is_trace_head(files, name) for name in sorted(candidates)):
        return "kineto", ""
    raise UnsupportedFormatError(text, _RECOGNISED)


class JobData:
    """A job's data: the raw files, their columnar cache, and what is known about the job.

    Built by :func:`open_job`. Reading is explicit and incremental: :meth:`refresh` converts the
    raw files that are new or changed since the last refresh (by any process) and returns whether
    anything was added; :meth:`connect` refreshes once if this object never did.

    :ivar path: the job's path (a ``Path``, or the URL string for remote jobs).
    :ivar name: job.json's name, else the folder name (a ``profiler-output`` folder's parent's,
        a lone trace's :func:`~stepscope.store.layout.trace_name`).
    :ivar kind: ``"stepscope"``, ``"sagemaker"`` or ``"kineto"``.
    :ivar cache_dir: the cache folder in use.
    :ivar last_refresh_files: the raw files (relative paths) the last refresh converted.
    """

    def __init__(
        self,
        files: SourceFiles,
        kind: JobKind,
        prefix: str,
        cache: ColumnarCache,
        *,
        single_file: bool = False,
    ) -> None:
        self._files = files
        self._prefix = prefix
        self._cache = cache
        self._single_file = single_file
        self._refreshed = False
        # the database behind connect(), and the segments its views read
        self._shared: Any = None
        self._shared_segments: tuple[tuple[str, Path, int, int], ...] = ()
        self._shared_lock = threading.Lock()
        self._refresh_lock = threading.Lock()  # one refresh at a time per object (UI threads)
        self.kind: JobKind = kind
        self.path: Path | str = files.root if isinstance(files, LocalFiles) else files.url
        self.cache_dir = cache.root
        self.last_refresh_files: list[str] = []
        # the rows the cache held when this object last looked: another process may add some
        self._rows_seen = cache.rows_key()
        job = self._job_json()
        default_name = PurePosixPath(str(self.path).rstrip("/")).name
        if single_file and kind == "kineto":
            default_name = layout.trace_name(default_name)
        if kind == "sagemaker":
            default_name = layout.output_job_name(self.path)
        self.name: str = str(job.get("name") or default_name) if job else default_name

    def __repr__(self) -> str:
        return f"JobData(path={str(self.path)!r}, kind={self.kind!r})"

    # ------------------------------------------------------------------ reading

    def refresh(self) -> bool:
        """Convert new or changed raw files into the cache; True when rows were added or removed
        since this object last looked, whichever process converted them (the live rule engine,
        the UI and a notebook refresh one cache).

        Open ``.tmp`` files are not read while they are written; those a rank left open when
        its process ended (``kill -9``, the OOM killer; see
        :func:`~stepscope.store.job_status.dead_writers`) are, up to their last whole record. A
        raw file that cannot be read (damaged beyond its records, or not the format its name
        says) is logged and remembered, so it is retried only when it changes; the first
        refresh of each later ``JobData`` (another command, another process) logs it again.
        Closed files go into their stream's merged segment, and the small segments of each
        stream are compacted (see :mod:`stepscope.store.cache`); a refresh that finds nothing
        new only lists the files and reads the manifest. Local SageMaker system and framework
        files are converted many at a time by DuckDB scans
        (:mod:`stepscope.store.sagemaker_scan`), with the rows of the per-file readers.

        :raises JobNotFoundError: when the local job folder or trace was removed.
        """
        self._check_present()
        first = not self._refreshed
        self._refreshed = True
        read: list[str] = []
        with self._refresh_lock, self._cache.locked():
            self._cache.load()
            listing = self._list_files()
            ended = self._ended_in(listing)
            raw_files = classify(
                self._files,
                listing,
                prefix=self._prefix,
                traces_only=self.kind == "kineto",
                known_trace=lambda rel: self._cache.files.get(rel, {}).get("kineto") is not None,
                dead_writers=self._dead_writers(listing),
            )
            pending = [raw for raw in raw_files if not self._cache.is_current(raw.info)]
            with self._cache.merged_writes(), RawReading(self._files, pending) as reading:
                for raw, scanned in reading:
                    read.append(raw.info.path)
                    # a closed file goes straight into its stream's merged segment; a Kineto
                    # trace is a stream of its own, and too large to hold until it is read whole
                    closed = self._cache.is_closed(raw.info.mtime, ended=ended)
                    merge = raw.reader != "kineto" and closed
                    self._convert(raw, reading, merge=merge, growing=not closed, scanned=scanned)
            present = {raw.info.path for raw in raw_files}
            gone = [p for p in self._cache.files if p not in present]
            for path in gone:
                self._cache.drop(path)
            if first:
                self._warn_unreadable(skip=read)
            merged = self._cache.compact(ended=ended)
            if read or gone or merged or self._cache.expired_retirements():
                self._cache.save()
            rows = self._cache.rows_key()
        changed, self._rows_seen = rows != self._rows_seen, rows
        self.last_refresh_files = read
        return changed

    def _check_present(self) -> None:
        """Raise :class:`JobNotFoundError` when the local job was removed: checked before the
        cache lock, which would make the cache folder, and so the job's folder, again."""
        if isinstance(self._files, LocalFiles) and not self._files.exists():
            raise JobNotFoundError(str(self.path), "It was removed after it was opened.")

    def connect(self, into: Any = None) -> Any:
        """A DuckDB connection with the views ``system`` (SYSTEM_SCHEMA) and ``events``.

        Refreshes first if this object never did. Each call returns a new connection over the
        segments as they are now; call :meth:`refresh` and ``connect()`` again to see new data.
        The connections are cursors of one in-memory database this object keeps, whose views
        are renewed when the segments changed: opening a DuckDB connection costs 15-80 ms,
        more than most questions asked of a job, and a cursor microseconds. Cursors can be
        used from different threads, and closing one leaves the others open.

        :param into: a connection from :meth:`connect_own`, to get it back with its views over
            the segments as they are now.
        """
        if into is not None:
            return self._from_cache(lambda: self._cache.connect(into))
        return self._from_cache(self._shared_cursor)

    def connect_own(self) -> Any:
        """A connection with the two views, of its own rather than a cursor of the shared
        database: for a caller that changes its settings, or that polls and renews its views
        with ``connect(into=...)`` (it keeps its Parquet metadata cache), like the live rule
        engine."""
        return self._from_cache(lambda: self._cache.connect())

    def _shared_cursor(self) -> Any:
        with self._shared_lock:
            segments = self._segment_files()
            if self._shared is None or segments != self._shared_segments:
                self._shared = self._cache.connect(self._shared)
                self._shared_segments = segments
            return self._shared.cursor()

    def _segment_files(self) -> tuple[tuple[str, Path, int, int], ...]:
        """Each segment the views read, with its size and modification time (-1 when it is
        gone): a segment replaced or damaged since the views were made renews them, which
        checks it (see :meth:`_from_cache`)."""
        files = []
        for kind in KINDS:
            for path in self._cache.segments(kind):
                try:
                    stat = path.stat()
                    files.append((kind, path, stat.st_size, stat.st_mtime_ns))
                except OSError:
                    files.append((kind, path, -1, -1))
        return tuple(files)

    def table(self, kind: str) -> pa.Table:
        """Every row of the view ``kind`` (``"system"`` or ``"events"``) as one Arrow table.

        The rows and order of ``SELECT * FROM <kind>`` on :meth:`connect`, read straight from
        the cache's Parquet segments: for a whole table this needs no DuckDB (nor its import),
        so it is the cheapest way to get a job into pandas
        (``job.table("system").to_pandas(types_mapper=pd.ArrowDtype)`` copies nothing).
        Refreshes first if this object never did.

        :raises ConfigError: when ``kind`` is not one of the two views.
        """
        if kind not in KINDS:
            raise ConfigError("JobData.table.kind", kind, "'system' or 'events'")
        return self._from_cache(lambda: self._cache.read_table(kind))

    def _from_cache(self, read: Callable[[], _T]) -> _T:
        """``read()`` from the cache, refreshed first if this object never did; when a segment
        is missing or damaged, its raw files are read again and ``read`` is retried once."""
        if not self._refreshed:
            self.refresh()
        try:
            return read()
        except CorruptFileError as exc:
            self._check_present()  # its segments went with it
            with self._cache.locked():
                self._cache.load()
                forgotten = self._cache.forget_unreadable()
                self._cache.save()
            if forgotten:
                logger.warning(
                    "%s; re-reading %d raw file(s) whose cache segment was missing or damaged.",
                    exc,
                    len(forgotten),
                )
            else:  # nothing is damaged: another reader replaced the segments this object knew
                logger.debug("%s; the cache's segments were replaced since the last refresh", exc)
            self.refresh()
            return read()

    def time_spans(self, kind: str) -> list[tuple[str, float, float]]:
        """``(stream, first_us, last_us)`` of each raw file whose rows the ``kind`` view holds,
        from the manifest: the stream it belongs to (for events its source, node and rank, for
        system samples its node), its earliest time and its latest (for events, the earliest
        start and the latest end).

        They bound what a time range needs: every event that ends at or after ``t`` and starts
        before ``u`` lies in a file with ``last_us >= t`` and ``first_us < u``, so it starts no
        earlier than the smallest ``first_us`` of those files. A filter on the start lets the
        Parquet statistics skip the older row groups, which a filter on the end cannot. And the
        newest record of each stream is the largest ``last_us`` of its files, without a query.
        """
        return [
            (
                str(entry["segment"]).rsplit("/", 1)[0],
                float(entry["first_us"]),
                float(entry["last_us"]),
            )
            for entry in self._cache.files.values()
            if entry.get("kind") == kind
            and entry.get("segment")
            and entry.get("first_us") is not None
            and entry.get("last_us") is not None
        ]

    def python_stats(self) -> list[Any]:
        """The python-profiler folders of the job, their names parsed into records."""
        module = importlib.import_module("stepscope.store.python_stats")
        if self.kind == "kineto":
            return []
        if isinstance(self._files, RemoteFiles):
            root = f"{self._files.fsspec_root}/{self._prefix}".rstrip("/")
            with self._files.requests():
                return list(module.list_python_stats(root, fs=self._files.fs))
        return list(module.list_python_stats(self._files.root / self._prefix))

    @property
    def storage_options(self) -> dict[str, Any] | None:
        """The fsspec options a remote job was opened with (its endpoint, credentials...), for
        reading its other files in the same place; None for a local job."""
        return self._files.storage_options if isinstance(self._files, RemoteFiles) else None

    @property
    def metadata(self) -> dict[str, Any]:
        """What is known about the job now (cheap: the manifest and a few small files).

        Every job.json field (``command``, ``start_time_us``, ``hardware``...) when there is one,
        and these, always: ``name``, ``kind``, ``path``, ``job`` (job.json as read, or None),
        ``status`` (see :mod:`stepscope.store.job_status`), ``status_reason`` (why the status
        is not the one recorded, else None; a job.json without ``end_time_us`` then gets its
        last data file's last write), ``ended``, ``nodes``, ``hosts`` (node -> host
        name: job.json's, else the one its ranks' files name), ``ranks`` (rank -> ``node``,
        ``node_id``, ``clock_offset_us``, ``ended`` and the rank file's or job.json's fields,
        plus ``kineto`` metadata when the rank has a Kineto trace), ``first_timestamp_us`` and
        ``last_timestamp_us`` (None without data).
        """
        self._cache.load()
        job = self._job_json()
        ended = self._has_ended()
        entries = [e for e in self._cache.files.values() if e.get("rows")]
        nodes: set[str] = set(job.get("nodes") or []) if job else set()
        ranks: dict[int, dict[str, Any]] = {}
        for key, info in ((job or {}).get("ranks") or {}).items():
            ranks[int(key)] = dict(info)
        for entry in entries:
            nodes.update(entry.get("nodes") or [])
            for rank in entry.get("ranks") or []:
                if rank >= 0:
                    ranks.setdefault(rank, {})
        rank_files = list(rank_records(self._files, self._prefix))
        for rank_info in rank_files:
            rank = int(rank_info.get("rank", -1))
            if rank >= 0:
                ranks.setdefault(rank, {}).update(rank_info)
        for entry in self._cache.files.values():
            kineto = entry.get("kineto")
            if kineto is not None:
                rank = int(kineto.get("rank") if kineto.get("rank") is not None else -1)
                ranks.setdefault(rank, {})["kineto"] = kineto
        # output without job.json (stepscope.profile() on several nodes): each rank names its host
        hosts = {
            str(rank_info["node"]): str(rank_info["hostname"])
            for rank_info in rank_files
            if rank_info.get("node") and rank_info.get("hostname")
        }
        firsts = [e["first_us"] for e in entries if e.get("first_us") is not None]
        lasts = [e["last_us"] for e in entries if e.get("last_us") is not None]
        end: dict[str, float] = {}
        if self.kind == "kineto":
            status = Status(COMPLETED)
        else:
            written = max(
                (e["mtime"] for e in self._cache.files.values() if e.get("mtime")), default=None
            )
            status = job_status(job, ended=ended, ranks=rank_files, last_write_s=written)
            if job and job.get("end_time_us") is None and status.reason and written:
                end["end_time_us"] = written * 1e6  # ended without recording it: its last write
        return {
            **(job or {}),
            **end,
            "name": self.name,
            "kind": self.kind,
            "path": str(self.path),
            "job": job,
            "status": status.status,
            "status_reason": status.reason,
            "ended": ended or self.kind == "kineto",
            "nodes": sorted(n for n in nodes if n),
            "hosts": {**hosts, **((job or {}).get("hosts") or {})},
            "ranks": dict(sorted(ranks.items())),
            "first_timestamp_us": min(firsts) if firsts else None,
            "last_timestamp_us": max(lasts) if lasts else None,
        }

    # ------------------------------------------------------------------ internals

    def _job_json(self) -> dict[str, Any] | None:
        if self.kind != "stepscope":
            return None
        try:
            document = orjson.loads(self._files.read_bytes("job.json"))
        except (OSError, orjson.JSONDecodeError) as exc:
            logger.warning("Cannot read job.json of %s: %s", self.path, exc)
            return None
        return document if isinstance(document, dict) else None

    def _dead_writers(self, listing: list[FileInfo]) -> set[tuple[str, int]]:
        """The ranks known to have died, when open timeline files are listed (see
        :func:`~stepscope.store.job_status.dead_writers`): what they wrote is read."""
        framework = f"{self._prefix}framework/"
        if self.kind == "kineto" or not any(
            info.path.startswith(framework) and info.path.endswith(".tmp") for info in listing
        ):
            return set()
        return dead_writers(rank_records(self._files, self._prefix))

    def _has_ended(self) -> bool:
        marker = layout.job_end_marker_path("").name
        return any(
            self._files.is_file(f"{self._prefix}{where}{marker}")
            for where in ("", "system/", "framework/")
        )

    def _ended_in(self, listing: list[FileInfo]) -> bool:
        """Whether the job has ended, from a refresh's listing (no more requests)."""
        if self.kind == "kineto":
            return True
        marker = layout.job_end_marker_path("").name
        ends = {f"{self._prefix}{where}{marker}" for where in ("", "system/", "framework/")}
        return any(info.path in ends for info in listing)

    def _list_files(self) -> list[FileInfo]:
        if self._single_file:
            return [self._files.file_info("")]
        return self._files.walk(self._prefix.rstrip("/"))

    def _display(self, rel: str) -> str:
        """How messages name the raw file ``rel``."""
        return f"{self.path}/{rel}" if rel else str(self.path)

    def _warn_unreadable(self, *, skip: list[str]) -> None:
        """Log the raw files that an earlier refresh, maybe of another process, found unreadable
        (but those in ``skip``, read again just now): they stay out of the job until they
        change, and the user of this object was not told yet."""
        for rel, entry in self._cache.files.items():
            if entry.get("error") and rel not in skip:
                logger.warning(
                    "Skipped %s: %s (found when it was first read; it is read again once it "
                    "changes)",
                    self._display(rel),
                    entry["error"],
                )

    def _convert(
        self,
        raw: RawFile,
        reading: RawReading,
        *,
        merge: bool,
        growing: bool,
        scanned: pa.Table | None,
    ) -> None:
        """Read one raw file into a segment (its stream's merged segment when ``merge``).

        :param growing: the file is still being written: its unfinished last record is no
            damage.
        :param scanned: the file's rows when a scan converted it already.
        """
        rel = raw.info.path
        display = self._display(rel)
        kind = "system" if raw.reader == "system" else "events"
        extra: dict[str, Any] = {}
        try:
            with reading.batches(raw, display, extra, scanned, growing=growing) as batches:
                segment, stats = self._cache.write_segment(kind, rel, batches, merge=merge)
        except StorageAccessError:
            raise  # the store, not this file: nothing to remember about it
        except StoreError as exc:
            logger.warning("Skipped %s: %s", display, exc)
            self._cache.record(raw.info, None, {"kind": kind, "rows": 0, "error": str(exc)})
            return
        except OSError as exc:  # vanished between listing and reading, or the cache is full
            logger.warning("Cannot convert %s now (%s); it will be retried.", display, exc)
            return
        self._cache.record(raw.info, segment, {**stats, **extra})
