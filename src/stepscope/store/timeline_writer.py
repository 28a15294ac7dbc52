"""The framework timeline writer: events to rotating SageMaker "pevents" Chrome-trace files.

Files come out exactly in SageMaker Debugger's format, so its readers and ours read them::

    [
    {"name":"process_name","ph":"M","pid":0,"args":{"start_time_since_epoch_in_micros":<µs>}},
    {"name":"process_sort_index","ph":"M","pid":0,"args":{"sort_index":0}},
    {"name":"process_name","ph":"M","pid":1,"args":{"name":"Step:ModeKeys.TRAIN"}},
    {"name":"process_sort_index","ph":"M","pid":1,"args":{"sort_index":1}},
    {"name":"Step:ModeKeys.TRAIN","pid":1,"ph":"X","ts":<µs since start>,"dur":<µs>,"args":{...}}
    ]

One record a line; a phase's ``process_name``/``process_sort_index`` pair is written the first
time the phase appears in a file. Phase pids are stable for the writer's life and start at 1.

**Off the training thread.** :meth:`TimelineWriter.write_event` only appends a tuple to a bounded
buffer, and :meth:`TimelineWriter.write_events` a whole batch of them for the same cost: when
``queue_size`` events are waiting, more are dropped and counted, never waited for. A daemon thread serializes events in batches and writes each batch with one ``write`` call.
The buffer is a ``deque`` rather than a ``queue.Queue``: an append costs the training thread a
fraction of a ``put_nowait`` (no lock, no condition variable), and the writer thread, once woken,
lingers 50 ms so a burst of events costs one wake-up and one system call.

**Rotation.** The open file (``framework/<node_id>_<suffix>.<pid>.tmp``) is closed when it grows
past ``file_max_size`` bytes (it exceeds it by at most one event) or ``file_close_interval_s``
seconds after it was opened, also while no event arrives. Closing finishes the JSON array, fsyncs,
and moves the file to ``framework/pevents/<YYYYMMDDHH>/<end_us>_<node_id>_<suffix>``, where
``end_us`` is the latest event end in the file; the move never overwrites (an equal name gets the
next µs). A closed file is therefore always complete, valid JSON, whatever happens to the process
afterwards; a ``kill -9`` leaves only the open ``.tmp`` file behind, and
:func:`~stepscope.store.timeline_files.recover_timeline_files` closes such files once their process is gone.

**Failures never reach the caller.** An unwritable or full disk logs one warning and drops the
affected events; once a file is written whole again, a message says so, and a disk that fails
again later (filled once more) gets a warning of its own. Consecutive failures to open or write a file are counted, and the count is reset
by every file closed successfully; when it reaches ``file_open_fail_threshold`` the writer logs
one warning and disables itself (every later event is dropped and counted). Differences from
SageMaker Debugger: its counter is cumulative (never reset) and counts only failed opens; its
queue blocks the training thread when full; it flushes after every event; its first phase gets
pid 0, colliding with the start-time metadata; its interval counts from the last close, so an
idle writer keeps its file open until the next event.

**Fork.** A writer inherited through ``fork`` (DataLoader workers) notices the pid change at its
next call and starts afresh in the child: a new buffer and thread and its own ``.tmp`` file (the
parent's open file is left untouched), and it is closed at the child's exit, including the
``os._exit`` of ``multiprocessing`` workers. Phase pids carry on from the parent's.
"""

from __future__ import annotations

import atexit
import collections
import functools
import logging
import math
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from stepscope._utf8 import utf8_text
from stepscope.errors import ConfigError
from stepscope.store.layout import TIMELINE_SUFFIXES, framework_dir, timeline_tmp_path
from stepscope.store.timeline_files import publish_closed_file

__all__ = ["TimelineEvent", "TimelineWriter"]

logger = logging.getLogger(__name__)

#: Events a writer thread takes from the buffer before writing them with one system call.
_BATCH_EVENTS = 4096
#: How long the writer thread lets events gather after being woken from idle.
_LINGER_S = 0.05
#: How long ``close()`` waits for the writer thread (also at interpreter exit).
_CLOSE_TIMEOUT_S = 5.0
_DUMPS_OPTIONS = orjson.OPT_NON_STR_KEYS

