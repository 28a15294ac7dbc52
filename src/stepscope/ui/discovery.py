"""Finding profiled jobs under the UI's root folders, and naming each with an opaque id.

A root may hold, at any depth up to :data:`MAX_DEPTH`:

* stepscope jobs (a folder with ``job.json``);
* SageMaker Debugger profiler output folders (``system/`` and/or ``framework/`` directly inside);
* PyTorch profiler (Kineto) traces: a folder whose traces are the ranks of one job (file names
  that differ only in their digits, like ``rank-0.json.gz`` / ``rank-1.json.gz``) is one job, and
  every other trace file is a job of its own. A root may also be a single trace file.

Discovery reads only names, ``job.json`` and the first bytes of candidate trace files (and the
last ones of an uncompressed trace, where Kineto dates its times), so listing stays fast on large
roots; the walk is bounded in depth and in folders visited. The list is newest first: a trace
job's start is that of the first events those bytes hold (its ranks are those its files' headers
or names give), and a trace they do not date goes by when its files were written until it is
loaded. Nothing outside a root is ever listed: symbolic links are not followed, and a candidate
whose resolved path leaves its root is skipped. The browser only ever sees a job's
:attr:`JobEntry.id` (a hash of the root and the path relative to it), never a path.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal  # Any: the JSON values of an answer

from stepscope.errors import JobNotFoundError, UnsupportedFormatError
from stepscope.store import TraceHead, read_trace_head
from stepscope.store.job_status import output_status
from stepscope.store.layout import output_job_name, profiler_output_dir, trace_name

__all__ = [
    "MAX_DEPTH",
    "JobEntry",
    "JobKind",
    "JobStatus",
    "check_root",
    "current_entry",
    "discover_jobs",
    "job_id",
    "listing_order",
]

logger = logging.getLogger(__name__)

JobKind = Literal["stepscope", "sagemaker", "kineto"]
JobStatus = Literal["running", "completed", "failed", "stopped", "unknown"]

#: How deep below a root discovery looks for jobs.
MAX_DEPTH = 4
#: Upper bound on folders visited per root, so pointing the UI at a home folder stays quick.
_MAX_FOLDERS = 5000
_SKIPPED_FOLDERS = {"node_modules", "__pycache__", "site-packages"}
_TRACE_SUFFIXES = (".json", ".json.gz")
_JOB_STATUS: dict[str, JobStatus] = {
    "Running": "running",
    "Completed": "completed",
    "Failed": "failed",
    "Stopped": "stopped",
}
_SYSTEM_FILE = re.compile(r"^(\d+)\.(algo-\d+)\.json$")


@dataclass(frozen=True)
class JobEntry:
    """One job found under a root: what the job list shows before anything is loaded.

    :param id: opaque, stable id (hex) — the only handle the browser gets.
    :param path: the job folder or trace file (server side only).
    :param root: the root it was found under.
    :param start_us: job start in µs since the epoch, ``None`` when unknown before loading.
    :param end_us: job end in µs since the epoch, ``None`` while running or when unknown.
    :param ranks: a trace job's ranks, one per trace file (``None`` where neither its header nor
        its name gives one).
    :param world_size: the ranks the traced run had (``distributedInfo.world_size``), when known.
    :param written_us: when a trace job's newest file was written, µs since the epoch.
    """

    id: str
    name: str
    kind: JobKind
    path: Path
    root: Path
    status: JobStatus
    start_us: float | None = None
    end_us: float | None = None
    nodes: tuple[str, ...] = field(default_factory=tuple)
    ranks: tuple[int | None, ...] = field(default_factory=tuple)
    world_size: int | None = None
    written_us: float | None = None

    @property
    def duration_s(self) -> float | None:
        """Seconds from start to end (to the last data seen for a running SageMaker folder, to
        now for a running job: timed by this machine's clock, the one that dated its start,
        since the browser's may be another machine's, minutes or hours off)."""
        end_us = self.end_us
        if end_us is None and self.status == "running":
            end_us = time.time() * 1e6
        if self.start_us is None or end_us is None:
            return None
        return max(0.0, (end_us - self.start_us) / 1e6)

    @property
    def timed_by_data(self) -> bool:
        """Whether its data, once read, times the job better than the listing: that has only a
        trace's first bytes, or the whole minutes SageMaker system files are named after, where
        job.json holds the job's own times."""
        return self.kind != "stepscope" or self.start_us is None

    @property
    def location(self) -> str:
        """Its path relative to its root, for display: it tells apart jobs of one name."""
        return str(self.path.relative_to(self.root)) if self.path != self.root else "."

    def to_json(self) -> dict[str, Any]:
        """The browser-facing view: no path, only the id and what the job list shows."""
        return {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "status": self.status,
            "start_us": self.start_us,
            "end_us": self.end_us,
            "duration_s": self.duration_s,
            "nodes": list(self.nodes),
            "ranks": list(self.ranks),
            "world_size": self.world_size,
            "written_us": self.written_us,
            "location": self.location,
        }


