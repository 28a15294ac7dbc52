"""Python profiling windows: cProfile or pyinstrument, exactly on the configured steps.

Per ``PythonProfilingConfig`` each profiled step gets its own window and folder, in SageMaker's
layout ``framework/pytorch/<cprofile|pyinstrument>/<node_id>/<start>_<end>/``: cProfile writes a
``pstats`` dump ``python_stats``; pyinstrument writes ``python_stats.json`` and
``python_stats.html``. A step's window opens when the previous step ends (so data loading for the
step is in it) and closes when the step ends; when the job stops before the step begins, the window
is dropped, with no profile of a step that never ran.

cProfile timers (``cProfileTimer``): ``total_time`` is wall-clock time, ``cpu_time`` CPU time,
``off_cpu_time`` their difference (time spent waiting: I/O, locks, sleeping); ``default`` cycles
through the three, one per profiled step, as SageMaker does. Where we differ: CPU time is the
profiled thread's (cProfile profiles one thread), not the whole process's. PyTorch computes on
several threads, so the process's CPU time grows faster than wall time and wall minus it runs
backwards, which gives negative off-CPU times.

Two more windows whenever Python profiling is configured, as in SageMaker: **pre-step-zero**, from
the session start to the first step (to where it starts: a data-loader loop that begins before
it ends the window there, and the first step's window opens there, so that it holds the step's
data loading as every later step's does), and **post-hook-close**, from the session stop to the
end of the interpreter (its finalisation: ``atexit`` handlers, module teardown), or to the start
of the next session in the same process, whatever that one profiles (left open, it would go on
profiling the new session's steps, slowing them and mixing them into the old session's window),
or to a call of :func:`end_post_hook_close_window`.

cProfile (before 3.12) and pyinstrument profile the thread that starts them, and only that thread
can stop them: a window that ends on another thread (the steps run on a training thread, the
session started on the main one) is finished by its own thread when that thread next calls in to
any session (a step, a start, a stop, the exit), with the boundary it ended at.

Python has one profiler slot per thread (from 3.12, cProfile takes ``sys.monitoring``'s one
profiler tool instead). The script's own profiler comes first. While another profiler
holds the slot (the script's cProfile, ``python -m cProfile``, pyinstrument, an IDE's), no window
opens. When the script enables a cProfile profiler during a window (``cProfile.Profile.enable``
is watched while instrumented), the window ends there, with its stats; from 3.12 the script's
``enable`` would fail otherwise. A window whose profiler another tool replaced is dropped and its
profiler kept, never turned off: turning a cProfile profiler off (or freeing it while on)
empties the slot, whoever holds it.

The stats are snapshotted on the training thread (a dictionary copy) and written by a short-lived
writer thread per window, so no file is written on the training thread.
"""

from __future__ import annotations

import atexit
import cProfile
import itertools
import logging
import marshal
import operator
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stepscope._atomic import write_atomic
from stepscope._optional import require
from stepscope.collect.clock import now_us
from stepscope.collect.session import Session
from stepscope.collect.torch.patches import Patches
from stepscope.errors import MissingDependencyError
from stepscope.store.layout import (
    CPROFILE_STATS_FILE,
    PYINSTRUMENT_STATS_FILES,
    StatsBoundary,
    python_stats_dir,
)

__all__ = ["PythonProfiler", "end_post_hook_close_window"]

logger = logging.getLogger(__name__)

#: How long the session stop waits for stats still being written.
_JOIN_TIMEOUT_S = 10.0


def _off_cpu_timer() -> Callable[[], float]:
    """Wall time less the thread's CPU time, in seconds, from a clock that runs no Python code.

    cProfile calls its timer at every call and return, and drops whatever the timer raises. A
    timer written in Python is where the eval loop runs signal handlers, so a Ctrl-C (or a
    SIGTERM handler's ``sys.exit``) landing there would be lost and the training go on. Built of
    C iterators, this one gives the eval loop no such point.
    """
    read = operator.methodcaller("__call__")
    wall = map(read, itertools.repeat(time.perf_counter))
    cpu = map(read, itertools.repeat(time.thread_time))
    return map(operator.sub, wall, cpu).__next__


#: cProfileTimer value -> the clock cProfile measures with (None: cProfile's own wall clock)
_TIMERS: dict[str, Callable[[], float] | None] = {
    "total_time": None,
    "cpu_time": time.thread_time,
    "off_cpu_time": _off_cpu_timer(),
}


