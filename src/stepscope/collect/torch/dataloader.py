"""Data-loader profiling: iterator initialisation, every ``GetNext``, every worker's lifetime.

Events go to the node's ``model_timeline`` file with the names and args SageMaker's
``PT_dataloader_analysis`` reads (the AWS PyTorch containers wrote the same):

* ``DataLoaderIterInitialize`` / ``_MultiProcessingDataLoaderIter.__init__`` (or
  ``_SingleProcessDataLoaderIter.__init__``), args ``num_workers``, ``pin_memory``, ``pid``;
* ``DataLoaderIter`` / ``DataLoaderIter::GetNext``, args ``worker_id`` (the worker that produced
  the batch, ``-1`` in the main process), ``pid``;
* ``DataLoaderWorker`` / ``DataLoaderWorker``, args ``worker_id`` and the worker's own ``pid``,
  spanning the worker loop, measured inside the worker.

A worker is a process whose exit skips ``atexit`` and which must not touch its parent's writer
threads, so it reports its lifetime in a report file of the session's: one line of at most a
hundred bytes as its loop starts and one as it ends, each appended in one write (a failed write
drops it). On Linux the file loses its name as soon as it is made and workers open it through
``/proc/<pid>/fd/<fd>``: a training process killed before its session stops (SIGTERM's default
action, SIGKILL) leaves no file behind; elsewhere it keeps its name until the session stops.
The training process reads the new lines at step boundaries and when the session stops; a
worker still running then (``persistent_workers``, a loader alive to the end of the script) is
written as living until the stop. The loop torch runs in each worker is a picklable object
naming only that file, so workers started by any method (``fork``, ``spawn``, ``forkserver``:
the data loader's ``multiprocessing_context``) report. A worker records nothing else, even when
its dataset runs a model.

Which events are kept: ``DataloaderProfilingConfig``'s step or time range (checked against the
step about to run), and its ``metrics_regex``, matched (``re.search``) against the event name or
its phase.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch.utils.data._utils.worker as _worker_module
from torch.utils.data import dataloader as _dataloader

from stepscope.collect.clock import now_us
from stepscope.collect.session import Session, forget_session
from stepscope.collect.torch.patches import Patches
from stepscope.store.timeline_files import pid_running

__all__ = ["DataLoaderHooks"]

logger = logging.getLogger(__name__)

SUFFIX = "model_timeline.json"
_INIT_PHASE = "DataLoaderIterInitialize"
_GETNEXT_PHASE = "DataLoaderIter"
_GETNEXT_NAME = "DataLoaderIter::GetNext"
_WORKER_PHASE = "DataLoaderWorker"
_MAX_REPORT_READ_BYTES = 65536
#: Seconds between two reads of the worker report file at step ends (a worker reports as it
#: starts and as it ends)
_DRAIN_INTERVAL_S = 1.0
#: the attribute of a multi-process iterator that holds the worker of its last batch (an
#: iterator in the main process has none: ``-1``)
_WORKER_ATTR = "_stepscope_worker_id"


class DataLoaderHooks:
    """Patches the data-loader iterators and the worker loop for one session.

    :param session: where events go; its ``active["dataloader"]`` says when to record.
    :param on_new_iterator: called (guarded) with the data loader whenever one of its iterators
        is created, profiled or not: a new epoch or evaluation loop begins (the model finder
        re-arms there, and the step hooks tell an epoch from an evaluation by its loader).
    """

    def __init__(
        self, session: Session, *, on_new_iterator: Callable[[Any], None] | None = None
    ) -> None:
        self.session = session
        self._on_new_iterator = on_new_iterator
        framework = session.config.framework_profile_params
        option = getattr(framework, "dataloader_profiling_config", None)
        self._regex = re.compile(getattr(option, "metrics_regex", None) or ".*")
        self._wanted: dict[str, bool] = {}
        self._patches = Patches()
        #: the loop torch runs in each worker; it gets the report file workers append to when
        #: the first iterator with workers is made (so a process that makes none has no file)
        self._worker_loop = ReportingWorkerLoop("")
        self._report_file_failed = False
        self._read_fd = -1
        #: the report file's name while it has one (off Linux), to remove at the stop
        self._named_report_file = ""
        self._partial = b""
        #: pid -> (worker id, start µs) of the workers that reported their start but not their end
        self._running_workers: dict[int, tuple[int, float]] = {}
        #: an iterator with worker processes was created: reports can arrive
        self._workers_started = False
        self._last_drain_s = 0.0
        # the hull of the times the option was active: a worker that lived through it is kept
        self._first_active_us: float | None = None
        self._last_active_us: float | None = None
        guard = session.guard
        self._open_report_file = guard.wrap("torch.dataloader_workers", self._make_report_file)
        self._begin_loop = guard.wrap("torch.dataloader_init", self._new_loop)
        self._record_init = guard.wrap("torch.dataloader_init", self._on_init)
        self._record_next = guard.wrap("torch.dataloader_getnext", self._on_next)
        self._told_the_worker = process_data_is_told_the_worker(
            _dataloader._MultiProcessingDataLoaderIter
        )
        self._peek_worker = guard.wrap("torch.dataloader_worker_id", _next_worker_id)
        self.drain = guard.wrap("torch.dataloader_workers", self._drain)

    def wanted(self, name: str, phase: str) -> bool:
        """Whether ``metrics_regex`` keeps an event named ``name`` of ``phase`` (memoized)."""
        key = f"{phase}\x00{name}"
        keep = self._wanted.get(key)
        if keep is None:
            keep = bool(self._regex.search(name) or self._regex.search(phase))
            self._wanted[key] = keep
        return keep

    # -- install --------------------------------------------------------------------------

    def install(self) -> None:
        for cls in (
            _dataloader._SingleProcessDataLoaderIter,
            _dataloader._MultiProcessingDataLoaderIter,
        ):
            self._patches.wrap(cls, "__init__", self._wrap_init)
        self._patches.wrap(_dataloader._MultiProcessingDataLoaderIter, "_reset", self._wrap_reset)
        if self._told_the_worker:
            self._patches.wrap(
                _dataloader._MultiProcessingDataLoaderIter, "_process_data", _noting_the_worker
            )
        self._patches.wrap(_dataloader._BaseDataLoaderIter, "__next__", self._wrap_next)
        self._patches.replace(_worker_module, "_worker_loop", self._worker_loop)

    def remove(self) -> None:
        self.drain()
        self._patches.restore()
        if self._read_fd >= 0:
            try:
                os.close(self._read_fd)
                if self._named_report_file:
                    os.unlink(self._named_report_file)
            except OSError:
                logger.debug("removing the worker report file failed", exc_info=True)
        self._read_fd = -1

    # -- step listener: worker reports are written at step boundaries ---------------------

    def on_start(self, session: Session) -> None:
        """Nothing to open: workers report when they end."""

    def on_step_end(self, session: Session, step: int) -> None:
        # a read that finds nothing (a system call) costs more than the rest of a step's
        # bookkeeping: read only once workers exist, about once a second
        if self._workers_started and time.monotonic() - self._last_drain_s >= _DRAIN_INTERVAL_S:
            self.drain()

    def on_stop(self, session: Session) -> None:
        self.drain()
        now = now_us()
        for pid, (worker_id, start) in self._running_workers.items():
            if pid_running(pid):  # else it was killed, at a time no one knows
                self._write_worker_event(worker_id, pid, start, now)
        self._running_workers = {}

    # -- the main process ------------------------------------------------------------------

    def _note_active(self, at_us: float) -> None:
        if self._first_active_us is None:
            self._first_active_us = at_us
        self._last_active_us = at_us

    def _wrap_init(self, original: Any) -> Any:
        hooks = self

        def __init__(iterator: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
            start = now_us()
            # the loop begins before its workers start: the step it feeds holds their start
            hooks._begin_loop(loader, start)
            hooks._open_report_file(loader)  # before the workers start
            original(iterator, loader, *args, **kwargs)
            hooks._record_init(iterator, start, now_us())

        __init__.__wrapped__ = original  # type: ignore[attr-defined]
        return __init__

    def _wrap_reset(self, original: Any) -> Any:
        """A persistent-workers loader starts every epoch after its first on the iterator it
        kept (``_reset``, no ``__init__``): a new loop all the same."""
        begin_loop = self._begin_loop

        def _reset(iterator: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
            if not kwargs.get("first_iter", args[0] if args else False):  # else __init__ runs it
                begin_loop(loader, now_us())
            original(iterator, loader, *args, **kwargs)

        _reset.__wrapped__ = original  # type: ignore[attr-defined]
        return _reset

    def _new_loop(self, loader: Any, start_us: float) -> None:
        """A loop over ``loader`` begins (an epoch, an evaluation) at ``start_us``."""
        if not self.session.enabled:
            return
        if self._on_new_iterator is not None:
            self._on_new_iterator(loader)
        self.session.mark_boundary(start_us)

    def _make_report_file(self, loader: Any) -> None:
        """Make the report file for a loader's workers, if it has workers and there is none."""
        if self._worker_loop.report_path or self._report_file_failed:
            return
        if not getattr(loader, "num_workers", 0) or not self.session.enabled:
            return
        try:
            self._read_fd, name = tempfile.mkstemp(prefix="stepscope-workers-", suffix=".jsonl")
        except OSError as exc:
            logger.warning("stepscope: no file for data-loader worker events (%s)", exc)
            self._report_file_failed = True
            return
        status = os.fstat(self._read_fd)
        self._worker_loop.file_id = (status.st_dev, status.st_ino)
        self._worker_loop.report_path = _path_without_name(self._read_fd, name)
        if self._worker_loop.report_path == name:
            self._named_report_file = name

    def _on_init(self, iterator: Any, start_us: float, end_us: float) -> None:
        session = self.session
        if not session.enabled:
            return
        if getattr(iterator, "_num_workers", 0):
            self._workers_started = True
        if not session.active["dataloader"]:
            return
        self._note_active(end_us)
        name = f"{type(iterator).__name__}.__init__"
        if not self.wanted(name, _INIT_PHASE):
            return
        session.write_later(
            _INIT_PHASE,
            name,
            start_us,
            end_us - start_us,
            {
                "num_workers": int(getattr(iterator, "_num_workers", 0)),
                "pin_memory": bool(getattr(iterator, "_pin_memory", False)),
                "pid": session.pid,
            },
            suffix=SUFFIX,
        )

    def _wrap_next(self, original: Any) -> Any:
        hooks = self
        session = self.session

        # an older torch does not tell which worker made a batch: guess it beforehand
        peek = None if self._told_the_worker else self._peek_worker

        def __next__(iterator: Any) -> Any:
            if not (session.enabled and session.active["dataloader"]):
                return original(iterator)
            worker_id = peek(iterator) if peek is not None else None
            start = now_us()
            batch = original(iterator)
            hooks._record_next(start, now_us(), getattr(iterator, _WORKER_ATTR, worker_id))
            return batch

        __next__.__wrapped__ = original  # type: ignore[attr-defined]
        return __next__

    def _on_next(self, start_us: float, end_us: float, worker_id: int | None) -> None:
        self._note_active(end_us)
        if not self.wanted(_GETNEXT_NAME, _GETNEXT_PHASE):
            return
        session = self.session
        session.write_later(
            _GETNEXT_PHASE,
            _GETNEXT_NAME,
            start_us,
            end_us - start_us,
            {"worker_id": -1 if worker_id is None else worker_id, "pid": session.pid},
            suffix=SUFFIX,
        )

    def _drain(self) -> None:
        """Read the worker reports that arrived and write the ones inside the active range."""
        self._last_drain_s = time.monotonic()
        if self._read_fd < 0:
            return
        chunks = [self._partial]
        while chunk := os.read(self._read_fd, _MAX_REPORT_READ_BYTES):
            chunks.append(chunk)
        data = b"".join(chunks)
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            self._write_worker(line)

    def _write_worker(self, line: bytes) -> None:
        try:
            report = json.loads(line)
            worker_id, pid, start = int(report["w"]), int(report["p"]), float(report["s"])
            end = float(report["e"]) if "e" in report else None
        except (ValueError, KeyError, TypeError):
            logger.debug("ignoring a malformed data-loader worker report %r", line)
            return
        if end is None:
            self._running_workers[pid] = (worker_id, start)
            return
        self._running_workers.pop(pid, None)
        self._write_worker_event(worker_id, pid, start, end)

    def _write_worker_event(self, worker_id: int, pid: int, start: float, end: float) -> None:
        first, last = self._first_active_us, self._last_active_us
        if first is None or last is None or start > last or end < first:
            return  # the worker did not live while data-loader profiling was on
        if not self.wanted(_WORKER_PHASE, _WORKER_PHASE):
            return
        self.session.write_later(
            _WORKER_PHASE,
            _WORKER_PHASE,
            start,
            end - start,
            {"worker_id": worker_id, "pid": pid},
            suffix=SUFFIX,
        )