#: One queued event: ``(name, phase, start_us, dur_us, args, ph)``, as
#: :meth:`TimelineWriter.write_event` takes them.
TimelineEvent = tuple[str, str, float, float, "dict[str, Any] | None", str]


class TimelineWriter:
    """Writes framework events of one node id into rotating pevents files, off the caller's thread.

    :param profiler_output_dir: the profiler output folder (SageMaker's ``LocalPath``).
    :param node_id: ``<rank>-algo-<n>`` (see :func:`stepscope.store.layout.node_id_for`).
    :param suffix: the file kind, one of :data:`stepscope.store.layout.TIMELINE_SUFFIXES`.
    :param file_max_size: rotate once the open file is larger than this many bytes
        (SageMaker's ``RotateMaxFileSizeInBytes``; default 10 MiB).
    :param file_close_interval_s: close the open file this many seconds after opening it
        (SageMaker's ``RotateFileCloseIntervalInSeconds``; default 60).
    :param file_open_fail_threshold: consecutive failures to open or write a file after which the
        writer disables itself (SageMaker's ``FileOpenFailThreshold``; default 50).
    :param queue_size: events held in memory while the writer thread catches up; more are dropped.
    :param clock_s: wall clock in seconds since the epoch, used for each file's start time.
    :raises ConfigError: when a size, interval or threshold is not positive, or the suffix unknown.
    """

    def __init__(
        self,
        profiler_output_dir: str | Path,
        node_id: str,
        *,
        suffix: str = "pythontimeline.json",
        file_max_size: int = 10485760,
        file_close_interval_s: float = 60,
        file_open_fail_threshold: int = 50,
        queue_size: int = 100_000,
        clock_s: Callable[[], float] = time.time,
    ) -> None:
        if suffix not in TIMELINE_SUFFIXES:
            raise ConfigError("TimelineWriter.suffix", suffix, f"one of {list(TIMELINE_SUFFIXES)}")
        _require_positive("file_max_size", file_max_size, integer=True)
        _require_positive("file_close_interval_s", file_close_interval_s, integer=False)
        _require_positive("file_open_fail_threshold", file_open_fail_threshold, integer=True)
        _require_positive("queue_size", queue_size, integer=True)
        self._output_dir = Path(profiler_output_dir)
        self._node_id = node_id
        self._suffix = suffix
        self._file_max_size = file_max_size
        self._file_close_interval_s = float(file_close_interval_s)
        self._fail_threshold = file_open_fail_threshold
        self._queue_size = queue_size
        self._clock_s = clock_s
        # Stable for the writer's life, shared by all its files: a reader maps pid -> phase per
        # file, and SageMaker's maps it across files too.
        self._phase_pids: dict[str, int] = {}
        self._warned: set[str] = set()
        self._disabled = False
        self._closed = False
        self._dropped = 0
        self._atexit = functools.partial(_close_at_exit, weakref.ref(self))
        atexit.register(self._atexit)
        self._start_process_state()

    # -- caller side -------------------------------------------------------------------------

    @property
    def dropped_events(self) -> int:
        """Events dropped so far: queue full, writer disabled or closed, or a failed file."""
        return self._dropped

    @property
    def disabled(self) -> bool:
        """Whether the writer gave up after ``file_open_fail_threshold`` consecutive failures."""
        return self._disabled

    def write_event(
        self,
        name: str,
        phase: str,
        start_us: float,
        dur_us: float,
        args: dict[str, Any] | None = None,
        ph: str = "X",
    ) -> bool:
        """Queue one event for writing; never blocks and never raises.

        :param name: the event name (SageMaker's op name, e.g. the module name).
        :param phase: the training phase, written as the event's process name
            (``"Step:ModeKeys.TRAIN"``, ``"Forward"``, ``"DataLoaderWorker"`` ...).
        :param start_us: start, µs since the epoch.
        :param dur_us: duration in µs (ignored for instant events).
        :param args: JSON-able details (``step_num``, ``pid``, ``worker_id`` ...); the dict must
            not be changed after the call, it is serialized later on the writer thread.
        :param ph: ``"X"`` (span), ``"i"`` (instant), ``"B"``/``"E"`` (begin/end).
        :returns: ``False`` when the event was dropped.
        """
        try:
            if self._pid != os.getpid():
                self._restart_after_fork()
            if self._disabled or self._closed:
                self._count_dropped(1)
                return False
            if self._thread is None:
                self._start_thread()
            buffer = self._buffer
            if len(buffer) >= self._queue_size:
                self._count_dropped(1)
                self._warn_queue_full()
                return False
            buffer.append((name, phase, start_us, dur_us, args, ph))
            if self._idle:
                self._wake.set()
            return True
        except Exception:  # the guard of the training-thread entry point: never raise into it
            self._count_dropped(1)
            if "write-event" not in self._warned:
                self._warned.add("write-event")
                logger.exception("Timeline writer %s failed to queue an event", self._node_id)
            return False

    def write_events(self, events: list[TimelineEvent]) -> int:
        """Queue a batch of events for writing, at the cost of one :meth:`write_event`; never
        blocks and never raises.

        :param events: ``(name, phase, start_us, dur_us, args, ph)`` tuples, each as the
            parameters of :meth:`write_event`; the list and its args dicts must not be changed
            after the call. The writer takes the list over.
        :returns: how many events were queued; the rest (from the end of the list, when the queue
            is full) were dropped and counted.
        """
        count = 0
        try:
            count = len(events)
            if self._pid != os.getpid():
                self._restart_after_fork()
            if self._disabled or self._closed:
                self._count_dropped(count)
                return 0
            if self._thread is None:
                self._start_thread()
            buffer = self._buffer
            room = max(self._queue_size - len(buffer), 0)
            if room < count:
                self._count_dropped(count - room)
                self._warn_queue_full()
                events, count = events[:room], room
            buffer.extend(events)
            if self._idle:
                self._wake.set()
            return count
        except Exception:  # the guard of the training-thread entry point: never raise into it
            self._count_dropped(count)
            if "write-event" not in self._warned:
                self._warned.add("write-event")
                logger.exception("Timeline writer %s failed to queue events", self._node_id)
            return 0

    def close(self, timeout_s: float = _CLOSE_TIMEOUT_S) -> None:
        """Write every queued event, close the open file into ``pevents/`` and stop the thread.

        Idempotent, never raises; waits at most about ``timeout_s`` seconds. Called at
        interpreter exit for a writer that was not closed.
        """
        try:
            if self._pid != os.getpid():
                self._restart_after_fork()
            with self._lock:
                if self._closed:
                    return
                self._closed = True
            atexit.unregister(self._atexit)
            thread = self._thread
            if thread is not None and thread.is_alive():
                self._stop.set()
                self._wake.set()
                thread.join(timeout_s)
                if thread.is_alive():
                    logger.warning(
                        "Timeline writer %s did not finish within %.1f s; its open file may be "
                        "lost.",
                        self._node_id,
                        timeout_s,
                    )
                    return
            self._drop_queued()  # events queued while the writer was being disabled
        except Exception:  # close() is called from exit paths: never raise there
            logger.exception("Timeline writer %s failed to close", self._node_id)

    # -- per-process state -------------------------------------------------------------------

    def _start_process_state(self) -> None:
        """Fresh thread, buffer and locks for the current process (construction and after fork)."""
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._buffer: collections.deque[TimelineEvent] = collections.deque()
        self._wake = threading.Event()  # set by write_event(s)() when the writer thread is idle
        self._idle = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fd: int | None = None
        self._tmp_path: Path | None = None
        self._file_size = 0
        self._file_opened_s = 0.0
        self._file_start_us = 0
        self._file_end_us = 0.0
        self._file_phases: set[str] = set()
        self._consecutive_failures = 0

    def _restart_after_fork(self) -> None:
        """Forget the parent's thread and open file in a forked child (see the module docstring)."""
        inherited_fd = self._fd
        was_closed = self._closed
        self._start_process_state()
        if inherited_fd is not None:
            try:
                os.close(inherited_fd)  # the child's copy only; the parent keeps writing its file
            except OSError:
                logger.debug("inherited timeline fd already closed", exc_info=True)
        if was_closed:
            return
        atexit.unregister(self._atexit)  # os.fork keeps the parent's registration: keep one
        atexit.register(self._atexit)
        mp_util = sys.modules.get("multiprocessing.util")
        if mp_util is not None:
            # multiprocessing children leave through os._exit, which skips atexit handlers.
            mp_util.Finalize(self, self.close, exitpriority=10)

    def _start_thread(self) -> None:
        with self._lock:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(
                target=self._run, name=f"stepscope-timeline-{self._suffix}", daemon=True
            )
            self._thread.start()

    def _count_dropped(self, count: int) -> None:
        with self._lock:
            self._dropped += count

    def _warn_queue_full(self) -> None:
        self._warn_once(
            "queue-full",
            "Timeline writer %s: %d events are waiting to be written; dropping events "
            "until the writer catches up. Lower the event rate or raise queue_size.",
            self._node_id,
            self._queue_size,
        )

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message, *args)

    # -- writer thread -----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except Exception:
            logger.exception(
                "Timeline writer %s stopped on an unexpected error; events are dropped from now on",
                self._node_id,
            )
            self._disabled = True
        finally:
            self._close_file()
            self._drop_queued()

    def _loop(self) -> None:
        buffer = self._buffer
        while not self._disabled:
            if not buffer:
                if self._stop.is_set():
                    return
                self._wait_for_events()
                if not buffer:  # the interval ended while idle
                    if self._fd is not None and self._seconds_to_interval_close() == 0.0:
                        self._close_file()
                    continue
            # only this thread pops, so the length can only grow meanwhile
            self._write_batch([buffer.popleft() for _ in range(min(len(buffer), _BATCH_EVENTS))])
            if self._fd is not None and self._seconds_to_interval_close() == 0.0:
                self._close_file()

    def _wait_for_events(self) -> None:
        """Sleep until events arrive (then let a burst gather), the interval ends, or close()."""
        self._wake.clear()
        self._idle = True  # write_event(s)() now set the wake event; the buffer is re-checked below
        try:
            if self._buffer or not self._wake.wait(self._seconds_to_interval_close()):
                return
        finally:
            self._idle = False
        self._stop.wait(_LINGER_S)

    def _seconds_to_interval_close(self) -> float | None:
        if self._fd is None:
            return None
        elapsed_s = time.monotonic() - self._file_opened_s
        return max(0.0, self._file_close_interval_s - elapsed_s)

    def _write_batch(self, events: list[TimelineEvent]) -> None:
        """Write ``events`` to the open file, opening and rotating files as needed."""
        try:
            valid = [(n, p, float(s), float(d), a, ph) for n, p, s, d, a, ph in events]
        except (TypeError, ValueError):
            valid = self._valid_events(events)
        done = 0
        while done < len(valid):
            if self._disabled:  # only after a failure, which leaves no open file
                self._count_dropped(len(valid) - done)
                return
            if self._fd is None and not self._open_file(valid[done][2]):
                self._count_dropped(1)
                done += 1
                continue
            done += self._write_to_open_file(valid[done:])

    def _valid_events(self, events: list[TimelineEvent]) -> list[TimelineEvent]:
        """``events`` whose start and duration are numbers (as floats); the others are dropped."""
        valid = []
        for event in events:
            try:
                valid.append(
                    (event[0], event[1], float(event[2]), float(event[3]), event[4], event[5])
                )
            except (TypeError, ValueError, IndexError):
                self._count_dropped(1)
                self._warn_once(
                    "bad-event",
                    "Timeline writer %s: dropping events whose start or duration is not a number, "
                    "or that are not (name, phase, start_us, dur_us, args, ph) (first: %r).",
                    self._node_id,
                    event,
                )
        return valid

    def _write_to_open_file(self, events: list[TimelineEvent]) -> int:
        """Serialize ``events`` against the open file's start time and write them, up to the
        first that makes the file rotate (included); returns how many were written or dropped."""
        records = self._serialize(events)
        size = sum(map(len, records))
        if self._file_size + size <= self._file_max_size and self._file_phases.issuperset(
            {event[1] for event in events}
        ):
            # the common case: no new phase, no rotation: one write, the latest end at once
            end_us = max(start + dur if ph == "X" else start for _, _, start, dur, _, ph in events)
            if not math.isfinite(end_us):
                end_us = max(
                    (e[2] + e[3] if e[5] == "X" else e[2] for e in events),
                    key=lambda value: value if math.isfinite(value) else -math.inf,
                )
            if end_us > self._file_end_us and math.isfinite(end_us):
                self._file_end_us = end_us
            self._file_size += size
            self._flush(records, len(events))
            return len(events)
        chunks: list[bytes] = []  # serialized, not yet written (all for the open file)
        for index, (event, record) in enumerate(zip(events, records, strict=True)):
            phase = event[1]
            if phase not in self._file_phases:
                self._file_phases.add(phase)
                pid = self._phase_pids[phase]
                chunks.append(
                    _record(
                        {"name": "process_name", "ph": "M", "pid": pid, "args": {"name": phase}}
                    )
                    + _record(
                        {
                            "name": "process_sort_index",
                            "ph": "M",
                            "pid": pid,
                            "args": {"sort_index": pid},
                        }
                    )
                )
                self._file_size += len(chunks[-1])
            chunks.append(record)
            self._file_size += len(record)
            end_us = event[2] + event[3] if event[5] == "X" else event[2]
            if end_us > self._file_end_us and math.isfinite(end_us):
                self._file_end_us = end_us
            if self._file_size > self._file_max_size:
                if self._flush(chunks, index + 1):
                    self._close_file()
                return index + 1
        if chunks:
            self._flush(chunks, len(events))
        return len(events)

    def _serialize(self, events: list[TimelineEvent]) -> list[bytes]:
        """Each event's record as written in the open file (``,\\n`` then compact JSON).

        One ``orjson.dumps`` serializes the whole burst, which is then cut at the records'
        boundaries (``},{"name":``, which JSON strings cannot contain unescaped); when the cut
        is ambiguous (an args value holding such dicts) or the burst cannot be serialized
        whole, each record is serialized on its own.
        """
        file_start_us = self._file_start_us
        phase_pids = self._phase_pids
        records: list[dict[str, Any]]
        if {event[5] for event in events} == {"X"} and phase_pids.keys() >= {
            event[1] for event in events
        }:
            records = [
                {
                    "name": name,
                    "pid": phase_pids[phase],
                    "ph": "X",
                    "ts": start_us - file_start_us,
                    "dur": dur_us,
                    "args": args if args is not None else {},
                }
                for name, phase, start_us, dur_us, args, _ in events
            ]
            return self._cut(records)
        records = []
        for name, phase, start_us, dur_us, args, ph in events:
            pid = phase_pids.get(phase)
            if pid is None:
                pid = phase_pids[phase] = len(phase_pids) + 1
            record: dict[str, Any] = {
                "name": name,
                "pid": pid,
                "ph": ph,
                "ts": start_us - file_start_us,
            }
            if ph == "X":
                record["dur"] = dur_us
            elif ph == "i":
                record["s"] = "p"
            record["args"] = args if args is not None else {}
            records.append(record)
        return self._cut(records)

    @staticmethod
    def _cut(records: list[dict[str, Any]]) -> list[bytes]:
        """Serialize ``records`` in one call and cut the result into records (see above)."""
        try:
            burst: bytes | None = orjson.dumps(records, default=repr, option=_DUMPS_OPTIONS)
        except (TypeError, orjson.JSONEncodeError):
            burst = None
        if burst is not None and burst.count(_BOUNDARY) == len(records) - 1:
            body = burst[len(_BURST_START) : -len(_BURST_END)]
            return [_RECORD_START + piece + b"}" for piece in body.split(_BOUNDARY)]
        return [_record_or_repr(record) for record in records]

    def _open_file(self, first_start_us: float) -> bool:
        tmp_path = timeline_tmp_path(self._output_dir, self._node_id, self._suffix, self._pid)
        try:
            framework_dir(self._output_dir).mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            self._record_failure(f"could not open {tmp_path}: {exc}")
            return False
        self._fd = fd
        self._tmp_path = tmp_path
        self._file_opened_s = time.monotonic()
        self._file_start_us = int(min(self._clock_s() * 1e6, first_start_us))
        self._file_end_us = float(self._file_start_us)
        self._file_phases = set()
        start_record = {
            "name": "process_name",
            "ph": "M",
            "pid": 0,
            "args": {"start_time_since_epoch_in_micros": self._file_start_us},
        }
        sort_record = {"name": "process_sort_index", "ph": "M", "pid": 0, "args": {"sort_index": 0}}
        # Every record starts with ",\n" (so closing only appends "\n]\n"); the first one's goes.
        header = b"[\n" + _record(start_record)[2:] + _record(sort_record)
        self._file_size = len(header)
        return self._flush([header], 0)

    def _flush(self, chunks: list[bytes], events: int) -> bool:
        """Write ``chunks`` (holding ``events`` events) to the open file in one call."""
        data = b"".join(chunks)
        try:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)  # type: ignore[arg-type]
                view = view[written:]
        except OSError as exc:
            self._count_dropped(events)
            self._abandon_file(f"could not write {self._tmp_path}: {exc}")
            return False
        return True

    def _close_file(self) -> None:
        """Finish the JSON array, fsync, and move the open file into ``pevents/``."""
        fd, tmp_path = self._fd, self._tmp_path
        if fd is None or tmp_path is None:
            return
        self._fd = None
        try:
            os.write(fd, b"\n]\n")
            os.fsync(fd)
        except OSError as exc:
            _close_fd(fd)
            self._discard(tmp_path)
            self._record_failure(f"could not finish {tmp_path}: {exc}")
            return
        _close_fd(fd)
        try:
            publish_closed_file(
                tmp_path, self._output_dir, int(self._file_end_us), self._node_id, self._suffix
            )
        except OSError as exc:
            self._record_failure(f"could not move {tmp_path} into pevents: {exc}")
            return
        self._consecutive_failures = 0
        if "file-failure" in self._warned:  # files get through again: a later failure is news
            self._warned.discard("file-failure")
            logger.info("Timeline writer %s: files are written again.", self._node_id)

    def _abandon_file(self, reason: str) -> None:
        """Drop the open file after a failed write (its tail is unknown, so it cannot be kept)."""
        fd, tmp_path = self._fd, self._tmp_path
        self._fd = None
        if fd is not None:
            _close_fd(fd)
        if tmp_path is not None:
            self._discard(tmp_path)
        self._record_failure(reason)

    def _discard(self, path: Path) -> None:
        try:
            path.unlink()
        except OSError:
            logger.debug("could not remove %s", path, exc_info=True)

    def _record_failure(self, reason: str) -> None:
        self._consecutive_failures += 1
        self._warn_once(
            "file-failure",
            "Timeline writer %s: %s. Events are dropped while files cannot be written; "
            "check free space and permissions of the profiler output folder.",
            self._node_id,
            reason,
        )
        if self._consecutive_failures >= self._fail_threshold and not self._disabled:
            self._disabled = True
            logger.warning(
                "Timeline writer %s disabled after %d consecutive file failures "
                "(FrameworkProfile.file_open_fail_threshold=%d); last: %s. No more %s events "
                "are written by this process.",
                self._node_id,
                self._consecutive_failures,
                self._fail_threshold,
                reason,
                self._suffix,
            )

    def _drop_queued(self) -> None:
        dropped = 0
        while self._buffer:
            self._buffer.popleft()
            dropped += 1
        self._count_dropped(dropped)


