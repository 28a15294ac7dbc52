"""The step marking both callbacks share: begin and end steps, owning a session if needed."""

from __future__ import annotations

import contextlib
from typing import Any

from stepscope.collect.explicit import profile, profile_again
from stepscope.collect.session import Session, get_active_session


class StepMarker:
    """Marks explicit steps on the active session; starts one (``stepscope.profile()``) at
    :meth:`start` when none runs, and stops it at :meth:`stop`. The sessions it starts are one
    run (a framework's fit, then validate, test or predict): the same folder, steps numbered on.

    :param profile_kwargs: passed to :func:`stepscope.profile` when a session is started here.
    """

    def __init__(self, **profile_kwargs: Any) -> None:
        self._profile_kwargs = profile_kwargs
        self._owned: contextlib.AbstractContextManager[Any] | None = None
        self._last: Session | None = None

    def start(self) -> None:
        if get_active_session() is None and self._owned is None:
            if self._last is None:
                self._owned = profile(**self._profile_kwargs)
            else:
                self._owned = profile_again(self._last)
            self._last = self._owned.__enter__()

    def stop(self) -> None:
        owned, self._owned = self._owned, None
        if owned is not None:
            owned.__exit__(None, None, None)

    def begin(self, mode: str) -> None:
        session = get_active_session()
        if session is not None and session.enabled:
            session.explicit_steps = True
            session.guard.wrap("integration.step_begin", session.begin_step)(mode)

    def end(self) -> None:
        session = get_active_session()
        if session is not None and session.enabled:
            session.guard.wrap("integration.step_end", session.end_step)()

    def whole(self, mode: str) -> None:
        """A step that began at the previous boundary and ends now (when only its end is seen)."""
        self.begin(mode)
        self.end()