def _path_without_name(fd: int, name: str) -> str:
    """The path workers open the report file ``name`` (open as ``fd``) by: on Linux this
    process's ``/proc`` entry of ``fd``, once ``name`` is removed, so that no way this process
    ends leaves the file behind; elsewhere ``name``."""
    path = f"/proc/{os.getpid()}/fd/{fd}"
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
        os.unlink(name)
    except OSError:
        return name
    return path


class ReportingWorkerLoop:
    """torch's data-loader worker loop, which reports the worker's start and end.

    Pickled (for a worker started by ``spawn`` or ``forkserver``), it names only the report
    file: the worker wraps its own torch's loop.

    :param report_path: the file to append the report lines to.
    :param original: torch's loop; default the one of this process.
    :param file_id: the report file's device and inode: a worker that outlives the session
        writes nothing to another file that took its path (a ``/proc`` descriptor reused).
    """

    def __init__(
        self,
        report_path: str,
        original: Callable[..., None] | None = None,
        file_id: tuple[int, int] = (-1, -1),
    ) -> None:
        self.report_path = report_path
        self.file_id = file_id
        self.original = original if original is not None else _torch_worker_loop()
        self.signature = inspect.signature(self.original)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        # a worker is not a rank, even when it runs a model: one started by spawn began a session
        # at start-up (a forked one forgot its parent's at the fork)
        forget_session()
        start = now_us()
        _report_worker(self, args, kwargs, start, None)
        try:
            self.original(*args, **kwargs)
        finally:
            _report_worker(self, args, kwargs, start, now_us())

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.report_path, None, self.file_id))


