"""Writing gzip files cheaply: ISA-L's deflate at its fastest level.

Profiler traces are large and repetitive. ISA-L's level 1 shrinks them about tenfold at a small
fraction of zlib's CPU time; zlib at its default level 9, which ``torch.profiler`` uses for a
``.gz`` trace, spends as much CPU compressing a window's trace as the profiled steps took.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO, cast

from isal import igzip

__all__ = ["gzip_writer"]

#: ISA-L's levels run from 0 to 3; 1 compresses traces almost as well as 3 in a third of the time
LEVEL = 1


def gzip_writer(path: Path) -> BinaryIO:
    """A binary file that writes ``path`` gzipped."""
    return cast(BinaryIO, igzip.open(path, "wb", compresslevel=LEVEL))  # type: ignore[no-untyped-call]
