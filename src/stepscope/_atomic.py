"""Replacing a small file atomically: written beside it, then renamed over it.

Readers (the UI, the rule engine, the training processes) see the old content or the new, never
half of either, and a failed write leaves the old file as it was.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path

__all__ = ["write_atomic"]


def write_atomic(path: str | os.PathLike[str], data: bytes | str, *, durable: bool = False) -> None:
    """Replace the content of ``path`` with ``data`` (text as UTF-8); creates its folder.

    The file is readable by everyone (0644), as one written in place would be: the temporary file
    :func:`tempfile.mkstemp` makes is private to its owner, and a report, a rule's results or a
    job's configuration are there to be read by the UI, a teammate or the training processes.

    :param durable: also flush the new content to the disk before the rename (a file that other
        processes start from, such as a job's configuration).
    :raises OSError: the folder or the file cannot be written; no temporary file is left behind.
        A folder at ``path`` is named as such, not the temporary file the rename would fail on.
    """
    target = Path(path)
    if target.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