def _torch_worker_loop() -> Callable[..., None]:
    """torch's own worker loop, under any of ours."""
    loop = _worker_module._worker_loop
    while isinstance(loop, ReportingWorkerLoop):
        loop = loop.original
    return loop


def _report_worker(
    loop: ReportingWorkerLoop, args: Any, kwargs: Any, start_us: float, end_us: float | None
) -> None:
    """Runs in the worker as its loop starts (``end_us`` None) and ends: one line appended to
    the report file, in one write."""
    if not loop.report_path:
        return
    try:
        worker_id = loop.signature.bind(*args, **kwargs).arguments.get("worker_id", -1)
        report = {"w": int(worker_id), "p": os.getpid(), "s": start_us}
        if end_us is not None:
            report["e"] = end_us
        line = json.dumps(report, separators=(",", ":"))
        fd = os.open(loop.report_path, os.O_WRONLY | os.O_APPEND)  # gone once stopped
        try:
            status = os.fstat(fd)
            if (status.st_dev, status.st_ino) == loop.file_id:
                os.write(fd, line.encode() + b"\n")
        finally:
            os.close(fd)
    except (OSError, TypeError, ValueError):
        # a full disk, a session that stopped, an unexpected signature: the worker must exit
        # cleanly whatever happens, and this is the only data it had to send
        logger.debug("data-loader worker report dropped", exc_info=True)


