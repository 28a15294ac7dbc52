"""Attributes of torch that the instrumentation replaces, and puts back exactly as they were.

Every replaced function is recorded with what its owner (a module or a class) held under that
name, and :meth:`Patches.restore` puts them back in reverse order: a name patched twice (or by
two parts of the instrumentation) comes back to the first original.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["Patches"]

#: marks a name the owner did not hold itself (a class attribute it inherits)
_INHERITED = object()


class Patches:
    """The replacements one part of the instrumentation made, until :meth:`restore`."""

    def __init__(self) -> None:
        self._originals: list[tuple[Any, str, Any]] = []

    def replace(self, owner: Any, name: str, replacement: Any) -> None:
        """Set ``owner.name`` to ``replacement``."""
        self._originals.append((owner, name, vars(owner).get(name, _INHERITED)))
        setattr(owner, name, replacement)

    def wrap(self, owner: Any, name: str, wrap: Callable[[Any], Any]) -> None:
        """Set ``owner.name`` to ``wrap(original)``."""
        self.replace(owner, name, wrap(getattr(owner, name)))

    def call_first(self, owner: Any, name: str, before: Callable[..., object]) -> None:
        """Make ``owner.name`` call ``before`` with its arguments, then do what it did."""

        def wrap(original: Any) -> Any:
            @functools.wraps(original)
            def call(*args: Any, **kwargs: Any) -> Any:
                before(*args, **kwargs)
                return original(*args, **kwargs)

            return call

        self.wrap(owner, name, wrap)

    def original(self, owner: Any, name: str) -> Any:
        """What ``owner`` itself held as ``name`` before the first replacement (``owner.name``
        as it is, if never replaced)."""
        for patched, patched_name, original in self._originals:
            if patched is owner and patched_name == name and original is not _INHERITED:
                return original
        return getattr(owner, name)

    def restore(self) -> None:
        """Put every replaced attribute back, the last replaced first."""
        for owner, name, original in reversed(self._originals):
            if original is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        self._originals = []
