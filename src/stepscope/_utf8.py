"""Text as UTF-8 can hold it, for the writers and for torch, which take nothing else."""

from __future__ import annotations

import re

__all__ = ["utf8_text"]

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def utf8_text(text: str) -> str:
    """``text`` as UTF-8 can hold it: each lone surrogate (``os.fsdecode`` makes one of an
    undecodable byte) becomes U+FFFD."""
    return text if text.isascii() else _LONE_SURROGATE.sub("\ufffd", text)