def job_id(root: Path, path: Path) -> str:
    """The opaque id of ``path`` under ``root``: stable across restarts, reveals no path."""
    relative = path.relative_to(root).as_posix()
    return hashlib.sha256(f"{root}\0{relative}".encode()).hexdigest()[:20]


def listing_order(entry: JobEntry, start_us: float | None = None) -> tuple[float, str]:
    """Where ``entry`` goes in the job list, newest first: by its start (``start_us`` when the
    caller knows it better, as a loaded trace's), else by when its files were written, then by
    name."""
    when = start_us if start_us is not None else entry.start_us
    if when is None:
        when = entry.written_us
    return (-(when or 0.0), entry.name)


def check_root(root: str | os.PathLike[str]) -> Path:
    """A root a user named, checked: it must exist, and a file must be a trace.

    :raises JobNotFoundError: nothing exists at ``root``.
    :raises UnsupportedFormatError: ``root`` is a file that is not a PyTorch profiler trace.
    """
    if str(root).startswith("s3://"):
        raise UnsupportedFormatError(
            str(root),
            "a local folder of jobs or a trace file: the Profiler UI lists local jobs "
            "(stepscope report and stepscope rules read s3:// paths)",
        )
    path = Path(root).expanduser()
    if not path.exists():
        raise JobNotFoundError(str(root), "Give a folder of jobs or a PyTorch profiler trace.")
    if path.is_file() and _trace_head(path) is None:
        raise UnsupportedFormatError(
            str(root), "a folder of jobs or a PyTorch profiler trace (.json or .json.gz)"
        )
    return path


def discover_jobs(roots: Iterable[str | os.PathLike[str]]) -> list[JobEntry]:
    """Every job under ``roots``, newest first; missing roots are skipped with a log line.

    :param roots: folders (or single trace files) to look in.
    """
    found: dict[Path, JobEntry] = {}
    for raw_root in roots:
        root = Path(raw_root).expanduser().resolve()
        if not root.exists():
            logger.info("UI root %s does not exist; nothing listed from it", root)
            continue
        for entry in _discover_root(root):
            # a job under two roots (./stepscope-jobs and .) is listed once, from the first
            found.setdefault(entry.path, entry)
    return sorted(found.values(), key=listing_order)


def current_entry(entry: JobEntry) -> JobEntry:
    """``entry`` as its folder says now: a job's status changes while it runs, and a page that
    shows one job must not show the status of the last time the job list was asked for. A
    folder that cannot be read now keeps the entry it had."""
    if entry.kind == "kineto":
        return entry
    try:
        names = set(os.listdir(entry.path))
    except OSError:
        return entry
    return _folder_job(entry.root, entry.path, names) or entry


