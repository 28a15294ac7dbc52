"""Detailed profiling windows: ``torch.profiler`` exactly on the configured steps.

Per ``DetailedProfilingConfig`` (step or time range), a ``torch.profiler.profile`` with the CPU
activity (and CUDA when ``torch.cuda.is_available()``) starts when the step before the range ends
(at the session start for step 0) and stops when the last step of the range ends; a window in which
no step began (the job stopped first) is dropped without a trace. Each step inside
is a ``ProfilerStep#<step>`` range, the name ``torch.profiler``'s own ``step()`` uses and every
Kineto analysis splits steps by; annotations made inside the window become ``record_function``
ranges too.

Kineto runs one profiler per process, and two at once crash it. The script's own profilers (a
``torch.profiler.profile``, ``torch.autograd.profiler.profile``) come first: a window does not
open while one of them is prepared or recording (from ``_prepare_trace`` to ``__exit__``, which
this module watches while instrumented), and a window open when one starts ends there, with its
trace, before the script's profiler begins.

The trace is exported (by a writer thread, off the training thread, gzipped at ISA-L's fastest
level, with the event names torch leaves unescaped escaped) to
``framework/pytorch/detailed_profiling/<YYYYMMDDHH>/<first step:09d>/<node_id>_<start_us>_<end_us>
.pt.trace.json.gz``. Its metadata key ``stepscope`` ties it to the job: node id, rank, world size,
first and last step, the window's start and end on the session clock (µs since the epoch), and
how the session clock relates to the wall clock Kineto's own timestamps count from
(``epoch_offset_us``, ``wall_minus_session_us``).

``torch.profiler`` records the thread that started it, and only that thread can turn it off: a
window that a training thread opened and that is still open when the session stops on another
thread is handed to its own thread, which drops it at its next optimizer step, after the
session's end. Global state: that one handed-over window, if any (:data:`_handed_over`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import torch
import torch.autograd.profiler
import torch.optim.optimizer as _optimizer
import torch.profiler

from stepscope.collect.clock import now_us
from stepscope.collect.session import Session
from stepscope.collect.torch.patches import Patches
from stepscope.store.layout import detailed_profiling_trace_path

__all__ = ["DetailedProfiler"]

logger = logging.getLogger(__name__)

_JOIN_TIMEOUT_S = 60.0

#: the profiler whose window its stopped session handed to the window's own thread (one per
#: process: Kineto runs one profiler at a time)
_handed_over: DetailedProfiler | None = None


class DetailedProfiler:
    """Opens and closes ``torch.profiler`` windows on the session's step boundaries.

    :param session: its ``active["detailed"]`` says which steps to profile.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self._profiler: Any = None
        self._first_step = 0
        self._start_us = 0.0
        self._step_range: Any = None
        #: a step began while the window is open (one that opens at a step's end waits for it)
        self._stepped = False
        self._thread: threading.Thread | None = None  # the thread that opened the window
        self._exports: list[threading.Thread] = []
        #: an explicit window (SageMaker Profiler's start_profiling): ranges do not close it
        self._manual = False
        self._manual_deadline_s = math.inf
        #: the script's own profilers, from their ``_prepare_trace`` to their ``__exit__``
        self._scripts_profilers: weakref.WeakSet[Any] = weakref.WeakSet()
        #: held while a window opens, moves on or closes: threads that end their steps at the
        #: same moment would each open one, and Kineto runs one profiler at a time
        self._lock = threading.RLock()
        self._opening = False
        self._told_of_scripts_profiler = False
        self._patches = Patches()
        #: the optimizer step hook of a handed-over window (:meth:`_hand_over`)
        self._handover_hook: Any = None
        guard = session.guard
        self._on_scripts_profiler_start = guard.wrap("detailed_profiler.yield", self._make_way)
        self._on_scripts_profiler_end = guard.wrap(
            "detailed_profiler.yield", self._scripts_profilers.discard
        )

    def install(self) -> None:
        if _handed_over is not None:
            # its patches come off before ours go on, as they went on before ours
            _handed_over.settle_handover()
        profile = torch.autograd.profiler.profile
        self._patches.call_first(profile, "_prepare_trace", self._on_scripts_profiler_start)
        self._patches.wrap(profile, "__exit__", self._watch_end)

    def remove(self) -> None:
        if _handed_over is not self:  # a handed-over window keeps watching for profilers
            self._patches.restore()

    # -- the script's own profilers come first ------------------------------------------

    def _watch_end(self, original: Any) -> Any:
        on_end = self._on_scripts_profiler_end

        def __exit__(profiler: Any, *exc_info: Any) -> Any:
            try:
                return original(profiler, *exc_info)
            finally:
                on_end(profiler)

        return __exit__

    def _make_way(self, profiler: Any) -> None:
        """A profiler is about to start: unless it is ours, close our window for it."""
        with self._lock:
            if self._opening:
                return
            self._scripts_profilers.add(profiler)
            if self._profiler is None:
                return
            self._tell_of_scripts_profiler()
            if _handed_over is self:
                self.settle_handover()
            elif self._others_window():
                logger.warning(
                    "stepscope: the detailed profiling window from step %d, opened by another "
                    "thread, was open when the script's torch.profiler started on this one; "
                    "torch cannot save it from here, so it has no trace.",
                    self._first_step,
                )
                self._drop()
            else:
                self._end(manual=self._manual)

    def _tell_of_scripts_profiler(self) -> None:
        if not self._told_of_scripts_profiler:
            self._told_of_scripts_profiler = True
            logger.warning(
                "stepscope: the script runs a torch.profiler of its own; stepscope's detailed "
                "profiling windows give way to it (only one can run at a time)"
            )

    # -- step listener --------------------------------------------------------------------

    def on_start(self, session: Session) -> None:
        with self._lock:
            if session.active["detailed"]:
                self._open(0)

    def _others_window(self) -> bool:
        """Whether a window is open that another thread opened: a ``torch.profiler`` stopped on
        another thread than the one that started it holds no result, and exporting it crashes
        the process, so only the window's own thread moves it on (scripts that train in several
        threads step from each)."""
        return self._profiler is not None and self._thread is not threading.current_thread()

    def _opener_runs_elsewhere(self) -> bool:
        """Whether the thread that opened the window is another one, still running: only that
        thread can turn the window's profiler off (torch ties a profiler to its thread)."""
        opener = self._thread
        return opener is not None and opener is not threading.current_thread() and opener.is_alive()

    def _take_turn(self) -> bool:
        """Take :attr:`_lock` for this thread's step boundary, unless the window is another
        thread's. The window's own thread waits for it (another thread holds it only for a
        moment, or to end the window); a thread that could only open one does not wait: the
        thread holding the lock is opening or ending the window."""
        if self._others_window():
            return False
        if not self._lock.acquire(blocking=self._profiler is not None):
            return False
        if self._others_window():
            self._lock.release()
            return False
        return True

    def on_step_begin(self, session: Session, step: int) -> None:
        if not self._take_turn():
            return
        try:
            if self._profiler is None and session.active["detailed"]:
                self._open(step)
            if self._profiler is not None:
                self._stepped = True
        finally:
            self._lock.release()

    def on_step_end(self, session: Session, step: int) -> None:
        if not self._take_turn():
            return
        try:
            if self._manual:
                if time.monotonic() >= self._manual_deadline_s:
                    self.stop_manual()
                else:
                    self._end_step_range()
                    self._begin_step_range(step + 1)
            elif self._profiler is not None:
                if session.active["detailed"]:
                    self._end_step_range()
                    self._begin_step_range(step + 1)
                else:
                    self._close(step)
            elif session.active["detailed"]:
                self._open(step + 1)
        finally:
            self._lock.release()

    def on_stop(self, session: Session) -> None:
        with self._lock:
            self._end_at_stop(session)
        for thread in self._exports:
            thread.join(_JOIN_TIMEOUT_S)
        self._exports = []

    def _end_at_stop(self, session: Session) -> None:
        if self._others_window():
            # a loop training on a thread of its own stopped inside the window's range: stopped
            # from here, torch's profiler holds no result, and exporting it crashes the process
            logger.warning(
                "stepscope: the detailed profiling window from step %d, opened by the thread "
                "that trains, was still open when the session stopped on another thread; torch "
                "cannot save it from there, so it has no trace. End the range before that "
                "thread's last step, or call stop_profiling() on the thread that called "
                "start_profiling().",
                self._first_step,
            )
            if self._opener_runs_elsewhere():
                self._hand_over()
            else:
                self._drop()
        elif self._profiler is not None:
            self._end(manual=self._manual)

    # -- a window handed to its own thread ------------------------------------------------

    def _hand_over(self) -> None:
        """Leave the open window to its own thread, which goes on after the session stopped on
        this one: stopped from here, torch's profiler would stay on there, recording every
        operator from then on. That thread drops it at its next optimizer step; until then the
        script's profilers stay watched (:meth:`_make_way`)."""
        global _handed_over
        self._manual = False
        self.session.record_function = None
        settle = self.session.guard.wrap("detailed_profiler.handover", self._settle_if_its_thread)
        self._handover_hook = _optimizer.register_optimizer_step_post_hook(settle)
        _handed_over = self

    def _settle_if_its_thread(self, *_optimizer_step: Any) -> None:
        """After an optimizer step: settle the handed-over window unless its thread goes on
        elsewhere."""
        if not self._opener_runs_elsewhere():
            self.settle_handover()

    def settle_handover(self) -> None:
        """End the handed-over window now: dropped on its own thread, or once that thread ended
        (its profiler ended with it). Anywhere else a profiler (the script's) or a new session
        is about to start, and torch crashes when a profiler stops after another one ran: the
        window's profiler is left on, with a warning."""
        global _handed_over
        with self._lock:
            if _handed_over is not self:
                return
            _handed_over = None
            self._handover_hook.remove()
            self._handover_hook = None
            if not self._opener_runs_elsewhere():
                self._drop()
            else:
                logger.warning(
                    "stepscope: a profiler or a new profiling session starts while the thread "
                    "that trains still has the detailed profiling window of a stopped session "
                    "open; torch cannot turn that window's profiler off from here, so it stays "
                    "on in that thread."
                )
                self._profiler = self._step_range = None  # both belong to that thread
            self._patches.restore()

    # -- explicit windows -----------------------------------------------------------------

    def start_manual(self, *, cuda: bool = True, max_duration_s: float = math.inf) -> None:
        """Open a window now, until :meth:`stop_manual` or ``max_duration_s`` seconds (checked
        at step ends), whatever the configured range says; a range window already open is
        taken over. Nothing opens while the script's own profiler runs."""
        with self._lock:
            if self._profiler is None:
                step = max(self.session.step + (0 if self.session.in_step else 1), 0)
                self._open(step, cuda=cuda)
            if self._profiler is None:
                return  # the script's own profiler runs
            self._manual = True
            self._manual_deadline_s = time.monotonic() + max_duration_s

    def stop_manual(self) -> None:
        """Close the explicit window (a no-op without one).

        Only the thread that opened it can stop torch's profiler with a result (stopped from
        another, saving it crashes the process): called on another thread, the window closes
        at that thread's next step end (a session stopped first ends it without a trace, see
        :meth:`on_stop`), or, when that thread has ended, now, without a trace.
        """
        with self._lock:
            if not self._manual or self._profiler is None:
                self._manual = False
                return
            if self._thread is threading.current_thread():
                self._end(manual=True)
            elif self._opener_runs_elsewhere():
                logger.info(
                    "stepscope: stop_profiling() was called on another thread than the one that "
                    "started the window; it closes at that thread's next step end"
                )
                self._manual_deadline_s = -math.inf
            else:
                logger.warning(
                    "stepscope: the detailed profiling window from step %d was stopped on another "
                    "thread after the thread that started it ended; torch cannot save it from "
                    "there, so it has no trace. Call stop_profiling() on the thread that called "
                    "start_profiling().",
                    self._first_step,
                )
                self._drop()

    # -- windows --------------------------------------------------------------------------

    def _open(self, step: int, *, cuda: bool = True) -> None:
        if len(self._scripts_profilers):
            self._tell_of_scripts_profiler()
            return
        activities = [torch.profiler.ProfilerActivity.CPU]
        if cuda and torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        profiler = torch.profiler.profile(activities=activities)
        self._opening = True
        try:
            profiler.start()
        finally:
            self._opening = False
        self._profiler = profiler
        self._thread = threading.current_thread()
        self._first_step = step
        self._stepped = False
        self._start_us = now_us()
        self.session.record_function = torch.profiler.record_function
        self._begin_step_range(step)

    def _begin_step_range(self, step: int) -> None:
        step_range = torch.profiler.record_function(f"ProfilerStep#{step}")
        step_range.__enter__()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        self._step_range = step_range

    def _end_step_range(self) -> None:
        step_range, self._step_range = self._step_range, None
        if step_range is not None:
            step_range.__exit__(None, None, None)

    def _end(self, *, manual: bool) -> None:
        """End the open window: its trace is saved, unless no step began in it (the job
        stopped, or the script's profiler started, just after a step's end opened it) and the
        script did not open it explicitly: no trace of a step that never ran."""
        self._manual = False
        self._close(max(self.session.step, self._first_step), save=self._stepped or manual)

    def _drop(self) -> None:
        """End another thread's window without its trace: stopped off its thread, torch's
        profiler holds no result, and exporting it crashes the process."""
        self._manual = False
        self._close(max(self.session.step, self._first_step), save=False)

    def _close(self, last_step: int, *, save: bool = True) -> None:
        """Stop the window's profiler and, with ``save``, export its trace."""
        profiler, self._profiler = self._profiler, None
        self.session.record_function = None
        end_us = now_us()
        session = self.session
        profiler.add_metadata_json(
            "stepscope",
            json.dumps(
                {
                    "node_id": session.node_id,
                    "rank": session.rank,
                    "world_size": session.world_size,
                    "first_step": self._first_step,
                    "last_step": last_step,
                    "start_us": self._start_us,
                    "end_us": end_us,
                    # the session clock is perf_counter + this; wall clock (what Kineto's
                    # baseTimeNanoseconds counts from) minus session clock, measured now
                    "epoch_offset_us": session.epoch_offset_us,
                    "wall_minus_session_us": time.time() * 1e6 - now_us(),
                }
            ),
        )
        profiler.stop()
        # The step's range ends after the stop, which ends it with the ranges still open: a step
        # ends inside torch's range around the optimizer step (and often inside the script's
        # annotation of the step), and a profiler stopped after their parent range ended but
        # before they did makes torch warn of them.
        self._end_step_range()
        if not save:
            return
        path = detailed_profiling_trace_path(
            session.profiler_output_dir,
            self._first_step,
            session.node_id,
            int(self._start_us),
            int(end_us),
        )
        self._exports = [thread for thread in self._exports if thread.is_alive()]
        thread = threading.Thread(
            target=session.guard.wrap("detailed_profiler.export", _export),
            args=(profiler, path),
            name="stepscope-kineto-export",
            daemon=True,
        )
        thread.start()
        self._exports.append(thread)


