"""The guard: the one catch-all between stepscope's hooks and the training code.

Every entry point that PyTorch (or the training script, through a patched function) calls into
stepscope runs behind :meth:`Guard.wrap`. When such a hook raises, the guard logs the traceback
once, counts the failure and disables that hook for the rest of the process; the training step
goes on as if stepscope were not there. Patched functions call the original outside the guard, so
the user's own exceptions still reach the user unchanged.

This module imports no torch: the session and the annotations share the session's guard.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ["Guard"]

logger = logging.getLogger(__name__)

_F = TypeVar("_F", bound=Callable[..., Any])


class Guard:
    """Counts and disables failing hooks; one instance per profiling session.

    :attr failures: hook name -> number of failures (1 once a hook is disabled, since a disabled
        hook does not run again).
    """

    def __init__(self) -> None:
        self.failures: dict[str, int] = {}
        self._disabled: set[str] = set()
        self._lock = threading.Lock()

    def is_disabled(self, name: str) -> bool:
        """Whether the hook ``name`` failed and is now switched off."""
        return name in self._disabled

    def wrap(self, name: str, hook: _F) -> _F:
        """Return ``hook`` behind the guard: a failure returns ``None`` and disables ``name``.

        :param name: a stable, human-readable hook name (``"torch.forward_pre"``); hooks that
            share a name are disabled together.
        :param hook: the function to protect.
        """
        disabled = self._disabled
        fail = self.fail

        def guarded(*args: Any, **kwargs: Any) -> Any:
            if name in disabled:
                return None
            try:
                return hook(*args, **kwargs)
            except Exception:  # noqa: BLE001 - the documented catch-all; fail() logs the traceback
                fail(name)
                return None

        guarded.__name__ = getattr(hook, "__name__", name)
        guarded.__qualname__ = getattr(hook, "__qualname__", name)
        return guarded  # type: ignore[return-value]

    def call_each(self, calls: Sequence[tuple[str, Callable[..., object]]], *args: Any) -> None:
        """Call each ``(name, function)`` of ``calls`` with ``args`` behind the guard, as
        :meth:`wrap` would one by one, in a single Python call: the session tells its listeners
        of every step boundary this way."""
        disabled = self._disabled
        for name, function in calls:
            if name in disabled:
                continue
            try:
                function(*args)
            except Exception:  # noqa: BLE001 - the documented catch-all; fail() logs the traceback
                self.fail(name)

    def fail(self, name: str) -> None:
        """Record a failure of ``name`` from inside an ``except`` block (logs its traceback)."""
        with self._lock:
            self.failures[name] = self.failures.get(name, 0) + 1
            first = name not in self._disabled
            self._disabled.add(name)
        if first:
            logger.warning(
                "stepscope: the %s hook failed and is now disabled; training continues, "
                "without the data this hook collects.",
                name,
                exc_info=True,
            )