def process_data_is_told_the_worker(iterator_class: type) -> bool:
    """Whether ``iterator_class._process_data`` is given the worker of each batch
    (``worker_idx``, in newer torch); older torch gives it the batch alone."""
    try:
        parameters = inspect.signature(iterator_class._process_data).parameters  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return False
    return "worker_idx" in parameters


def _next_worker_id(iterator: Any) -> int:
    """The worker whose batch ``__next__`` returns next (``-1`` in the main process), as torch
    plans it: right for in-order loading from a map-style dataset (older torch only)."""
    task_info = getattr(iterator, "_task_info", None)
    if task_info is None:
        return -1
    info = task_info.get(iterator._rcvd_idx)
    return int(info[0]) if info else -1


def _noting_the_worker(original: Any) -> Any:
    """``_MultiProcessingDataLoaderIter._process_data`` (``original``), which hands out every
    batch with the worker that made it, noting that worker on the iterator: which batch comes
    next cannot be told beforehand (workers of an iterable dataset run out, ``in_order=False``
    takes batches as they come)."""

    def _process_data(iterator: Any, data: Any, worker_idx: int) -> Any:
        setattr(iterator, _WORKER_ATTR, int(worker_idx))
        return original(iterator, data, worker_idx)

    _process_data.__wrapped__ = original  # type: ignore[attr-defined]
    return _process_data