#: cProfile profiles the thread that enables it (from Python 3.12, every thread, through
#: ``sys.monitoring``); pyinstrument, the thread that starts it. Such a profiler is turned off
#: only by its own thread: ``disable()`` on another clears that other thread's slot.
_CPROFILE_PER_THREAD = sys.version_info < (3, 12)


class _Window:
    __slots__ = ("began", "installed", "kind", "profiler", "start", "step", "thread", "tool")

    def __init__(self, tool: str, profiler: Any, kind: str, step: int | None, start: Any) -> None:
        self.tool = tool
        self.profiler = profiler
        self.kind = kind  # "step" | "prestepzero" | "posthookclose"
        self.step = step
        self.start = start
        #: its step began (a step's window opens as the previous step ends)
        self.began = False
        #: what holds the thread's profiler slot once this window's profiler started
        self.installed = sys.getprofile()
        self.thread = threading.get_ident()

    def owned_here(self) -> bool:
        """Whether this thread can stop the window's profiler (see _CPROFILE_PER_THREAD)."""
        per_thread = self.tool == "pyinstrument" or _CPROFILE_PER_THREAD
        return not per_thread or self.thread == threading.get_ident()

    def replaced(self) -> bool:
        """Whether another profiler took the slot from this window's (and still holds it)."""
        current = sys.getprofile()
        return current is not None and current is not self.installed


def _other_profiler_running() -> bool:
    """Whether a profiler holds this thread's slot, or (Python 3.12+) the profiler tool."""
    monitoring = getattr(sys, "monitoring", None)
    in_use = monitoring is not None and monitoring.get_tool(monitoring.PROFILER_ID) is not None
    return in_use or sys.getprofile() is not None


#: profilers of windows another profiler replaced: kept for the life of the process, since
#: freeing one that is still on would empty the other's slot
_displaced: list[Any] = []


#: the profiler whose post-hook-close window is open (one per process: it profiles this thread)
_open_post_close: PythonProfiler | None = None

#: windows that ended on a thread other than their own, with where they ended and the profiler
#: that writes them: their own thread finishes them when it next calls in to any session (a
#: step, a start, a stop, the exit), also once the session they belong to is gone
_ended_elsewhere: list[tuple[PythonProfiler, _Window, StatsBoundary]] = []
_ended_elsewhere_lock = threading.Lock()


def _finish_ended_here() -> None:
    """Finish the windows that ended elsewhere whose profiler this thread can stop."""
    here: list[tuple[PythonProfiler, _Window, StatsBoundary]] = []
    waiting: list[tuple[PythonProfiler, _Window, StatsBoundary]] = []
    with _ended_elsewhere_lock:
        for entry in _ended_elsewhere:
            (here if entry[1].owned_here() else waiting).append(entry)
        _ended_elsewhere[:] = waiting
    for owner, window, end in here:
        owner._finish(window, end)


def end_post_hook_close_window() -> None:
    """End the post-hook-close window a stopped session left open, and write its stats.

    The window runs to the end of the interpreter, or to the start of the next session; a
    process that goes on with work of its own after a session (a notebook, a benchmark comparing
    with unprofiled runs) ends it here, so that work is not profiled. Nothing happens when no
    window is open.
    """
    profiler = _open_post_close
    if profiler is not None:
        profiler._at_exit()


