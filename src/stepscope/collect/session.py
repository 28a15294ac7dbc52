"""The active profiling session: its configuration, steps, listeners and identity.

A :class:`Session` is what every hook records through. It knows where the job's profiler output
goes, which node and rank this process is, which step is running and in which mode, and which
collection options (data loader, Python profiling, detailed profiling, collectives) are active for
that step. The PyTorch side (:mod:`stepscope.collect.torch`) decides *when* steps begin and end;
the session records them and tells its step listeners (the Python and detailed profilers, the
module hooks), which start and stop their windows exactly on step boundaries. Its events wait in
an :class:`~stepscope.collect.events.EventQueue` and reach the timeline writers in bursts; every
timestamp is :func:`~stepscope.collect.clock.now_us`.

Global state (the only one in ``collect``): the active session, read with
:func:`get_active_session` and set only by :meth:`Session.start` / :meth:`Session.stop`. A forked
child (a data-loader worker) forgets it, so a worker never writes through its parent's writers.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from stepscope.collect.clock import EPOCH_OFFSET_US, now_us
from stepscope.collect.events import EventQueue
from stepscope.collect.rank_file import remove_rank_file, write_rank_file
from stepscope.collect.torch.guard import Guard
from stepscope.errors import SessionError

if TYPE_CHECKING:
    from stepscope.config import ProfilerConfig

__all__ = ["MODES", "Session", "StepListener", "forget_session", "get_active_session"]

logger = logging.getLogger(__name__)

#: SageMaker's training modes, as written in ``Step:ModeKeys.<MODE>``.
MODES = ("TRAIN", "EVAL", "PREDICT", "GLOBAL")

#: The collection options a step range can switch on (``FrameworkProfile.range_for``).
OPTIONS = ("dataloader", "python", "detailed", "horovod", "smdataparallel")

#: How often, at most, a step boundary checks whether the config file changed.
CONFIG_POLL_INTERVAL_S = 1.0

_active: Session | None = None


def get_active_session() -> Session | None:
    """The session this process records into, or ``None`` when nothing is being profiled."""
    return _active


class StepListener(Protocol):
    """Something that opens and closes windows on step boundaries (Python or detailed profiler).

    ``on_step_end`` is called after step ``step`` ended and before the next one starts, so a
    window for step ``step + 1`` can start there and cover the whole step, data loading included.
    A listener may also have ``on_step_begin(session, step)``, called once step ``step`` began,
    and ``on_boundary(session, step)``, called where step ``step`` will start when that is known
    before it begins (a data-loader loop began); one with nothing to do there leaves them out
    (the session calls ``on_step_begin`` at every step).
    """

    def on_start(self, session: Session) -> None: ...

    def on_step_end(self, session: Session, step: int) -> None: ...

    def on_stop(self, session: Session) -> None: ...


class Session:
    """One process's profiling session: config, writers, step state, listeners.

    :param config: what to collect; ``config.framework_profile_params`` gives the ranges.
    :param profiler_output_dir: SageMaker's ``LocalPath``: ``framework/`` goes below it.
    :param node: the host-level node, ``"algo-<n>"``.
    :param rank: the global rank (0 for a single process).
    :param local_rank: the rank on this node.
    :param world_size: the number of ranks.
    :param config_path: the config file to watch for changes at step boundaries (optional).
    :param writer_factory: builds a timeline writer, same signature as
        :class:`stepscope.store.TimelineWriter`; a seam for tests (default: that class).
    """

    def __init__(
        self,
        config: ProfilerConfig,
        profiler_output_dir: str | os.PathLike[str],
        *,
        node: str = "algo-1",
        rank: int = 0,
        local_rank: int = 0,
        world_size: int = 1,
        config_path: str | os.PathLike[str] | None = None,
        writer_factory: Callable[..., Any] | None = None,
    ) -> None:
        self.config = config
        # absolute: a script may change its working directory (Hydra does) while it runs
        self.profiler_output_dir = Path(profiler_output_dir).absolute()
        self.node = node
        self.rank = rank
        self.local_rank = local_rank
        self.world_size = world_size
        self.node_id = f"{rank}-{node}"
        self.pid = os.getpid()
        self.guard = Guard()
        #: False once stopped, or in a forked child: hooks check it and do nothing.
        self.enabled = False
        #: Set by the detailed profiler while its window is open: ``name -> context manager``;
        #: annotations enter it so they show up in the Kineto trace too.
        self.record_function: Callable[[str], Any] | None = None
        #: this rank's clock minus rank 0's; None until measured (when the process group starts)
        self.clock_offset_us: float | None = None
        #: the process group's backend (``gloo``, ``nccl``, ...); None without a process group
        self.backend: str | None = None
        # step state: ``step`` is SageMaker's global step (all modes), used for every range;
        # ``mode_steps`` counts per mode and gives ``step_num``.
        self.step = -1
        self.mode: str | None = None
        self.mode_steps: dict[str, int] = {}
        self.in_step = False
        #: the running step's ``step_num`` (per mode, as SageMaker writes it)
        self.current_step_num = "0"
        #: epoch µs minus ``perf_counter`` µs (see :func:`now_us`), for hot paths
        self.epoch_offset_us = EPOCH_OFFSET_US
        self.step_start_us = 0.0
        #: Where the next step starts: the end of the previous step (or a data-loader epoch
        #: start); ``None`` when the next step starts where it is detected.
        self.boundary_us: float | None = None
        self.mode_override: str | None = None
        self.explicit_steps = False
        #: option -> active for the running (or, between steps, the next) step
        self.active: dict[str, bool] = dict.fromkeys(OPTIONS, False)
        self._listeners: list[StepListener] = []
        # the listeners' step methods with their guard names (:meth:`Guard.call_each`)
        self._on_step_begin: list[tuple[str, Callable[[Session, int], None]]] = []
        self._on_step_end: list[tuple[str, Callable[[Session, int], None]]] = []
        self._on_boundary: list[tuple[str, Callable[[Session, int], None]]] = []
        self._closers: list[Callable[[], None]] = []
        self.events = EventQueue(
            self, writer_factory=writer_factory, on_writer_opened=self._writer_opened
        )
        #: :meth:`EventQueue.write_later`, :meth:`EventQueue.write_batch_later` and
        #: :meth:`EventQueue.flush` of :attr:`events`, and its raw annotations (what every hook
        #: calls, without one more attribute look-up)
        self.write_later = self.events.write_later
        self.write_batch_later = self.events.write_batch_later
        self.flush = self.events.flush
        self.annotations = self.events.annotations
        self._lock = threading.RLock()
        self._watcher: Any = None
        #: the configuration file this session follows (``stepscope update`` rewrites it)
        self.config_path = Path(config_path) if config_path is not None else None
        self._last_poll_s = 0.0
        self._rank_file_written = False
        self._ranges = {option: config.range_for(option) for option in OPTIONS}
        #: :attr:`active` holds for the steps before this one (steps only grow): no range
        #: starts or ends in between
        self._active_until_step = -1

    # -- life -----------------------------------------------------------------------------

    def start(self) -> Session:
        """Make this the active session; raises :class:`SessionError` if another one is."""
        global _active
        if _active is not None:
            raise SessionError(
                f"a profiling session is already running in this process (node {_active.node_id})"
            )
        _forget_session_in_forked_children()
        _active = self
        self.enabled = True
        self._update_active(self.step + 1)
        if self.config_path is not None:
            self._watcher = _config_watcher(self.config_path)
        for listener in list(self._listeners):
            self.guard.wrap(f"{type(listener).__name__}.on_start", listener.on_start)(self)
        atexit.register(self._stop_at_exit)
        return self

    def stop(self) -> None:
        """Close the open step and every window, flush the writers, forget the session."""
        global _active
        if not self.enabled:
            atexit.unregister(self._stop_at_exit)
            if _active is self:
                _active = None
            return
        if self.in_step:
            self.guard.wrap("session.end_step", self.end_step)()
        for listener in list(self._listeners):
            self.guard.wrap(f"{type(listener).__name__}.on_stop", listener.on_stop)(self)
        for closer in reversed(self._closers):
            self.guard.wrap("session.close", closer)()
        self.guard.wrap("session.flush", self.flush)()
        self.enabled = False
        if self.events.writers:
            self.write_rank_file()
        self.events.close()
        atexit.unregister(self._stop_at_exit)  # after the flush, which may open a writer
        if _active is self:
            _active = None
        if self.guard.failures:
            logger.warning(
                "stepscope: %d instrumentation hook(s) failed and were disabled: %s",
                len(self.guard.failures),
                ", ".join(sorted(self.guard.failures)),
            )

    def _stop_at_exit(self) -> None:
        """Stop a session still running when the interpreter exits (never stopped, or left
        behind by an exception in the training code) while imports still work; a forked child
        that inherited the registration leaves its parent's session alone."""
        if os.getpid() == self.pid:
            self.guard.wrap("session.stop", self.stop)()

    def add_listener(self, listener: StepListener) -> None:
        """Register a window owner; it is told about the start, every step boundary and the stop."""
        self._listeners.append(listener)
        name = f"{type(listener).__name__}.on_step"
        on_step_begin = getattr(listener, "on_step_begin", None)
        if on_step_begin is not None:
            self._on_step_begin.append((name, on_step_begin))
        self._on_step_end.append((name, listener.on_step_end))
        on_boundary = getattr(listener, "on_boundary", None)
        if on_boundary is not None:
            self._on_boundary.append((name, on_boundary))
        if self.enabled:
            self.guard.wrap(f"{type(listener).__name__}.on_start", listener.on_start)(self)

    def add_closer(self, closer: Callable[[], None]) -> None:
        """Run ``closer`` (guarded) when the session stops, after the listeners, newest first."""
        self._closers.append(closer)

    # -- identity -------------------------------------------------------------------------

    def rank_file(self) -> Path:
        """``framework/ranks/<node_id>.json``: who this process is, and its clock offset."""
        from stepscope.store.layout import rank_file_path

        return rank_file_path(self.profiler_output_dir, self.node_id)

    def write_rank_file(self) -> None:
        """Write (atomically) this rank's description; failures cost a warning, nothing more."""
        info = {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "world_size": self.world_size,
            "node": self.node,
            "node_id": self.node_id,
            "pid": self.pid,
            # rank 0 is the reference; another rank's offset is unknown unless it was measured
            "clock_offset_us": 0.0 if self.rank == 0 else self.clock_offset_us,
        }
        if self.backend is not None:
            info["backend"] = self.backend
        if write_rank_file(self.rank_file(), info):
            self._rank_file_written = True

    def _writer_opened(self) -> None:
        if not self._rank_file_written:
            self.write_rank_file()
        if self.enabled:
            # atexit runs the newest handler first, and a writer closes itself at exit: the
            # session's own handler must come before it, to hand the queued events over
            atexit.unregister(self._stop_at_exit)
            atexit.register(self._stop_at_exit)

    def adopt_rank(self, rank: int, world_size: int) -> None:
        """Take the rank the process group gave (scripts launched without torchrun's ``RANK``).

        Only possible before the first event: files already written keep their node id. A rank
        file written already moves to the new node id.
        """
        if rank == self.rank and world_size == self.world_size:
            return
        if self.events.writers:
            logger.warning(
                "stepscope: this process is rank %d of %d but already wrote events as %s; "
                "set RANK before the first step (torchrun does) to name its files right",
                rank,
                world_size,
                self.node_id,
            )
            return
        written = self.rank_file() if self._rank_file_written else None
        self.rank, self.world_size = rank, world_size
        self.node_id = f"{rank}-{self.node}"
        if written is not None:
            if written != self.rank_file():
                remove_rank_file(written, self.pid)
            self.write_rank_file()

    def set_clock_offset(self, offset_us: float) -> None:
        """Record this rank's clock offset to rank 0 (raw timestamps are never rewritten)."""
        self.clock_offset_us = float(offset_us)
        self.write_rank_file()

    # -- steps ------------------------------------------------------------------------------

    def continue_steps(self, previous: Session) -> None:
        """Before :meth:`start`: number steps on from ``previous``, a stopped session of the
        same run, so that each mode's ``step_num`` and the ranges go on rather than restart."""
        self.step = previous.step
        self.mode_steps = dict(previous.mode_steps)

    def begin_step(self, mode: str, start_us: float | None = None) -> int:
        """Start the next global step in ``mode``; ends a still-open step first.

        :param start_us: when it started; default the previous step boundary, else now.
        :returns: the new global step number.
        """
        with self._lock:
            now = now_us()
            if self.in_step:
                self.end_step(now)
            if start_us is None:
                start_us = self.boundary_us if self.boundary_us is not None else now
            self.step += 1
            self.mode = mode
            self.mode_steps[mode] = self.mode_steps.get(mode, -1) + 1
            self.current_step_num = str(self.mode_steps[mode])
            self.in_step = True
            self.step_start_us = start_us
            self.boundary_us = None
            if self.step >= self._active_until_step:
                self._update_active(self.step, may_start=False)
            step_number = self.step
        if self._on_step_begin:
            self.guard.call_each(self._on_step_begin, self, step_number)
        return step_number

    def end_step(self, end_us: float | None = None) -> None:
        """End the running step: write its ``Step:ModeKeys.<MODE>`` event, turn the windows."""
        with self._lock:
            if not self.in_step:
                return
            end = now_us() if end_us is None else end_us
            self.in_step = False
            mode = self.mode or "GLOBAL"
            phase = f"Step:ModeKeys.{mode}"
            args = {"step_num": self.current_step_num, "pid": self.pid}
            self.write_later(phase, phase, self.step_start_us, end - self.step_start_us, args)
            self.events.flush_if_due()
            finished = self.step
            if self._watcher is not None:
                self._poll_config()
            if finished + 1 >= self._active_until_step:
                self._update_active(finished + 1)
        self.guard.call_each(self._on_step_end, self, finished)
        # The next step starts after our bookkeeping: its time is the training code's time.
        self.boundary_us = now_us()

    def mark_boundary(self, at_us: float) -> None:
        """The next step starts no earlier than ``at_us`` (e.g. a new data-loader epoch). A
        range that began by then switches on here, so that it covers the step's data loading
        too (the step's own begin comes after it, too late to switch an option on)."""
        with self._lock:
            if self.in_step:
                return
            self.boundary_us = at_us
            if self.step + 1 >= self._active_until_step:
                self._update_active(self.step + 1, at_s=at_us / 1e6)
            next_step = self.step + 1
        if self._on_boundary:
            self.guard.call_each(self._on_boundary, self, next_step)

    def next_step_num(self, mode: str) -> str:
        """The ``step_num`` the next step in ``mode`` will have."""
        return str(self.mode_steps.get(mode, -1) + 1)

    def _update_active(
        self, step_number: int, *, may_start: bool = True, at_s: float | None = None
    ) -> None:
        """Set :attr:`active` for ``step_number``, as at Unix time ``at_s`` (default now, on
        the collection clock: a time range lasts its duration even when NTP steps the wall clock,
        and covers the steps whose events are dated inside it).
        At the step's begin (``may_start=False``) an
        option can only go off (a time range that ended): the step's data loading ran before,
        with the option off, so turning it on there would profile half a step (a time range's
        one step would lose its data-loader events); the next step is judged at this one's end.
        Step boundaries call it only from :attr:`_active_until_step` on: most steps change
        nothing."""
        now_s = now_us() / 1e6 if at_s is None else at_s
        edges = [sys.maxsize]
        for option, profile_range in self._ranges.items():
            self.active[option] = bool(
                profile_range is not None
                and (may_start or self.active[option])
                and profile_range.should_profile(step_number, now_s)
            )
            edge = None if profile_range is None else profile_range.next_edge(step_number)
            if edge is not None:
                edges.append(edge)
        self._active_until_step = min(edges)

    def range_for(self, option: str) -> Any:
        """The range of ``option`` in force (one instance per config: time ranges are stateful),
        or ``None`` when that option is off."""
        return self._ranges.get(option)

    def _poll_config(self) -> None:
        now_s = time.monotonic()
        if now_s - self._last_poll_s < CONFIG_POLL_INTERVAL_S:
            return
        self._last_poll_s = now_s
        new_config = self.guard.wrap("session.config_watcher", self._watcher.poll)()
        if new_config is not None:  # no FrameworkProfile (every option off): ranges all None
            logger.info("stepscope: profiler configuration changed; applying it from the next step")
            self.config = new_config
            self._ranges = {
                option: _kept_range(self._ranges.get(option), new_config.range_for(option))
                for option in OPTIONS
            }
            self._active_until_step = -1


