"""Signal handlers set for the length of a block, for the launcher and the command line."""

from __future__ import annotations

import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = ["handling"]


@contextmanager
def handling(signals: Sequence[int], handler: Any) -> Iterator[None]:
    """Handle ``signals`` with ``handler`` (a function, or ``signal.SIG_IGN``) inside the block,
    then put the previous handlers back. Only the main thread can handle signals: from another,
    nothing changes."""
    previous: dict[int, Any] = {}
    try:
        for signum in signals:
            previous[signum] = signal.signal(signum, handler)
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for restored, handler_before in previous.items():
            signal.signal(restored, handler_before)
