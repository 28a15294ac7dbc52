"""Natural order of names: ``algo-2`` before ``algo-10``, ``cpu2`` before ``cpu10``."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["natural_key"]


def natural_key(text: str) -> tuple[Any, ...]:  # Any: text and numbers alternate
    """A sort key of ``text`` in which runs of digits compare as numbers."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))