def _kept_range(current: Any, new: Any) -> Any:
    """``current`` when the new configuration gives the option the same range: a time range
    keeps the moment it started and the step it chose (``stepscope update`` rewrites every
    option, and a range built afresh would profile another ``duration`` seconds or step)."""
    return current if current is not None and current == new else new


def _config_watcher(path: Path) -> Any:
    from stepscope.config import ConfigWatcher

    return ConfigWatcher(path)


def forget_session() -> None:
    """Drop this process's session without writing anything: in a forked child (at the fork),
    in a worker process that must not profile (a data-loader worker started by ``spawn``), or in
    a script's process that starts the ranks, which profile themselves. Never raises: each
    caller is code that must run on whatever happens here."""
    global _active
    session, _active = _active, None
    if session is None:
        return
    session.enabled = False
    try:
        for listener in session._listeners:
            after_fork = getattr(listener, "after_fork_in_child", None)
            if after_fork is not None:
                session.guard.wrap("session.after_fork", after_fork)()
        session.events.forget_writers()
    except Exception:  # the session is dropped: nothing of it may reach the caller
        logger.debug("dropping the session left something behind", exc_info=True)


@functools.cache
def _forget_session_in_forked_children() -> None:
    """Register (once per process) the fork handler that keeps workers off our writers."""
    os.register_at_fork(after_in_child=forget_session)