#: Where one record ends and the next begins in a serialized burst (every record starts with
#: its name), and how a burst starts and ends.
_BOUNDARY = b'},{"name":'
_BURST_START = b'[{"name":'
_BURST_END = b"}]"
_RECORD_START = b',\n{"name":'


def _record_or_repr(record: dict[str, Any]) -> bytes:
    """:func:`_record`, with a name that is no UTF-8 text (a lone surrogate, as
    ``os.fsdecode`` makes of a file name's undecodable bytes) written with U+FFFD in its place,
    and args orjson rejects written as their ``repr``."""
    try:
        return _record(record)
    except (TypeError, orjson.JSONEncodeError):
        record["name"] = utf8_text(str(record["name"]))
    try:
        return _record(record)
    except (TypeError, orjson.JSONEncodeError):
        record["args"] = {"unserializable_args": repr(record["args"])}
        return _record(record)


def _record(record: dict[str, Any]) -> bytes:
    """One array element as written in the file: ``,\\n`` then the compact JSON object."""
    return b",\n" + orjson.dumps(record, default=repr, option=_DUMPS_OPTIONS)


def _close_fd(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        logger.debug("closing a timeline file failed", exc_info=True)


def _require_positive(parameter: str, value: Any, *, integer: bool) -> None:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        allowed = "an integer > 0" if integer else "a number > 0"
        raise ConfigError(f"TimelineWriter.{parameter}", value, allowed)


def _close_at_exit(writer_ref: weakref.ref[TimelineWriter]) -> None:
    writer = writer_ref()
    if writer is not None:
        writer.close()
