"""A job's status: one answer for the job list, the Information page, ``JobData.metadata``,
the report and ``stepscope update``.

A job records that it runs, and later how it ended: ``job.json``'s ``status`` for a launched
job, ``training_job_end.ts`` for profiler output without ``job.json`` (``stepscope.profile()``,
SageMaker Debugger). A process killed before it recorded the end (the launcher, or every rank
of a ``profile()`` job, by SIGKILL or the OOM killer) leaves the job recorded as running for
ever. So the process that would record the end is named by its host, pid and start time: on
that host, a reader tells it is gone when its pid no longer runs, or runs a process started at
another time (the pid was reused). A job recorded as running whose processes are gone has
**Failed**: it ended without recording how. On another host nothing can be told, and the
record stands.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any  # Any: job.json's and the rank files' JSON values

import orjson

from stepscope.store.filesystem import LocalFiles, SourceFiles
from stepscope.store.layout import job_has_ended

__all__ = [
    "WRITTEN_LATELY_S",
    "Status",
    "job_status",
    "output_status",
    "process_gone",
    "process_identity",
    "rank_records",
]

logger = logging.getLogger(__name__)

RUNNING, COMPLETED, FAILED = "Running", "Completed", "Failed"

#: Profiler output without ``job.json`` and its end marker is still being written while its
#: newest data file changed this recently (system files every minute, appended to meanwhile;
#: copies from S3 lag).
WRITTEN_LATELY_S = 300.0
#: How far two readings of one process's start time may differ (the kernel's boot time, which
#: they are computed from, moves by up to a second); a reused pid starts later than that.
_START_TIME_TOLERANCE_S = 2.0


@dataclass(frozen=True)
class Status:
    """A job's status (``Running``, ``Completed``, ``Failed``, ``Stopped``) and, when it is not
    the one recorded, why (``None`` otherwise)."""

    status: str
    reason: str | None = None


def process_identity() -> dict[str, Any]:
    """This process, as a reader on this host can later tell it is gone: ``host``, ``pid`` and
    ``start_time`` (seconds since the epoch; None when the system does not say)."""
    import psutil

    try:
        start_time: float | None = psutil.Process().create_time()
    except (psutil.Error, OSError):
        start_time = None
    return {"host": socket.gethostname(), "pid": os.getpid(), "start_time": start_time}


def process_gone(host: object, pid: object, start_time: object = None) -> bool:
    """Whether the process ``pid`` started at ``start_time`` on ``host`` is known to have
    ended: False when it runs, and when that cannot be told (another host, no pid, or a pid
    that runs with no start time to compare)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or host != socket.gethostname():
        return False
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return True
        started = process.create_time()
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # not ours to inspect: it runs
        return False
    if not isinstance(start_time, (int, float)) or isinstance(start_time, bool):
        return False
    return abs(started - start_time) > _START_TIME_TOLERANCE_S


def job_status(
    job: Mapping[str, Any] | None,
    *,
    ended: bool,
    ranks: Iterable[Mapping[str, Any]] = (),
    last_write_s: float | None = None,
) -> Status:
    """The status of a job from what its folder holds.

    :param job: ``job.json`` (None without one).
    :param ended: whether its ``training_job_end.ts`` exists.
    :param ranks: each rank file (``framework/ranks/<node_id>.json``: ``hostname``, ``pid``,
        ``start_time``) with ``ended`` set when the rank marked its end (see
        :func:`rank_records`).
    :param last_write_s: without ``job.json``, when its newest data file was last written
        (seconds since the epoch; None when unknown): output nothing was written to for
        :data:`WRITTEN_LATELY_S` is a completed recording (SageMaker Debugger output copied
        without its end marker).
    """
    if job is not None:
        recorded = str(job.get("status") or RUNNING)
        launcher = job.get("launcher")
        if recorded != RUNNING or not isinstance(launcher, Mapping):
            return Status(COMPLETED if recorded == RUNNING and ended else recorded)
        host, pid = launcher.get("host"), launcher.get("pid")
        if not process_gone(host, pid, launcher.get("start_time")):
            # it runs (maybe finishing after the end marker), or another host cannot tell
            return Status(COMPLETED if ended and host != socket.gethostname() else RUNNING)
        if _running_ranks(ranks):
            return Status(RUNNING)  # the command outlived its launcher
        return Status(
            FAILED, f"its launcher (pid {pid} on {host}) ended without recording the job's end"
        )
    if ended:
        return Status(COMPLETED)
    ranks = list(ranks)
    if ranks and not _running_ranks(ranks) and not all(rank.get("ended") for rank in ranks):
        killed = ", ".join(str(rank.get("rank")) for rank in ranks if not rank.get("ended"))
        return Status(FAILED, f"rank {killed} ended without marking its end")
    if last_write_s is not None and time.time() - last_write_s >= WRITTEN_LATELY_S:
        return Status(COMPLETED)
    return Status(RUNNING)


def output_status(
    output: Path,
    job: Mapping[str, Any] | None,
    *,
    last_write_s: float | None = None,
) -> Status:
    """:func:`job_status` of the local profiler output folder ``output`` (a job folder's
    ``profiler-output``, or SageMaker Debugger output itself), from its end marker and rank
    files; ``job`` and ``last_write_s`` as there."""
    ranks = rank_records(LocalFiles(output), "")
    return job_status(job, ended=job_has_ended(output), ranks=ranks, last_write_s=last_write_s)


def _running_ranks(ranks: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a rank may still run: it did not mark its end, and is not known to be gone."""
    return any(
        not rank.get("ended")
        and not process_gone(rank.get("hostname"), rank.get("pid"), rank.get("start_time"))
        for rank in ranks
    )


def rank_records(files: SourceFiles, prefix: str) -> Iterator[dict[str, Any]]:
    """Each rank file of the profiler output at ``prefix`` (``""`` or ending in ``/``), with
    ``ended`` set when its rank marked its end (``<node_id>.ended``); unreadable ones are
    skipped with a warning. Read as they are iterated: a status that needs none reads none."""
    folder = f"{prefix}framework/ranks"
    names = files.list_dir(folder)
    ended = {name.removesuffix(".ended") for name in names if name.endswith(".ended")}
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            document = orjson.loads(files.read_bytes(f"{folder}/{name}"))
        except (OSError, orjson.JSONDecodeError) as exc:
            logger.warning("Cannot read rank file %s/%s: %s", folder, name, exc)
            continue
        if isinstance(document, dict):
            yield {**document, "ended": document.get("node_id") in ended}