def _discover_root(root: Path) -> Iterable[JobEntry]:
    if root.is_file():
        head = _trace_head(root)
        if head is not None:
            yield _trace_entry(root, root.parent, trace_name(root.name), {root: head})
        return
    visited = 0
    pending: list[tuple[Path, int]] = [(root, 0)]
    while pending and visited < _MAX_FOLDERS:
        folder, depth = pending.pop()
        visited += 1
        try:
            children = sorted(os.scandir(folder), key=lambda d: d.name)
        except OSError as exc:
            logger.debug("cannot list %s: %s", folder, exc)
            continue
        names = {child.name for child in children}
        entry = _folder_job(root, folder, names)
        if entry is not None:
            yield entry
            continue
        candidates = (
            Path(c.path)
            for c in children
            if c.is_file(follow_symlinks=False) and _inside(root, Path(c.path))
        )
        heads = {path: head for path in candidates if (head := _trace_head(path)) is not None}
        yield from _trace_jobs(root, folder, heads)
        if depth < MAX_DEPTH:
            pending.extend(
                (Path(c.path), depth + 1)
                for c in reversed(children)
                if c.is_dir(follow_symlinks=False)
                and not c.name.startswith(".")
                and c.name not in _SKIPPED_FOLDERS
            )
    if pending:
        logger.warning(
            "stopped looking for jobs under %s after %d folders; pass a narrower root",
            root,
            _MAX_FOLDERS,
        )


def _inside(root: Path, path: Path) -> bool:
    """Whether ``path`` (after resolving links) stays under ``root``."""
    try:
        return path.resolve().is_relative_to(root)
    except OSError:
        return False


def _folder_job(root: Path, folder: Path, names: set[str]) -> JobEntry | None:
    """The job a folder is, if it is one (a stepscope job or a SageMaker output folder).

    A job whose data folders are links leaving the root is not listed: loading it would read
    files outside the root.
    """
    data = [
        folder / n for n in ("job.json", "profiler-output", "system", "framework") if n in names
    ]
    if data and not all(_inside(root, path) for path in data):
        logger.warning("not listing %s: part of it links outside %s", folder, root)
        return None
    if "job.json" in names:
        return _stepscope_entry(root, folder)
    if names & {"system", "framework"}:
        return _sagemaker_entry(root, folder, folder)
    if "profiler-output" in names:
        return _sagemaker_entry(root, folder, folder / "profiler-output")
    return None


def _entry(
    path: Path,
    root: Path,
    kind: JobKind,
    name: str,
    status: JobStatus,
    start_us: float | None = None,
    end_us: float | None = None,
    nodes: Sequence[str] = (),
) -> JobEntry:
    return JobEntry(
        id=job_id(root, path),
        name=name,
        kind=kind,
        path=path,
        root=root,
        status=status,
        start_us=start_us,
        end_us=end_us,
        nodes=tuple(nodes),
    )


def _stepscope_entry(root: Path, folder: Path) -> JobEntry:
    """A stepscope job folder; an unreadable ``job.json`` is read as none, as everywhere (see
    :mod:`~stepscope.store.job_status`): its status from its profiler output alone."""
    meta: dict[str, Any] | None = None
    try:
        meta = json.loads((folder / "job.json").read_text())
        if not isinstance(meta, dict):
            raise ValueError("job.json is not a JSON object")
    except (OSError, ValueError) as exc:
        logger.warning(
            "cannot read %s/job.json (%s): its status is read from its data", folder, exc
        )
        meta = None
    output = profiler_output_dir(folder)
    known = meta or {}
    end_us = _number(known.get("end_time_us"))
    state = output_status(output, meta, last_write_s=None if meta else _last_written(output))
    written = _last_written(output) if end_us is None and state.reason else None
    if written is not None:  # it ended without recording it: at its last write
        end_us = written * 1e6
    nodes = known.get("nodes")
    return _entry(
        folder,
        root,
        "stepscope",
        str(known.get("name") or folder.name),
        _JOB_STATUS.get(state.status, "unknown"),
        _number(known.get("start_time_us")),
        end_us,
        [str(n) for n in nodes] if isinstance(nodes, list) else [],
    )


