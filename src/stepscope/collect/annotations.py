"""Custom annotations: named spans a training script puts on the timeline.

::

    with stepscope.annotate("Forward"):
        out = model(x)

    @stepscope.annotate("load_batch")
    def load_batch(): ...

    handle = stepscope.annotation_begin("step_3")
    ...
    stepscope.annotation_end(handle)

Each annotation becomes one event of phase ``Annotation`` (name = the annotation's name) in the
node's ``pythontimeline`` file, with the thread id, so nested annotations nest on the timeline.
Inside a detailed-profiling window the annotation also opens a ``torch.profiler.record_function``
range, so it shows up in the Kineto trace around the operators it covers.

Outside a profiling session every call is a no-op that costs one function call; this module
imports no torch, so ``import stepscope`` stays light for scripts that only annotate.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from stepscope.collect import session as _session
from stepscope.collect.session import LATER_MAX_EVENTS

__all__ = ["AnnotationHandle", "annotate", "annotation_begin", "annotation_end"]

PHASE = "Annotation"

_perf_counter = time.perf_counter
_get_ident = threading.get_ident

_F = TypeVar("_F", bound=Callable[..., Any])


class AnnotationHandle:
    """An open annotation, returned by :func:`annotation_begin` and closed by
    :func:`annotation_end` (closing it twice records it once)."""

    __slots__ = ("name", "range", "session", "start_us", "tid")

    def __init__(self, name: str, session: Any, start_us: float, tid: int, range_: Any) -> None:
        self.name = name
        self.session = session
        self.start_us = start_us
        self.tid = tid
        self.range = range_


def annotation_begin(name: str) -> AnnotationHandle | None:
    """Open an annotation named ``name`` now; returns the handle for :func:`annotation_end`.

    Returns ``None`` outside a profiling session (``annotation_end(None)`` is a no-op).
    """
    session = _session._active  # the hot path reads the active session without a call
    if session is None or not session.enabled:
        return None
    record_function = session.record_function
    range_ = None
    if record_function is not None:
        range_ = session.guard.wrap("annotation.record_function", _enter_range)(
            record_function, name
        )
    start_us = _perf_counter() * 1e6 + session.epoch_offset_us
    return AnnotationHandle(str(name), session, start_us, _get_ident(), range_)


def annotation_end(handle: AnnotationHandle | None) -> None:
    """Close an annotation opened by :func:`annotation_begin` and write it to the timeline."""
    if handle is None or handle.session is None:
        return
    session = handle.session
    end_us = _perf_counter() * 1e6 + session.epoch_offset_us
    handle.session = None
    if handle.range is not None:
        session.guard.wrap("annotation.record_function_exit", _exit_range)(handle.range)
    if session.enabled:
        later = session._later  # Session.write_later, inlined: this runs for every annotation
        later.append(
            (
                PHASE,
                handle.name,
                handle.start_us,
                end_us - handle.start_us,
                {"tid": handle.tid, "pid": session.pid, "step_num": session.current_step_num},
                "pythontimeline.json",
            )
        )
        if len(later) >= LATER_MAX_EVENTS:
            session.flush()


def _enter_range(record_function: Callable[[str], Any], name: str) -> Any:
    range_ = record_function(name)
    range_.__enter__()
    return range_


def _exit_range(range_: Any) -> None:
    range_.__exit__(None, None, None)


class annotate:
    """Annotate a block (``with annotate(name):``) or every call of a function (decorator).

    :param name: what the timeline shows; nesting and threads are fine.
    """

    __slots__ = ("_handles", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._handles: list[AnnotationHandle | None] = []

    def __enter__(self) -> annotate:
        self._handles.append(annotation_begin(self.name))
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._handles:
            annotation_end(self._handles.pop())

    def __call__(self, function: _F) -> _F:
        name = self.name

        @functools.wraps(function)
        def annotated(*args: Any, **kwargs: Any) -> Any:
            handle = annotation_begin(name)
            try:
                return function(*args, **kwargs)
            finally:
                annotation_end(handle)

        return annotated  # type: ignore[return-value]
