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
import inspect
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from stepscope._utf8 import utf8_text
from stepscope.collect import session as _session
from stepscope.collect.events import ANNOTATION_PHASE, LATER_MAX_EVENTS

if TYPE_CHECKING:
    from stepscope.collect.session import Session

__all__ = ["AnnotationHandle", "annotate", "annotation_begin", "annotation_end"]

PHASE = ANNOTATION_PHASE

_perf_counter_ns = time.perf_counter_ns
_get_ident = threading.get_ident

_F = TypeVar("_F", bound=Callable[..., Any])


class AnnotationHandle:
    """An open annotation, returned by :func:`annotation_begin` and closed by
    :func:`annotation_end` (closing it twice records it once)."""

    __slots__ = ("name", "range", "session", "start_ns", "tid")

    def __init__(
        self, name: str, session: Session | None, start_ns: int, tid: int, range_: Any
    ) -> None:
        self.name = name
        self.session = session
        #: ``perf_counter_ns`` at the start; the session converts it to epoch µs when it writes
        self.start_ns = start_ns
        #: the thread that opened it (it may be closed on another)
        self.tid = tid
        self.range = range_


def annotation_begin(name: str) -> AnnotationHandle | None:
    """Open an annotation named ``name`` now; returns the handle for :func:`annotation_end`.

    Returns ``None`` outside a profiling session (``annotation_end(None)`` is a no-op).
    """
    session = _session._active  # the hot path reads the active session without a call
    if session is None or not session.enabled:
        return None
    range_ = None
    if session.record_function is not None:
        range_ = _open_range(session, name)
    return AnnotationHandle(name, session, _perf_counter_ns(), _get_ident(), range_)


def annotation_end(handle: AnnotationHandle | None) -> None:
    """Close an annotation opened by :func:`annotation_begin` and write it to the timeline."""
    if handle is None:
        return
    try:
        session = handle.session
    except AttributeError:
        raise TypeError(
            "annotation_end() takes the handle that annotation_begin() returned (or None), "
            f"not {type(handle).__name__}"
        ) from None
    if session is None:
        return
    end_ns = _perf_counter_ns()
    handle.session = None
    if handle.range is not None:
        _close_range(session, handle.range)
    if session.enabled:
        _record(session, handle.name, handle.start_ns, end_ns, handle.tid)


def _record(session: Session, name: str, start_ns: int, end_ns: int, tid: int) -> None:
    """Queue the raw span; :meth:`Session.flush` converts it (epoch µs, args) in one burst."""
    annotations = session.annotations
    annotations.append((name, start_ns, end_ns, tid, session.current_step_num))
    if len(annotations) >= LATER_MAX_EVENTS:
        session.flush()


def _open_range(session: Session, name: str) -> Any:
    """Enter a ``record_function`` range for ``name`` (inside a detailed window only)."""
    record_function = session.record_function
    if record_function is None or session.guard.is_disabled(_RANGE_ENTER):
        return None
    try:
        range_ = record_function(utf8_text(str(name)))  # torch takes UTF-8 text only
        range_.__enter__()
    except Exception:  # noqa: BLE001 - the guard's catch-all; fail() logs the traceback
        session.guard.fail(_RANGE_ENTER)
        return None
    return range_


def _close_range(session: Session, range_: Any) -> None:
    if session.guard.is_disabled(_RANGE_EXIT):
        return
    try:
        range_.__exit__(None, None, None)
    except Exception:  # noqa: BLE001 - the guard's catch-all; fail() logs the traceback
        session.guard.fail(_RANGE_EXIT)


_RANGE_ENTER = "annotation.record_function"
_RANGE_EXIT = "annotation.record_function_exit"

#: ``annotate._open`` when no annotation of that object is open: an entry of no thread
_CLOSED: Any = (None, None, 0, None)


class annotate:
    """Annotate a block (``with annotate(name):``) or every call of a function (decorator).

    :param name: what the timeline shows; nesting and threads are fine.

    The context manager keeps its open span, ``(thread id, session, start, handle)``, in a slot
    rather than a list: the common ``with annotate(name):`` allocates one tuple. An object
    entered again before it exits (recursion, or one object shared by threads) stacks the outer
    span; a thread that exits under another thread's span takes its own from that stack.
    """

    __slots__ = ("_open", "_outer", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._open: Any = _CLOSED
        self._outer: list[Any] | None = None

    def __enter__(self) -> annotate:
        session = _session._active
        tid = _get_ident()
        if session is None or not session.enabled:
            opened: Any = (tid, None, 0, None)
        elif session.record_function is None:
            opened = (tid, session, _perf_counter_ns(), None)
        else:
            opened = (tid, None, 0, annotation_begin(self.name))
        if self._open is not _CLOSED:
            if self._outer is None:
                self._outer = []
            self._outer.append(self._open)
        self._open = opened
        return self

    def __exit__(self, *exc_info: object) -> None:
        end_ns = _perf_counter_ns()
        tid = _get_ident()
        opened = self._open
        if opened[0] == tid:
            outer = self._outer
            self._open = outer.pop() if outer else _CLOSED
        else:
            opened = self._take_outer(tid)
        session, start_ns, handle = opened[1:]
        if session is not None:
            if session.enabled:  # _record, inlined: this runs for every annotation
                annotations = session.annotations
                annotations.append((self.name, start_ns, end_ns, tid, session.current_step_num))
                if len(annotations) >= LATER_MAX_EVENTS:
                    session.flush()
        elif handle is not None:
            annotation_end(handle)

    def _take_outer(self, tid: int) -> Any:
        """This thread's latest span, from under another thread's (one object shared by
        threads); :data:`_CLOSED` when this thread has none open."""
        outer = self._outer or []
        for index in range(len(outer) - 1, -1, -1):
            if outer[index][0] == tid:
                return outer.pop(index)
        return _CLOSED

    def __call__(self, function: _F) -> _F:
        name = self.name

        if inspect.iscoroutinefunction(function):
            # a call only creates the coroutine: the span is the awaiting of it
            @functools.wraps(function)
            async def annotated_coroutine(*args: Any, **kwargs: Any) -> Any:
                handle = annotation_begin(name)
                try:
                    return await function(*args, **kwargs)
                finally:
                    annotation_end(handle)

            return annotated_coroutine  # type: ignore[return-value]

        @functools.wraps(function)
        def annotated(*args: Any, **kwargs: Any) -> Any:
            handle = annotation_begin(name)
            try:
                return function(*args, **kwargs)
            finally:
                annotation_end(handle)

        return annotated  # type: ignore[return-value]