def _sagemaker_entry(root: Path, folder: Path, output: Path) -> JobEntry:
    """A SageMaker Debugger output folder (``output``, the folder itself or its
    ``profiler-output/``); start, end and nodes come from system file names. Its status is
    :func:`~stepscope.store.job_status.job_status`'s, from its end marker, its ranks and when
    its newest system or framework file was written (``unknown`` without either)."""
    minutes: list[int] = []
    nodes: set[str] = set()
    for item in _hour_files(output / "system" / "incremental"):
        match = _SYSTEM_FILE.match(item.name)
        if match:
            minutes.append(int(match.group(1)))
            nodes.add(match.group(2))
    written = _last_written(output)
    state = output_status(output, None, last_write_s=written)
    status = _JOB_STATUS[state.status] if written or state.status != "Running" else "unknown"
    start_us = min(minutes) * 1e6 if minutes else None
    end_us = (max(minutes) + 60) * 1e6 if minutes else None
    return _entry(
        folder,
        root,
        "sagemaker",
        output_job_name(folder),
        status,
        start_us,
        end_us,
        sorted(nodes),
    )


def _last_written(output: Path) -> float | None:
    """When the newest system or framework file of the profiler output ``output`` was last
    written (seconds since the epoch; None without either)."""
    newest: tuple[int, str] = (-1, "")
    for item in _hour_files(output / "system" / "incremental"):
        match = _SYSTEM_FILE.match(item.name)
        if match:
            newest = max(newest, (int(match.group(1)), item.path))
    # closed framework files are named after the time they end, so the newest name is the
    # newest file; the open ones (``framework/*.tmp``) grow until they are closed
    closed = max(
        (item.path for item in _hour_files(output / "framework" / "pevents")),
        key=os.path.basename,
        default="",
    )
    candidates = [newest[1], closed, *map(str, (output / "framework").glob("*.tmp"))]
    return max((t for t in map(_mtime, candidates) if t is not None), default=None)


def _hour_files(folder: Path) -> Iterable[os.DirEntry[str]]:
    """The files of ``folder``'s hour folders (``<YYYYMMDDHH>/<file>``)."""
    try:
        hours = list(os.scandir(folder))
    except OSError:
        logger.debug("no folder %s", folder)
        return
    for hour in hours:
        if hour.is_dir(follow_symlinks=False):
            try:
                yield from os.scandir(hour.path)
            except OSError:
                continue


def _trace_jobs(root: Path, folder: Path, heads: dict[Path, TraceHead]) -> Iterable[JobEntry]:
    """Traces that are ranks of one job become one job (their folder); others one job each."""
    if len(heads) >= 2 and len({re.sub(r"\d+", "#", t.name) for t in heads}) == 1:
        yield _trace_entry(folder, root, folder.name, heads)
        return
    for trace, head in heads.items():
        yield _trace_entry(trace, root, trace_name(trace.name), {trace: head})


def _trace_entry(path: Path, root: Path, name: str, heads: dict[Path, TraceHead]) -> JobEntry:
    """A job of the traces ``heads`` holds: it starts with the earliest of them, and was written
    when the newest was."""
    starts = [head.start_us for head in heads.values() if head.start_us is not None]
    sizes = {head.world_size for head in heads.values() if head.world_size is not None}
    written = [t for t in map(_mtime, map(str, heads)) if t is not None]
    return JobEntry(
        id=job_id(root, path),
        name=name,
        kind="kineto",
        path=path,
        root=root,
        status="completed",
        start_us=min(starts, default=None),
        ranks=tuple(sorted((h.rank for h in heads.values()), key=lambda r: (r is None, r or 0))),
        world_size=max(sizes, default=None),
        written_us=max(written) * 1e6 if written else None,
    )


def _trace_head(path: Path) -> TraceHead | None:
    """What the first bytes of ``path`` tell, None when it is no Kineto trace."""
    return read_trace_head(path) if path.name.endswith(_TRACE_SUFFIXES) else None


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime if path else None
    except OSError:
        return None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