def _export(profiler: Any, path: Path) -> None:
    """Write the trace as plain JSON, gzip it at ISA-L's fastest level with its event names
    escaped, then publish it.

    ``export_chrome_trace`` to a ``.gz`` name would compress line by line with zlib's level 9,
    which costs about as much CPU as the profiled steps did; this costs about a tenth of that.
    torch writes names with a quote unescaped (see :mod:`stepscope.store.kineto_names`), which
    would leave a trace that TensorBoard, Perfetto and HTA refuse.
    """
    from stepscope._gzip import gzip_writer
    from stepscope.store.kineto_names import iter_escaped_blocks

    raw = path.with_name(f".{path.name}.partial.json")
    partial = path.with_name(f".{path.name}.partial.json.gz")
    # torch writes the trace to this name first, and leaves it there, half written, when a
    # write fails (a full disk): it says so on the standard error and raises nothing
    unfinished = raw.with_name(f"{raw.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        profiler.export_chrome_trace(str(raw))
        if not raw.exists():
            logger.warning(
                "stepscope: cannot write the detailed trace %s (torch could not write it; "
                "check free space and permissions of the profiler output folder)",
                path,
            )
            return
        with open(raw, "rb") as source, gzip_writer(partial) as packed:
            for block in iter_escaped_blocks(source):
                packed.write(block)
        partial.replace(path)
    except OSError as exc:
        logger.warning("stepscope: cannot write the detailed trace %s (%s)", path, exc)
    finally:
        for leftover in (unfinished, raw, partial):
            with contextlib.suppress(OSError):
                leftover.unlink(missing_ok=True)
