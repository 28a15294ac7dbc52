"""A job's status: one answer for the job list, the Information page, ``JobData.metadata``,
the report and ``stepscope update``.

A job records that it runs, and later how it ended: ``job.json``'s ``status`` for a launched
job, ``training_job_end.ts`` for profiler output without ``job.json`` (``stepscope.profile()``,
SageMaker Debugger). A process killed before it recorded the end (the launcher, or every rank
of a ``profile()`` job, by SIGKILL or the OOM killer) leaves the job recorded as running for
ever. So the process that would record the end is named by its host, pid and start (and so is
the command a launcher runs, ``command_process``, which may outlive it); on
Linux also by the kernel's boot id, its pid namespace and its start in clock ticks since boot
(which, unlike the wall-clock start time the system derives from the boot time, does not move
when NTP steps the clock). A reader in the same boot and pid namespace tells it is gone when its
pid no longer runs, or runs a process started at another tick (the pid was reused); a reader on
the same host after a reboot, when the host booted after the process started. A job recorded as
running whose processes are gone has **Failed**: it ended without recording how. From another
host, or another container of this host (another pid namespace, whose pids are not this one's,
though its host name may be the same), nothing can be told, and the record stands. Records
without the Linux fields (another system) are judged by host name and wall-clock start time.
A ``job.json`` that cannot be read is taken as none: the status comes from the profiler output.
"""

from __future__ import annotations

import functools
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
from stepscope.store.timeline_files import pid_running

__all__ = [
    "WRITTEN_LATELY_S",
    "Status",
    "dead_writers",
    "job_status",
    "output_status",
    "process_gone",
    "process_identity",
    "rank_records",
    "running_rank_ids",
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


def process_identity(pid: int | None = None) -> dict[str, Any]:
    """Process ``pid`` of this host (default this one), as a reader can later tell it is gone:
    ``host``, ``pid``, ``start_time`` (seconds since the epoch; None when the system does not
    say) and, on Linux, ``boot_id``, ``pid_namespace`` and ``start_ticks`` (see the module
    docstring)."""
    import psutil

    pid = os.getpid() if pid is None else pid
    try:
        start_time: float | None = psutil.Process(pid).create_time()
    except (psutil.Error, OSError):
        start_time = None
    identity: dict[str, Any] = {"host": socket.gethostname(), "pid": pid, "start_time": start_time}
    system, ticks = _this_system(), _start_ticks(pid)
    if system is not None and ticks is not None:
        identity.update(boot_id=system[0], pid_namespace=system[1], start_ticks=ticks)
    return identity


def process_gone(host: object, record: Mapping[str, Any]) -> bool:
    """Whether the process ``record`` names (:func:`process_identity`'s fields but its host),
    run on ``host``, is known to have ended: False when it runs, and when that cannot be told
    (another host or container, no pid, or a pid that runs with no start to compare)."""
    pid = record.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool):
        return False
    start_time = record.get("start_time")
    if not isinstance(start_time, (int, float)) or isinstance(start_time, bool):
        start_time = None
    system = _this_system()
    if system is not None and isinstance(record.get("boot_id"), str):
        if record["boot_id"] != system[0]:
            # this host restarted since, or another host has its name: only the first is told
            return (
                host == socket.gethostname()
                and start_time is not None
                and (_boot_time() > start_time + _START_TIME_TOLERANCE_S)
            )
        if record.get("pid_namespace") != system[1]:
            return False  # another container's pid: not one this namespace can look up
        ticks = _start_ticks(pid)
        if ticks is None:
            return not pid_running(pid)  # a pid hidden from this user (hidepid) runs
        return ticks != record.get("start_ticks") or _zombie(pid)
    if host != socket.gethostname():
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
    return start_time is not None and abs(started - start_time) > _START_TIME_TOLERANCE_S


@functools.cache
def _this_system() -> tuple[str, str] | None:
    """This kernel's boot id and this process's pid namespace (None off Linux)."""
    try:
        boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return boot_id, os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (None when there is no such process to
    read, or off Linux)."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields is not None else None


def _zombie(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is not None and fields[0] == "Z"


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (the state first)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def _boot_time() -> float:
    import psutil

    return float(psutil.boot_time())


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
        if not process_gone(host, launcher):
            # it runs (maybe finishing after the end marker), or another host cannot tell
            return Status(COMPLETED if ended and host != socket.gethostname() else RUNNING)
        command = job.get("command_process")
        if isinstance(command, Mapping) and not process_gone(host, command):
            return Status(RUNNING)  # the command outlived its launcher
        if _running_ranks(ranks):
            return Status(RUNNING)  # and so did a rank it started
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


def running_rank_ids(output: Path) -> set[str]:
    """The ``node_id`` of each rank of the local profiler output folder ``output`` that may
    still run (a process that profiles into it, or may: see :func:`_may_run`)."""
    return {
        str(rank.get("node_id")) for rank in rank_records(LocalFiles(output), "") if _may_run(rank)
    }


def _running_ranks(ranks: Iterable[Mapping[str, Any]]) -> bool:
    """Whether any of ``ranks`` may still run."""
    return any(_may_run(rank) for rank in ranks)


def _may_run(rank: Mapping[str, Any]) -> bool:
    """Whether a rank may still run: it did not mark its end, and is not known to be gone."""
    return not rank.get("ended") and not process_gone(rank.get("hostname"), rank)


def dead_writers(ranks: Iterable[Mapping[str, Any]]) -> set[tuple[str, int]]:
    """``(node_id, pid)`` of each rank whose process is known gone: the open timeline files it
    left (``framework/<node_id>_<suffix>.<pid>.tmp``) will not grow again."""
    return {
        (str(rank.get("node_id")), rank["pid"])
        for rank in ranks
        if isinstance(rank.get("pid"), int) and process_gone(rank.get("hostname"), rank)
    }


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