class PythonProfiler:
    """Opens and closes Python profiling windows on the session's step boundaries.

    :param session: its ``active["python"]`` says which steps to profile.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self._window: _Window | None = None
        #: the pre-step-zero window that a data-loader loop ended, with what it recorded and
        #: when, waiting for the first step's mode to name its end
        self._ended_at_boundary: tuple[_Window, Any, float] | None = None
        self._writers: list[threading.Thread] = []
        self._atexit_registered = False
        self._told_of_other_profiler = False
        self._told_of_no_pyinstrument = False
        self._patches = Patches()
        self._before_scripts_cprofile = session.guard.wrap(
            "python_profiler.give_way", self._give_way
        )

    def install(self) -> None:
        self._patches.call_first(cProfile.Profile, "enable", self._before_scripts_cprofile)

    def remove(self) -> None:
        self._patches.restore()

    def _give_way(self, profiler: Any, *_enable_args: Any, **_enable_kwargs: Any) -> None:
        """A cProfile profiler is about to start: unless it is ours, or it runs on another
        thread than our window's (before 3.12), our window ends here."""
        _finish_ended_here()
        window = self._window
        if window is not None and profiler is not window.profiler and window.owned_here():
            self._leave_to_other_profiler()
            self._close(self._end_boundary(window))

    def _config(self) -> Any:
        framework = self.session.config.framework_profile_params
        if framework is None or self.session.range_for("python") is None:
            return None
        return framework.effective_config("python")

    # -- step listener --------------------------------------------------------------------

    def on_start(self, session: Session) -> None:
        if _open_post_close is not self:
            end_post_hook_close_window()  # a new session ends the previous one's
        _finish_ended_here()
        config = self._config()
        if config is not None:
            self._open("prestepzero", None, config, timer="total_time")

    def on_boundary(self, session: Session, step: int) -> None:
        """A data-loader loop began, before the first step: that step starts here, so the
        pre-step-zero window ends here, and the step's window opens."""
        window = self._window
        if window is None or window.kind != "prestepzero" or not window.owned_here():
            return
        self._window = None
        payload = self._stop(window)
        if payload is not None:
            self._ended_at_boundary = (window, payload, now_us())
        if session.active["python"]:
            self._open_step(step)

    def on_step_begin(self, session: Session, step: int) -> None:
        if _ended_elsewhere:
            _finish_ended_here()
        if self._ended_at_boundary is not None:
            self._write_ended_at_boundary((session.mode or "global").lower(), step, "stepstart")
        window = self._window
        if window is not None and window.kind == "prestepzero":
            mode = (session.mode or "global").lower()
            self._close(StatsBoundary(mode, step, "stepstart", now_us()))
            window = None
        if window is None and session.active["python"]:
            self._open_step(step)  # a step found without a boundary before it (the first one)
        if self._window is not None and self._window.kind == "step":
            self._window.began = True

    def on_step_end(self, session: Session, step: int) -> None:
        if _ended_elsewhere:
            _finish_ended_here()
        window = self._window
        if window is not None and window.kind == "step":
            mode = (session.mode or "global").lower()
            self._close(StatsBoundary(mode, step, "stepend", now_us()))
        if session.active["python"]:
            self._open_step(step + 1)

    def on_stop(self, session: Session) -> None:
        self._write_ended_at_boundary("prestepzero", None, "end")  # no step began after it
        window = self._window
        if window is not None:
            self._close(self._end_boundary(window))
        _finish_ended_here()
        config = self._config()
        if config is not None:
            self._open("posthookclose", None, config, timer="total_time")
            global _open_post_close
            _open_post_close = self
            if not self._atexit_registered:
                self._atexit_registered = True
                atexit.register(self.session.guard.wrap("python_profiler.atexit", self._at_exit))
        else:
            self.join()

    def _write_ended_at_boundary(self, mode: str, step: int | None, phase: str) -> None:
        """Write the pre-step-zero window a data-loader loop ended, if any, its end named now."""
        ended, self._ended_at_boundary = self._ended_at_boundary, None
        if ended is not None:
            window, payload, end_us = ended
            self._write(window, payload, StatsBoundary(mode, step, phase, end_us))

    def _end_boundary(self, window: _Window) -> StatsBoundary:
        """Where ``window`` ends when it ends now, between step boundaries."""
        step = window.step if window.kind == "step" else None
        mode = (self.session.mode or "global").lower() if step is not None else window.kind
        return StatsBoundary(mode, step, "end", now_us())

    def after_fork_in_child(self) -> None:
        """A forked child (a data-loader worker) must not go on profiling our windows.

        Each profiler is turned off while its window still holds it (the open window's, and
        those of windows waiting for their own thread, which may be the forking one): a cProfile
        profiler freed while on turns itself off from its destructor, inside ``sys.setprofile``,
        which Python refuses with an "Exception ignored" traceback on the child's stderr.
        """
        with _ended_elsewhere_lock:
            windows = [window for _, window, _ in _ended_elsewhere]
            _ended_elsewhere.clear()
        if self._window is not None:
            windows.append(self._window)
        self._window = self._ended_at_boundary = None
        for window in windows:
            if window.tool == "cprofile":
                window.profiler.disable()
            else:
                sys.setprofile(None)  # pyinstrument's sampler

    def _at_exit(self) -> None:
        global _open_post_close
        if _open_post_close is self:
            _open_post_close = None
        if self._window is not None:
            self._close(StatsBoundary("posthookclose", None, "end", now_us()))
        _finish_ended_here()
        self.join()

    def join(self) -> None:
        """Wait (bounded) for the stats files still being written."""
        for thread in self._writers:
            thread.join(_JOIN_TIMEOUT_S)
        self._writers = []

    # -- windows --------------------------------------------------------------------------

    def _open_step(self, step: int) -> None:
        config = self._config()
        if config is None:
            return
        timer = config.timer_for_step(step)
        self._open("step", step, config, timer=None if timer is None else timer.value)

    def _open(self, kind: str, step: int | None, config: Any, *, timer: str | None) -> None:
        if self._window is not None:
            return
        if _other_profiler_running():
            self._leave_to_other_profiler()
            return
        tool = str(config.python_profiler.value).lower()
        if tool == "pyinstrument":
            pyinstrument = self._pyinstrument()
            if pyinstrument is None:
                return
            profiler: Any = pyinstrument.Profiler()
            profiler.start()
        else:
            tool = "cprofile"
            clock = _TIMERS.get(timer or "total_time")
            profiler = cProfile.Profile() if clock is None else cProfile.Profile(clock)
            profiler.enable()
        start_mode = kind if kind != "step" else "global"
        self._window = _Window(tool, profiler, kind, step, (start_mode, now_us()))

    def _pyinstrument(self) -> Any:
        """The pyinstrument module, or ``None`` (said once) when it is not installed: its windows
        are left out and the rest is profiled; a live update to cProfile still takes effect."""
        try:
            return require(
                "pyinstrument", extra="pyinstrument", feature="Python profiling with pyinstrument"
            )
        except MissingDependencyError as exc:
            if not self._told_of_no_pyinstrument:
                self._told_of_no_pyinstrument = True
                logger.warning("stepscope: no Python profiles: %s", exc)
            return None

    def _leave_to_other_profiler(self) -> None:
        if not self._told_of_other_profiler:
            self._told_of_other_profiler = True
            logger.warning(
                "stepscope: another Python profiler runs on this thread; stepscope's Python "
                "profiling windows are left out while it does, so as not to replace it"
            )

    def _close(self, end: StatsBoundary) -> None:
        window, self._window = self._window, None
        if window is None:
            return
        if not window.owned_here():
            # the steps run on another thread than the session's start: the window's own
            # thread stops its profiler, when it next calls in
            with _ended_elsewhere_lock:
                _ended_elsewhere.append((self, window, end))
            return
        self._finish(window, end)

    def _finish(self, window: _Window, end: StatsBoundary) -> None:
        """Stop ``window``'s profiler (on its own thread) and write its stats."""
        payload = self._stop(window)
        if payload is not None:
            self._write(window, payload, end)

    def _stop(self, window: _Window) -> Any:
        """Stop ``window``'s profiler (on its own thread); what it recorded, or ``None`` when
        another profiler replaced it (which is left running)."""
        if window.replaced():
            _displaced.append(window.profiler)
            self._leave_to_other_profiler()
            return None
        return _stop_profiler(window)

    def _write(self, window: _Window, payload: Any, end: StatsBoundary) -> None:
        """Write what ``window`` recorded, ending at ``end``, from a writer thread."""
        if window.kind == "step" and not window.began:
            return  # the job stopped before the step: no profile of a step that never ran
        start_mode, start_us = window.start
        if window.kind == "step":
            start = StatsBoundary(end.mode, window.step, "stepstart", start_us)
        else:
            start = StatsBoundary(start_mode, None, "start", start_us)
        folder = python_stats_dir(
            self.session.profiler_output_dir, window.tool, self.session.node_id, start, end
        )
        self._writers = [thread for thread in self._writers if thread.is_alive()]
        thread = threading.Thread(
            target=self.session.guard.wrap("python_profiler.write", _write_stats),
            args=(window.tool, payload, folder),
            name="stepscope-python-stats",
            daemon=True,
        )
        thread.start()
        self._writers.append(thread)


def _stop_profiler(window: _Window) -> Any:
    """Stop the window's profiler; what it recorded, as :func:`_write_stats` takes it."""
    if window.tool == "cprofile":
        window.profiler.disable()
        window.profiler.create_stats()
        return dict(window.profiler.stats)
    return window.profiler.stop()


def _write_stats(tool: str, payload: Any, folder: Path) -> None:
    """Write one window's stats; each file appears whole or not at all (a reader of a running
    job, or a full disk, never leaves or sees half a dump)."""
    try:
        if tool == "cprofile":
            write_atomic(folder / CPROFILE_STATS_FILE, marshal.dumps(payload))
            return
        from pyinstrument.renderers import HTMLRenderer, JSONRenderer

        json_file, html_file = PYINSTRUMENT_STATS_FILES
        write_atomic(folder / json_file, JSONRenderer().render(payload))
        write_atomic(folder / html_file, HTMLRenderer().render(payload))
    except OSError as exc:
        logger.warning("stepscope: cannot write the Python profile to %s (%s)", folder, exc)
