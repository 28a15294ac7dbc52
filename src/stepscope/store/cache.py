"""The columnar cache of one job: Parquet segments, the manifest that lists them, DuckDB views.

The rows of each raw file are converted to Parquet batch by batch while the file is read, into a
segment under ``<cache>/<kind>/<partition>/`` where kind is ``system`` or ``events`` and the
partition names the stream: the node (and for events the source and rank). ``manifest.json``
records, per raw file, its size and modification time when it was converted, the segment holding
its rows, where they start in it (``offset``) and a few statistics (rows, first and last time,
nodes, ranks). A refresh converts only files that are new or whose size or time changed (a grown
file is re-read whole and its old rows replaced) and drops the rows of files that disappeared.
The entry of a Kineto trace also records the version of the reader that converted it; a trace
converted by another version is read again, so an upgraded reader never serves stale rows.

**Compaction.** Many small segments make every query slow (DuckDB opens each file), so
:meth:`ColumnarCache.compact` merges the small segments of one partition into larger ones: the
rows of each raw file are copied, in time order, as one contiguous range into the new segment,
and the manifest entry of each raw file then names the merged segment and its ``offset``. A
partition is compacted once it holds ``compact_min_segments`` segments smaller than
``segment_target_rows`` whose raw files have been left alone for ``settled_after_s`` (closed:
merging a file that still grows would mean rewriting the merged segment at the next refresh),
or, once the job has ended, as soon as it holds two. A refresh writes the closed files it reads
straight into one new merged segment per partition (:meth:`ColumnarCache.merged_writes`), so a
finished job is converted into merged segments at once, without a second pass; only the files
still being written get segments of their own. A merged segment is cut after
``segment_target_rows``. Because the manifest still maps every raw file to its exact rows,
incremental refresh works the same after compaction: when a raw file of a merged segment grows
or disappears, the segment loses that member, and before the manifest is saved every segment
that lost members is rewritten with the rows of the others only, so no row is ever listed twice.

Where the cache lives (:func:`cache_dir_for`): ``<job>/.stepscope/cache/`` when the job folder is
writable; otherwise ``$STEPSCOPE_CACHE_DIR/<hash>/`` or ``~/.cache/stepscope/<hash>/``, hashed
from the job's absolute path or URL, so read-only inputs and ``s3://`` jobs still get one (under
the temporary folder, with a warning, when the home folder is read-only too). A job opened
``confined`` whose ``.stepscope/cache`` links outside it, or holds a symbolic link, gets the user
cache too, with a warning; a link planted there later makes its refreshes fail, saying so, rather
than write through it.

Concurrent refreshes (the live rule engine and the UI) serialise on ``<cache>/lock`` (``flock``,
which a process that dies lets go; never opened through a symbolic link; the file names the
holder, and a refresh waits for it at most ``lock_timeout_s``, then fails saying who holds it);
the manifest and every segment (converted, merged or rewritten) are written to a temporary name
and renamed into place (the next refresh that saves deletes those of a refresh that was killed),
and a segment is never modified once renamed. A replaced segment is
deleted only ``retire_after_s`` later, so a DuckDB connection opened by another process before a
refresh or a compaction keeps reading the segments it listed, with the same rows.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import socket
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from stat import S_ISDIR
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from stepscope._atomic import write_atomic
from stepscope._sql import sql_text
from stepscope.errors import CorruptFileError, StoreError
from stepscope.store.filesystem import FileInfo, LocalFiles, SourceFiles
from stepscope.store.schema import EVENT_SCHEMA, SYSTEM_SCHEMA
from stepscope.store.segment_file import OpenSegment, SegmentStats, partition_of, safe_name

__all__ = ["KINDS", "ColumnarCache", "cache_dir_for"]

logger = logging.getLogger(__name__)

#: table name -> its schema; also the first folder level of the cache.
KINDS: dict[str, pa.Schema] = {"system": SYSTEM_SCHEMA, "events": EVENT_SCHEMA}

_MANIFEST_VERSION = 1
#: How long a refresh waits for another process's (converting a large job takes minutes).
LOCK_TIMEOUT_S = 600.0
#: A wait this long is logged, with who is waited for.
_LOCK_WAIT_NOTICE_S = 5.0
_LOCK_POLL_S = 0.1
_HOLDER_COMMAND_CHARS = 200
_DUCKDB_TYPES = {
    pa.int64(): "BIGINT",
    pa.int32(): "INTEGER",
    pa.float64(): "DOUBLE",
    pa.string(): "VARCHAR",
}


def cache_dir_for(source: SourceFiles, *, single_file: bool = False) -> Path:
    """Where the cache of the job at ``source`` lives (see the module docstring).

    :param source: the job's files.
    :param single_file: the job is one trace file: never write beside it, use the user cache.
    """
    if not single_file and source.writable():
        local = Path(source.url) / ".stepscope" / "cache"
        # a job opened confined (as the Profiler UI opens jobs) gets nothing written outside it
        if isinstance(source, LocalFiles) and source.leads_outside(local):
            logger.warning(
                "not caching %s in %s: it links outside the job folder; using the user cache",
                source.url,
                local,
            )
        elif (
            isinstance(source, LocalFiles)
            and source.confined
            and (link := _first_link(local.parent))
        ):
            logger.warning(
                "not caching %s in %s: %s is a symbolic link, and the cache is never written "
                "through one; using the user cache",
                source.url,
                local,
                link,
            )
        else:
            try:
                local.mkdir(parents=True, exist_ok=True)
                if os.access(local, os.W_OK):
                    return local
            except OSError:
                logger.debug("cannot create %s; using the user cache", local, exc_info=True)
    digest = hashlib.sha256(source.url.encode()).hexdigest()[:16]
    chosen = os.environ.get("STEPSCOPE_CACHE_DIR")
    if chosen:
        return Path(chosen) / digest  # the user's choice: an unwritable one is an error
    user = Path(os.path.expanduser("~")) / ".cache" / "stepscope" / digest
    try:
        user.mkdir(parents=True, exist_ok=True)
        return user
    except OSError as exc:
        # a read-only home (a container's) must not stop anyone reading a read-only job
        fallback = _temporary_cache_root() / digest
        logger.warning(
            "Cannot create the user cache %s (%s); caching %s in %s instead. Set "
            "STEPSCOPE_CACHE_DIR to a writable folder to keep the cache elsewhere.",
            user,
            exc.strerror or exc,
            source.url,
            fallback,
        )
        return fallback


def _first_link(folder: Path) -> Path | None:
    """The first symbolic link among ``folder`` and what it holds, if any: whoever can write to
    a job's folder can plant one there, to make a refresh write its segments elsewhere."""
    if folder.is_symlink():
        return folder
    for parent, folders, files in os.walk(folder):
        for name in (*folders, *files):
            if os.path.islink(os.path.join(parent, name)):
                return Path(parent, name)
    return None


