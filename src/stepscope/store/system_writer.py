"""The system-metrics writer: JSON-lines records, one file per node and minute, and the job end marker.

Each record is one line, exactly as SageMaker's host agent writes it::

    {"Type":"cpu","Name":"cpu0","Dimension":"CPUUtilization","Value":12.5,"NodeId":"algo-1","Timestamp":1591748109.2321954}

in ``system/incremental/<YYYYMMDDHH>/<epoch_minute_s>.<node>.json`` (the minute and hour of the
record's own timestamp, UTC). Files are only appended to, and each :meth:`SystemMetricsWriter.write`
call ends with one ``write`` system call per file it touches, so a reader sees whole lines and a
``kill -9`` loses at most the records of the call in progress (a torn last line is what every
reader of this format tolerates). A failing disk logs one warning and drops records while it
lasts; nothing is raised, and the part of a failed write that reached the file is cut off again.
Once writing works again, a message says how many records were lost, and a disk that fails again
later (filled once more) gets a warning of its own. A file removed while it is written (its folder
deleted) is made again at the next write, with a warning.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import NamedTuple

import orjson

from stepscope.errors import ConfigError
from stepscope.store.layout import (
    NODE_NAME_RE,
    job_end_marker_path,
    job_end_marker_paths,
    minute_start_s,
    system_file_path,
)

__all__ = ["SystemMetricsWriter", "SystemRecord", "write_job_end_marker"]

logger = logging.getLogger(__name__)


class SystemRecord(NamedTuple):
    """One system-metric sample (a line of a system file, without the node).

    :param type: ``cpu``, ``gpu``, ``memory``, ``i/o`` or ``network``.
    :param name: ``cpu0``, ``gpu3``, ``MemoryUsedPercent``, ``IOPS``, ``ReceiveBytesPerSecond`` ...
    :param dimension: ``CPUUtilization``, ``I/OWaitPercentage``, ``GPUUtilization``,
        ``GPUMemoryUtilization``, ``Algorithm`` (network) or ``""``.
    :param value: the value in the dimension's unit (%, ops/s, B/s).
    :param timestamp_s: when it was sampled, seconds since the epoch.
    """

    type: str
    name: str
    dimension: str
    value: float
    timestamp_s: float


class SystemMetricsWriter:
    """Appends system records of one node to per-minute files.

    :param profiler_output_dir: the profiler output folder (SageMaker's ``LocalPath``).
    :param node: the node name, ``algo-<n>`` (SageMaker's readers ignore any other name).
    :raises ConfigError: when ``node`` is not ``algo-<n>``.
    """

    def __init__(self, profiler_output_dir: str | Path, node: str = "algo-1") -> None:
        if NODE_NAME_RE.match(node) is None:
            raise ConfigError("SystemMetricsWriter.node", node, "'algo-<n>' with n >= 1")
        self._output_dir = Path(profiler_output_dir)
        self._node = node
        self._fd: int | None = None
        self._fd_minute_s: int | None = None
        self._dropped = 0
        #: records dropped since writing last failed after working (None while it works)
        self._failing_dropped: int | None = None

    @property
    def dropped_records(self) -> int:
        """Records that could not be written (disk full, unwritable folder)."""
        return self._dropped

    def write(self, records: Iterable[SystemRecord]) -> int:
        """Append ``records`` to the files of their minutes; disk errors are logged, not raised.

        :returns: how many records were written.
        :raises TypeError, ValueError: for a value or timestamp that is not a number.
        """
        lines_by_minute: dict[int, list[bytes]] = {}
        for record in records:
            line = orjson.dumps(
                {
                    "Type": record.type,
                    "Name": record.name,
                    "Dimension": record.dimension,
                    "Value": float(record.value),  # also numpy scalars, which orjson refuses
                    "NodeId": self._node,
                    "Timestamp": float(record.timestamp_s),
                }
            )
            lines_by_minute.setdefault(minute_start_s(record.timestamp_s), []).append(line)
        written = 0
        for minute_s, lines in lines_by_minute.items():
            if self._append(minute_s, b"\n".join(lines) + b"\n"):
                written += len(lines)
                self._recovered()
            else:
                self._dropped += len(lines)
                self._failing_dropped = (self._failing_dropped or 0) + len(lines)
        return written

    def _recovered(self) -> None:
        """After failures, say that records are written again and how many were lost."""
        if self._failing_dropped is not None:
            logger.info(
                "System metrics for %s are written again; %d records were dropped.",
                self._node,
                self._failing_dropped,
            )
            self._failing_dropped = None

    def close(self) -> None:
        """Close the open minute file (later writes reopen files as needed)."""
        if self._fd is not None:
            _close_fd(self._fd)
            self._fd = self._fd_minute_s = None

    def __enter__(self) -> SystemMetricsWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _append(self, minute_s: int, data: bytes) -> bool:
        path = system_file_path(self._output_dir, self._node, minute_s)
        size_before = None
        try:
            if self._fd is not None and self._fd_minute_s == minute_s and _removed(self._fd):
                # its folder was deleted: writing on would lose the rest of the minute unseen
                logger.warning(
                    "The system metrics file %s was removed; writing into a new one.", path
                )
                self.close()
            if self._fd_minute_s != minute_s:
                self.close()
                path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                self._fd_minute_s = minute_s
            assert self._fd is not None
            size_before = os.fstat(self._fd).st_size
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            self._cut_torn_write(size_before)
            self.close()
            if self._failing_dropped is None:  # it worked until now: once per failing spell
                logger.warning(
                    "System metrics for %s could not be written to %s (%s); records are dropped "
                    "while this lasts. Check free space and permissions of the profiler output "
                    "folder.",
                    self._node,
                    path,
                    exc,
                )
            return False
        return True

    def _cut_torn_write(self, size_before: int | None) -> None:
        """Remove the part of a failed write that reached the file (a full disk writes part).

        Otherwise the torn line would sit in the middle of the file once writing works again,
        and SageMaker's reader refuses a file with a corrupt line that is not the last.
        """
        if self._fd is None or size_before is None:
            return
        try:
            os.ftruncate(self._fd, size_before)
        except OSError:
            logger.debug("could not cut a torn system-metrics write", exc_info=True)


def write_job_end_marker(profiler_output_dir: str | Path) -> Path:
    """Mark the job as finished: readers, rules and the monitor stop waiting for data.

    Writes the empty ``training_job_end.ts`` at the root of the profiler output (stepscope's
    place) and in ``system/`` (where SageMaker Debugger's ``ProfilerTrial`` looks).

    :returns: the root marker's path.
    :raises OSError: when the root marker cannot be created.
    """
    root_marker = job_end_marker_path(profiler_output_dir)
    root_marker.parent.mkdir(parents=True, exist_ok=True)
    root_marker.touch()
    system_marker = job_end_marker_paths(profiler_output_dir)[1]
    try:
        system_marker.parent.mkdir(parents=True, exist_ok=True)
        system_marker.touch()
    except OSError as exc:
        logger.warning(
            "Could not write %s (%s); smdebug will not see the job end.", system_marker, exc
        )
    return root_marker


def _removed(fd: int) -> bool:
    """Whether the file open at ``fd`` no longer has a name (deleted, or its folder was)."""
    return os.fstat(fd).st_nlink == 0


def _close_fd(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        logger.debug("closing a system metrics file failed", exc_info=True)
