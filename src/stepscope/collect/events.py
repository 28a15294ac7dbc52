"""The events a session has recorded and not yet handed to its timeline writers.

Every event of the training thread (steps, forward, backward, data loader, annotations,
collectives) waits in an :class:`EventQueue` and reaches the writers in one burst: at the first
step end after :data:`FLUSH_INTERVAL_S`, at the stop, or after :data:`LATER_MAX_EVENTS` events.
So the writer thread wakes about once a second instead of once per event, and the training
thread seldom hands it the GIL. A burst is one batch per writer (one guarded
``TimelineWriter.write_events`` call, whatever the number of events), and events built together
(a backward pass's sub-module events) are queued as one batch too: the per-event cost on the
training thread is a tuple and a list append. Annotations wait in their rawest form (two clock
readings and a thread id), converted only in the burst.

The writers (one per timeline file kind) are opened at the first event of their kind, so a
process that records nothing writes nothing.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stepscope.collect.session import Session
    from stepscope.store.timeline_writer import TimelineEvent

__all__ = [
    "ANNOTATION_PHASE",
    "FLUSH_INTERVAL_S",
    "LATER_MAX_EVENTS",
    "EventQueue",
]

logger = logging.getLogger(__name__)

#: Events held back before they are handed to the writers in one burst.
LATER_MAX_EVENTS = 1024
#: The phase of :mod:`stepscope.collect.annotations`' events.
ANNOTATION_PHASE = "Annotation"
#: Seconds between two bursts, checked at step ends.
FLUSH_INTERVAL_S = 1.0

_PYTHON_TIMELINE = "pythontimeline.json"


class EventQueue:
    """One session's pending events and its timeline writers.

    :param session: gives the output folder, node id, file settings and guard; its ``enabled``
        goes off when no writer can be opened.
    :param writer_factory: builds a timeline writer, same signature as
        :class:`stepscope.store.TimelineWriter`; a seam for tests (default: that class).
    :param on_writer_opened: called after a writer opened (the session writes its rank file).
    """

    def __init__(
        self,
        session: Session,
        *,
        writer_factory: Callable[..., Any] | None,
        on_writer_opened: Callable[[], None],
    ) -> None:
        self.session = session
        self.writers: dict[str, Any] = {}
        #: per timeline file: its writer's ``write_events`` behind the guard
        self._write_events: dict[str, Callable[[list[TimelineEvent]], Any]] = {}
        # append/popleft are atomic: any thread records, the flushing thread drains. An entry
        # is (timeline file, events in the writers' form); a single event is a list of one.
        self._later: collections.deque[tuple[str, list[TimelineEvent]]] = collections.deque()
        #: events queued in batches since the last burst, beyond one per entry (an estimate
        #: under races between threads, good enough to bound the queue)
        self._batched_events = 0
        #: annotations as the caller recorded them: (name, start perf_counter_ns, end
        #: perf_counter_ns, thread id, step_num); a burst converts them, so an annotation costs
        #: its caller two clock reads and one append
        self.annotations: collections.deque[tuple[str, int, int, int, str]] = collections.deque()
        self.last_flush_s = 0.0
        self._writer_factory = writer_factory
        self._on_writer_opened = on_writer_opened
        self._lock = threading.Lock()
        # a flush also runs on the caller's own thread (an annotation): whatever opening a
        # writer raises stops at the guard
        self._open_writer_guarded = session.guard.wrap("session.writer", self._open_writer)

    def write_later(
        self,
        phase: str,
        name: str,
        start_us: float,
        dur_us: float,
        args: dict[str, Any],
        suffix: str = _PYTHON_TIMELINE,
    ) -> None:
        """Queue an event for the next burst.

        :param suffix: the timeline file: ``pythontimeline.json`` (steps, forward/backward,
            annotations, collectives) or ``model_timeline.json`` (data loader), as SageMaker
            splits them.
        """
        later = self._later
        later.append((suffix, [(name, phase, start_us, dur_us, args, "X")]))
        if len(later) + self._batched_events >= LATER_MAX_EVENTS:
            self.flush()

    def write_batch_later(
        self, events: list[TimelineEvent], suffix: str = _PYTHON_TIMELINE
    ) -> None:
        """Queue events built together for the next burst, at the cost of one event.

        :param events: ``(name, phase, start_us, dur_us, args, "X")`` tuples, as
            :meth:`stepscope.store.TimelineWriter.write_events` takes them; the queue takes the
            list over (it must not be changed after the call, nor its args dicts).
        :param suffix: the timeline file, as for :meth:`write_later`.
        """
        later = self._later
        later.append((suffix, events))
        self._batched_events += len(events) - 1
        if len(later) + self._batched_events >= LATER_MAX_EVENTS:
            self.flush()

    def flush_if_due(self) -> None:
        """Flush when :data:`FLUSH_INTERVAL_S` passed since the last burst (at step ends)."""
        if time.monotonic() - self.last_flush_s >= FLUSH_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        """Hand the queued events and the annotations to the writers, one batch per writer."""
        self.last_flush_s = time.monotonic()
        self._batched_events = 0
        later = self._later
        batches: dict[str, list[TimelineEvent]] = {}
        while later:
            try:
                suffix, events = later.popleft()
            except IndexError:
                break  # another thread emptied the queue first
            batch = batches.get(suffix)
            if batch is None:
                batches[suffix] = events  # the queue owns the list: it becomes the batch
            else:
                batch += events
        if self.annotations:
            self._convert_annotations(batches)
        for suffix, batch in batches.items():
            write_events = self._write_events.get(suffix)
            if write_events is None:
                self._open_writer_guarded(suffix)
                write_events = self._write_events.get(suffix)
                if write_events is None:
                    continue  # no writer: these events are lost, training goes on
            # a writer that breaks its promise never to raise loses its events, not our hooks
            write_events(batch)

    def _convert_annotations(self, batches: dict[str, list[TimelineEvent]]) -> None:
        """Move the raw annotations into the batch of ``pythontimeline.json``, as events."""
        annotations = self.annotations
        session = self.session
        if session.guard.is_disabled("session.writer"):
            annotations.clear()
            return
        batch = batches.setdefault(_PYTHON_TIMELINE, [])
        append = batch.append
        offset_us = session.epoch_offset_us
        pid = session.pid
        # one args dict per thread and step, shared by its events (writers never change args)
        args_by_key: dict[tuple[int, str], dict[str, Any]] = {}
        try:
            while annotations:
                name, start_ns, end_ns, tid, step_num = annotations.popleft()
                args = args_by_key.get((tid, step_num))
                if args is None:
                    args = {"tid": tid, "pid": pid, "step_num": step_num}
                    args_by_key[tid, step_num] = args
                append(
                    (
                        str(name),
                        ANNOTATION_PHASE,
                        start_ns / 1000 + offset_us,
                        (end_ns - start_ns) / 1000,
                        args,
                        "X",
                    )
                )
        except IndexError:
            return  # another thread emptied the queue first
        except Exception:  # noqa: BLE001 - the guard's catch-all; fail() logs the traceback
            session.guard.fail("session.writer")

    def _open_writer(self, suffix: str) -> Any:
        session = self.session
        with self._lock:
            writer = self.writers.get(suffix)
            if writer is not None or not session.enabled:
                return writer
            framework = session.config.framework_profile_params
            factory = self._writer_factory
            if factory is None:
                from stepscope.store import TimelineWriter

                factory = TimelineWriter
            try:
                writer = factory(
                    session.profiler_output_dir,
                    session.node_id,
                    suffix=suffix,
                    file_max_size=getattr(framework, "file_max_size", 10485760),
                    file_close_interval_s=getattr(framework, "file_close_interval", 60),
                    file_open_fail_threshold=getattr(framework, "file_open_fail_threshold", 50),
                )
            except (OSError, ValueError) as exc:
                logger.warning(
                    "stepscope: cannot write framework events to %s (%s); "
                    "this process records no %s events.",
                    session.profiler_output_dir,
                    exc,
                    suffix,
                )
                session.enabled = False
                return None
            self._write_events[suffix] = session.guard.wrap("session.writer", writer.write_events)
            self.writers[suffix] = writer
        self._on_writer_opened()
        return writer

    def close(self) -> None:
        """Close every writer (guarded: a writer that raises is logged and skipped)."""
        guard = self.session.guard
        for writer in self.writers.values():
            guard.wrap("session.close_writer", writer.close)()

    def forget_writers(self) -> None:
        """Drop the writers without closing them (a forked child: their threads did not
        survive the fork)."""
        self.writers = {}
        self._write_events = {}