def _temporary_cache_root() -> Path:
    """``<tmp>/stepscope-cache-<uid>``, when it is this user's own folder that no one else can
    write to; else a new private folder. Anyone may create that name first in a shared
    temporary folder, and the cache must not be written where another user can replace it."""
    root = Path(tempfile.gettempdir()) / f"stepscope-cache-{os.getuid()}"
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = root.lstat()
        if S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022:
            return root
    except OSError:
        pass
    return Path(tempfile.mkdtemp(prefix="stepscope-cache-"))


def _holder_text(lock: Path) -> str:
    """Who holds the lock, as its file says (``pid 12 on host (stepscope ui) since 10:02:03``)."""
    try:
        holder = orjson.loads(lock.read_bytes())
        since = time.strftime("%H:%M:%S", time.localtime(float(holder["since"])))
        return f"pid {holder['pid']} on {holder['host']} ({holder['command']}) since {since}"
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return "a process that did not say who it is"


def _empty_view_sql(schema: pa.Schema) -> str:
    columns = ", ".join(
        f"CAST(NULL AS {_DUCKDB_TYPES[field.type]}) AS {field.name}" for field in schema
    )
    return f"SELECT {columns} LIMIT 0"


class ColumnarCache:
    """The segments and manifest of one job's cache folder.

    :param root: the cache folder (created if missing).
    :param retire_after_s: how long a replaced or dropped segment stays on disk.
    :param compact_min_segments: a partition with this many small, settled segments is
        compacted (see the module docstring); at least 2.
    :param segment_target_rows: segments with fewer rows are small; merged segments are cut
        after this many rows.
    :param settled_after_s: a raw file unchanged for this long is closed and may be merged.
    :param lock_timeout_s: how long :meth:`locked` waits for another process's refresh.
    :param refuse_links: :meth:`locked` fails when the folder holds a symbolic link, rather than
        let the refresh write through it (a job opened ``confined``, whose owner may plant one).
    """

    def __init__(
        self,
        root: Path,
        *,
        retire_after_s: float = 300.0,
        compact_min_segments: int = 8,
        segment_target_rows: int = 1_000_000,
        settled_after_s: float = 120.0,
        lock_timeout_s: float = LOCK_TIMEOUT_S,
        refuse_links: bool = False,
    ) -> None:
        self.root = Path(root)
        self.retire_after_s = retire_after_s
        self.compact_min_segments = max(2, compact_min_segments)
        self.segment_target_rows = segment_target_rows
        self.settled_after_s = settled_after_s
        self.lock_timeout_s = lock_timeout_s
        self.refuse_links = refuse_links
        self.retired: list[tuple[str, float]] = []
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"Cannot create the cache folder {self.root}: {exc.strerror or exc}. Pass "
                "cache_dir= to open_job, or set STEPSCOPE_CACHE_DIR, to a writable folder."
            ) from exc
        self._manifest_path = self.root / "manifest.json"
        self.files: dict[str, dict[str, Any]] = {}
        self._shrunk: set[str] = set()  # shared segments that lost members since the last save
        self._merging: dict[str, OpenSegment] | None = None  # partition -> open merged segment
        self._seen: tuple[int, int, int] | None = None  # the manifest last read or written
        self._unsaved = False  # the last save failed: ``files`` is newer than the manifest
        self.load()

    # ------------------------------------------------------------------ manifest

    def load(self) -> None:
        """Re-read the manifest (another process may have refreshed the cache).

        After a :meth:`save` that failed, what this object holds is kept as long as no other
        process has saved the manifest: its segments stay listed, not converted again.
        """
        if self._unsaved and self._manifest_stat() == self._seen:
            return
        self._shrunk = set()
        self._unsaved, self._seen = False, self._manifest_stat()
        try:
            manifest = orjson.loads(self._manifest_path.read_bytes())
        except FileNotFoundError:
            self.files, self.retired = {}, []
            return
        except (OSError, orjson.JSONDecodeError):
            logger.warning(
                "The cache manifest %s is unreadable; rebuilding it.", self._manifest_path
            )
            manifest = {}
        if manifest.get("version") != _MANIFEST_VERSION:
            self.files, self.retired = {}, []
            return
        self.files = manifest.get("files", {})
        self.retired = [(str(path), float(at)) for path, at in manifest.get("retired", [])]
        self._drop_stale_kineto()

    def _drop_stale_kineto(self) -> None:
        """Forget the Kineto traces converted by another version of the Kineto reader (or one
        that did not record its version), so the next refresh reads them again."""
        converted = [p for p, entry in self.files.items() if isinstance(entry.get("kineto"), dict)]
        if not converted:
            return
        from stepscope.store.kineto import READER_VERSION

        for path in converted:
            if self.files[path]["kineto"].get("reader_version") != READER_VERSION:
                self.drop(path)

    def _manifest_stat(self) -> tuple[int, int, int] | None:
        try:
            stat = self._manifest_path.stat()
        except OSError:
            return None
        return stat.st_ino, stat.st_size, stat.st_mtime_ns

    def save(self) -> None:
        """Rewrite the segments that lost members, delete segments retired long enough ago and
        the files of killed refreshes, and write the manifest atomically.

        A manifest that cannot be written (a full disk) is logged, once until a save succeeds,
        and never raised: this object keeps serving what it converted (see :meth:`load`).
        """
        self._rewrite_shrunk()
        self._remove_abandoned()
        now = time.time()
        kept = []
        for segment, retired_at in self.retired:
            if now - retired_at >= self.retire_after_s:
                (self.root / segment).unlink(missing_ok=True)
            else:
                kept.append((segment, retired_at))
        self.retired = kept
        manifest = orjson.dumps(
            {"version": _MANIFEST_VERSION, "files": self.files, "retired": self.retired},
            option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
            default=str,
        )
        try:
            write_atomic(self._manifest_path, manifest)
        except OSError as exc:
            log = logger.debug if self._unsaved else logger.warning
            log("Cannot save the cache manifest %s: %s", self._manifest_path, exc)
            self._unsaved = True
            return
        self._unsaved, self._seen = False, self._manifest_stat()

    def _remove_abandoned(self) -> None:
        """Delete the temporary files of refreshes killed while they wrote (a UI server stopped
        while it loaded a job, an OOM kill): a refresh writes them under the lock, so while this
        process holds it, any that exists belongs to a process that is gone."""
        for kind in KINDS:
            for abandoned in (self.root / kind).rglob("*.parquet.*.tmp"):
                abandoned.unlink(missing_ok=True)
        for abandoned in self.root.glob(f".{self._manifest_path.name}.*.tmp"):
            abandoned.unlink(missing_ok=True)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the cache's lock: one refresh at a time across processes.

        The lock goes with its holder: a process that dies (``kill -9``) holds it no more. One
        that holds it for ``lock_timeout_s`` (hung, or stopped) makes this a :class:`StoreError`
        naming it, as the lock file says who holds it, rather than a wait without end. The
        folder is made again if it was removed (a user clearing the cache while the UI or the
        live rules use it): the refresh that follows rebuilds the cache.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / "lock"
        # not truncated on open: it names the holder to whoever waits; never through a link,
        # which would make the lock overwrite whatever file it names
        try:
            handle = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            if path.is_symlink():
                raise StoreError(
                    f"The cache lock {path} is a symbolic link, not written through; remove it, "
                    "or pass cache_dir= to open_job for a cache of your own."
                ) from exc
            raise
        try:
            self._acquire(handle, path)
            try:
                os.ftruncate(handle, 0)
                os.pwrite(handle, orjson.dumps(self._holder()), 0)
            except OSError:  # a full disk: the lock holds all the same, without a name
                logger.debug("cannot name the holder in %s", path, exc_info=True)
            link = _first_link(self.root) if self.refuse_links else None
            if link is not None:
                raise StoreError(
                    f"The cache folder {self.root} holds a symbolic link, {link}, that a refresh "
                    "would write through; remove it, or pass cache_dir= to open_job for a cache "
                    "of your own."
                )
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        finally:
            os.close(handle)

    def _acquire(self, handle: int, path: Path) -> None:
        """Take the lock on ``handle`` within ``lock_timeout_s``; say once who is waited for."""
        started = time.monotonic()
        told = False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                waited = time.monotonic() - started
            if waited >= self.lock_timeout_s:
                raise StoreError(
                    f"The cache {self.root} stayed locked for {self.lock_timeout_s:.0f} s by "
                    f"{_holder_text(path)}. Wait for it to finish, or end that process (its "
                    "lock goes with it), or pass cache_dir= to open_job for a cache of your own."
                )
            if not told and waited >= _LOCK_WAIT_NOTICE_S:
                logger.info("Waiting for the cache lock of %s: %s", self.root, _holder_text(path))
                told = True
            time.sleep(_LOCK_POLL_S)

    @staticmethod
    def _holder() -> dict[str, Any]:
        return {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "command": " ".join(sys.argv)[:_HOLDER_COMMAND_CHARS],
            "since": time.time(),
        }

    def is_current(self, info: FileInfo) -> bool:
        """True when ``info`` was converted with this size and modification time."""
        entry = self.files.get(info.path)
        return (
            entry is not None
            and entry["size_bytes"] == info.size_bytes
            and entry["mtime"] == info.mtime
        )

    def record(self, info: FileInfo, segment: str | None, stats: dict[str, Any]) -> None:
        """Remember that ``info`` is converted into ``segment`` (None: it holds no rows)."""
        self.drop(info.path, keep_segment=segment)
        self.files[info.path] = {
            "size_bytes": info.size_bytes,
            "mtime": info.mtime,
            "segment": segment,
            "offset": 0,
            **stats,
        }

    def drop(self, path: str, *, keep_segment: str | None = None) -> None:
        """Forget raw file ``path``; its segment is deleted ``retire_after_s`` later, or, when
        other raw files share it, rewritten without its rows by :meth:`save`."""
        entry = self.files.pop(path, None)
        segment = entry.get("segment") if entry else None
        if not segment or segment == keep_segment:
            return
        if any(other.get("segment") == segment for other in self.files.values()):
            self._shrunk.add(segment)
        else:
            self._shrunk.discard(segment)
            self._retire(segment)

    def rows_key(self) -> frozenset[tuple[str, int, float, int]]:
        """The raw files the segments hold rows of, with the size, time and row count they were
        converted at: it changes exactly when rows are added or removed, whichever process
        converted them."""
        return frozenset(
            (path, entry["size_bytes"], entry["mtime"], int(entry.get("rows") or 0))
            for path, entry in self.files.items()
            if entry.get("segment")
        )

    def is_closed(self, mtime: float, *, ended: bool) -> bool:
        """Whether a raw file modified at ``mtime`` is closed: the job has ended, or the file
        has been left alone for ``settled_after_s``. Only closed files are merged."""
        return ended or mtime < time.time() - self.settled_after_s

    def expired_retirements(self) -> bool:
        """Whether some retired segment is due for deletion (a save would delete it)."""
        now = time.time()
        return any(now - at >= self.retire_after_s for _, at in self.retired)

    def _retire(self, segment: str) -> None:
        if all(segment != retired for retired, _ in self.retired):
            self.retired.append((segment, time.time()))

    # ------------------------------------------------------------------ segments

    def write_segment(
        self,
        kind: str,
        raw_path: str,
        batches: Iterable[pa.RecordBatch],
        *,
        merge: bool = False,
    ) -> tuple[str | None, dict[str, Any]]:
        """Stream ``batches`` of ``kind`` into a new segment for raw file ``raw_path``.

        :param merge: append the rows to the partition's merged segment of the current
            :meth:`merged_writes` instead (for closed files; the file's batches are held in
            memory until it is read whole, so a file that fails half-way adds no rows).
        :returns: the segment's path relative to the cache (None when there were no rows) and
            its statistics: ``rows``, ``first_us``, ``last_us``, ``nodes``, ``ranks`` (and
            ``offset`` when merged).
        :raises CorruptFileError: when pyarrow rejects the data as the batches are written.
        :raises OSError: when the segment cannot be written (a full disk) or the raw file
            cannot be read: nothing is wrong with the file's data, so it is read again later.
        """
        stats = SegmentStats(kind)
        target: OpenSegment | None = None
        held: list[pa.RecordBatch] = []
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                stats.add(batch)
                if merge:
                    held.append(batch)
                    continue
                if target is None:
                    partition = partition_of(kind, batch)
                    target = OpenSegment(self._unused_path(partition, raw_path), KINDS[kind])
                target.append(pa.Table.from_batches([batch]))
            if held:
                segment, offset = self._append_merged(kind, raw_path, held)
                return segment, {**stats.as_dict(), "offset": offset}
            if target is None:
                return None, stats.as_dict()
            target.finish()
        except pa.ArrowException as exc:
            if target is not None:
                target.abandon()
            raise CorruptFileError(raw_path, "a record batch", str(exc)) from exc
        except BaseException:  # an OSError too: the data is sound, it is read again later
            if target is not None:
                target.abandon()
            raise
        return target.final.relative_to(self.root).as_posix(), stats.as_dict()

    @contextmanager
    def merged_writes(self) -> Iterator[None]:
        """A scope in which ``write_segment(..., merge=True)`` appends to one new segment per
        partition (cut after ``segment_target_rows``), completed when the scope ends.

        A merged segment that cannot be completed is removed, and the raw files recorded in it
        are forgotten so the next refresh reads them again.
        """
        self._merging = {}
        try:
            yield
        except BaseException:
            for open_segment in self._merging.values():
                open_segment.abandon()
            raise
        finally:
            merging, self._merging = self._merging, None
        for open_segment in merging.values():
            self._complete(open_segment)

    def _append_merged(
        self, kind: str, raw_path: str, held: list[pa.RecordBatch]
    ) -> tuple[str, int]:
        if self._merging is None:
            raise RuntimeError("write_segment(merge=True) needs an open merged_writes() scope")
        partition = partition_of(kind, held[0])
        target = self._merging.get(partition)
        if target is not None and target.rows >= self.segment_target_rows:
            self._complete(target)
            target = None
        if target is None:
            path = self._unused_path(partition, raw_path, prefix="merged-")
            target = self._merging[partition] = OpenSegment(path, KINDS[kind])
        offset = target.rows
        try:
            target.append(pa.Table.from_batches(held))
        except (pa.ArrowException, OSError):
            del self._merging[partition]
            self._forget_segment(target)
            raise
        return target.final.relative_to(self.root).as_posix(), offset

    def _complete(self, target: OpenSegment) -> None:
        try:
            target.finish()
        except (pa.ArrowException, OSError) as exc:
            logger.warning("Cannot write the cache segment %s: %s", target.final, exc)
            self._forget_segment(target)

    def _forget_segment(self, target: OpenSegment) -> None:
        """Abandon a merged segment being written and forget the raw files recorded in it."""
        target.abandon()
        segment = target.final.relative_to(self.root).as_posix()
        for raw_path in self._members([segment]):
            del self.files[raw_path]

    def _unused_path(self, partition: str, raw_path: str, *, prefix: str = "") -> Path:
        """A segment name in ``partition``, after the raw file, that no file has: a segment
        still read by another process is never overwritten."""
        stem = safe_name(raw_path.rsplit("/", 1)[-1])[:80]
        digest = hashlib.sha1(raw_path.encode()).hexdigest()[:10]
        generation = 0
        while (self.root / partition / f"{prefix}{stem}-{digest}-{generation}.parquet").exists():
            generation += 1
        return self.root / partition / f"{prefix}{stem}-{digest}-{generation}.parquet"

    def segments(self, kind: str) -> list[Path]:
        """The segment files of ``kind`` listed by the manifest, in raw-file order, each once."""
        listed = dict.fromkeys(
            entry["segment"]
            for _, entry in sorted(self.files.items())
            if entry.get("segment") and entry.get("kind") == kind
        )
        return [self.root / segment for segment in listed]

    # ------------------------------------------------------------------ compaction

    def compact(self, *, ended: bool = False) -> int:
        """Merge the small segments of each partition (see the module docstring).

        :param ended: the job has ended: every raw file is closed and two small segments of a
            partition are enough to merge them.
        :returns: how many segments were merged away.
        """
        small: dict[str, dict[str, bool]] = {}  # partition -> small segment -> all members settled
        rows: dict[str, int] = {}
        for entry in self.files.values():
            segment = entry.get("segment")
            if segment:
                rows[segment] = rows.get(segment, 0) + int(entry.get("rows") or 0)
        for entry in self.files.values():
            segment = entry.get("segment")
            if not segment or rows[segment] >= self.segment_target_rows:
                continue
            settled = self.is_closed(float(entry.get("mtime") or 0), ended=ended)
            partition = small.setdefault(segment.rsplit("/", 1)[0], {})
            partition[segment] = partition.get(segment, True) and settled
        merged = 0
        for segments in small.values():
            ready = [segment for segment, settled in segments.items() if settled]
            if len(ready) >= (2 if ended else self.compact_min_segments):
                if self._rewrite(ready):
                    merged += len(ready)
        return merged

    def _rewrite_shrunk(self) -> None:
        """Rewrite each segment that lost members with the rows of its remaining members."""
        shrunk, self._shrunk = self._shrunk, set()
        for segment in sorted(shrunk):
            if any(entry.get("segment") == segment for entry in self.files.values()):
                if not self._rewrite([segment]):
                    # its remaining rows cannot be separated from the lost member's: read them again
                    for raw_path in self._members([segment]):
                        del self.files[raw_path]
            self._retire(segment)

    def _members(self, segments: list[str]) -> list[str]:
        """The raw files whose rows are in ``segments``, oldest first."""
        wanted = set(segments)
        found = [raw for raw, entry in self.files.items() if entry.get("segment") in wanted]
        return sorted(found, key=lambda raw: (self.files[raw].get("first_us") or 0.0, raw))

    def _rewrite(self, segments: list[str]) -> bool:
        """Copy the rows of the members of ``segments`` (one partition) into new segments.

        Each member's rows stay one contiguous range; the members' entries are pointed at the
        new segments only once every new segment is in place, and the old ones are retired.

        :returns: False when a segment could not be read (nothing changed then).
        """
        members = self._members(segments)
        partition = segments[0].rsplit("/", 1)[0]
        schema = KINDS[partition.split("/", 1)[0]]
        tables: dict[str, pa.Table] = {}
        # members still to copy from each source: a source is released after its last one
        remaining = Counter(self.files[raw]["segment"] for raw in members)
        placed: dict[str, tuple[str, int]] = {}
        written: list[OpenSegment] = []
        target: OpenSegment | None = None
        try:
            for raw in members:
                entry = self.files[raw]
                source = entry["segment"]
                if source not in tables:
                    tables[source] = pq.read_table(self.root / source, schema=schema)
                if target is None:
                    path = self._unused_path(partition, raw, prefix="merged-")
                    target = OpenSegment(path, schema)
                placed[raw] = (target.final.relative_to(self.root).as_posix(), target.rows)
                target.append(
                    tables[source].slice(int(entry.get("offset") or 0), int(entry["rows"]))
                )
                remaining[source] -= 1
                if not remaining[source]:
                    del tables[source]
                if target.rows >= self.segment_target_rows:
                    target.finish()
                    written.append(target)
                    target = None
            if target is not None:
                target.finish()
                written.append(target)
                target = None
        except (OSError, pa.ArrowException) as exc:
            if target is not None:
                target.abandon()
            for done in written:
                done.final.unlink(missing_ok=True)
            logger.warning("Cannot compact the cache segments of %s: %s", partition, exc)
            return False
        for raw, (segment, offset) in placed.items():
            self.files[raw]["segment"] = segment
            self.files[raw]["offset"] = offset
        for segment in segments:
            self._retire(segment)
        return True

    def connect(self, into: Any = None) -> Any:
        """A new in-memory DuckDB connection with the views ``system`` and ``events``.

        Each view reads the segments the manifest lists now; with none it is an empty relation
        with the right columns, so queries work on a job that has no data yet. With ``into``, a
        connection this method made before, that connection's views are replaced instead.
        """
        import duckdb

        con = into
        if con is None:
            con = duckdb.connect()
            # a query larger than memory spills beside the cache, not into the current folder
            con.execute(f"SET temp_directory = {sql_text(str(self.root / 'spill'))}")
        for kind, schema in KINDS.items():
            files = [str(p) for p in self.segments(kind)]
            if files:
                listing = ", ".join(sql_text(f) for f in files)
                sql = f"SELECT * FROM read_parquet([{listing}])"
            else:
                sql = _empty_view_sql(schema)
            try:
                con.execute(f"CREATE OR REPLACE VIEW {kind} AS {sql}")
            except duckdb.Error as exc:
                if into is None:
                    con.close()
                raise CorruptFileError(str(self.root), f"the {kind} segments", str(exc)) from exc
        return con

    def read_table(self, kind: str) -> pa.Table:
        """Every row of ``kind`` as one Arrow table, read from the segments the manifest lists
        now: the rows of the view :meth:`connect` makes, in the same order, without DuckDB.

        :raises CorruptFileError: when a segment is missing or damaged.
        """
        schema = KINDS[kind]
        tables = []
        for path in self.segments(kind):
            try:
                # ParquetFile, not read_table: no pyarrow.dataset import. One thread: decoding
                # a whole job takes about 0.1 s of CPU, and threads only add to it.
                table = pq.ParquetFile(path).read(use_threads=False)
                tables.append(table if table.schema.equals(schema) else table.cast(schema))
            except (OSError, pa.ArrowException) as exc:
                raise CorruptFileError(str(self.root), f"the {kind} segments", str(exc)) from exc
        return pa.concat_tables(tables) if tables else schema.empty_table()

    def forget_unreadable(self) -> list[str]:
        """Forget the raw files whose segment is missing or damaged, so they are read again.

        :returns: the raw files forgotten.
        """
        forgotten = []
        readable: dict[str, bool] = {}
        for raw_path, entry in list(self.files.items()):
            segment = entry.get("segment")
            if not segment:
                continue
            if segment not in readable:
                try:
                    pq.read_metadata(self.root / segment)
                    readable[segment] = True
                except (OSError, pa.ArrowException):
                    (self.root / segment).unlink(missing_ok=True)
                    readable[segment] = False
            if not readable[segment]:
                del self.files[raw_path]
                forgotten.append(raw_path)
        return forgotten
