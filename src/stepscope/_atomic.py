"""Replacing a file atomically: written beside it, then renamed over it.

Readers (the UI, the rule engine, the training processes, a trace viewer) see the old content or
the new, never half of either, and a failed write leaves the old file as it was.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["refuse_folder", "replacing", "write_atomic"]


def refuse_folder(path: str | os.PathLike[str]) -> Path:
    """``path`` as a ``Path``, when no folder is there for a file to replace.

    A caller with work to do before writing (the rules before their report) checks first, so
    that it does not do that work for nothing.

    :raises IsADirectoryError: ``path`` is a folder, named as such (not the temporary file the
        rename would fail on).
    """
    target = Path(path)
    if target.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(target))
    return target


def _make_folder(folder: Path) -> None:
    """``folder`` and the folders above it, a file in their way named as the one that is not a
    folder (mkdir names the folder it was making, where nothing is wrong, or says "File exists")."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        in_the_way = next(
            (p for p in [*reversed(folder.parents), folder] if p.exists() and not p.is_dir()),
            exc.filename,
        )
        raise NotADirectoryError(
            errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(in_the_way)
        ) from exc


@contextlib.contextmanager
def replacing(
    path: str | os.PathLike[str],
    *,
    suffix: str = ".tmp",
    make_folder: bool = True,
    exclusive: bool = False,
) -> Iterator[Path]:
    """A new empty file beside ``path`` for the block to write; it replaces ``path`` when the
    block ends, and is removed when the block raises.

    The file is readable by everyone (0644), as one written in place would be: the temporary file
    :func:`tempfile.mkstemp` makes is private to its owner, and a report, a rule's results, a
    job's configuration or an exported trace are there to be read by the UI, a teammate or the
    training processes.

    :param suffix: how the temporary file's name ends (it starts with a dot, hidden from readers).
    :param make_folder: create the folder of ``path`` when it is missing; else that is an error
        naming ``path`` (an output given on a command line, where a typo is likelier).
    :param exclusive: create ``path`` only if no file is there yet, in one step (a hard link),
        so that of two processes creating it at once one gets ``FileExistsError``.
    :raises OSError: the folder or the file cannot be written, naming ``path`` when the
        error named no file (a full disk) or the temporary file (a folder that takes no new
        file); see :func:`refuse_folder` for a folder at ``path``.
    """
    target = refuse_folder(path)
    if make_folder:
        _make_folder(target.parent)
    elif not target.parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(target))
    try:
        fd, temporary = tempfile.mkstemp(
            dir=target.parent, prefix=f".{target.name}.", suffix=suffix
        )
    except OSError as exc:
        # a folder that takes no new file (no permission): name the file asked for, not a
        # temporary name the user never gave
        raise OSError(exc.errno, exc.strerror, str(target)) from exc
    os.close(fd)
    try:
        yield Path(temporary)
        os.chmod(temporary, 0o644)
        if exclusive:
            os.link(temporary, target)
            os.unlink(temporary)
        else:
            os.replace(temporary, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError) and exc.filename is None and exc.errno is not None:
            # a write's error (a full disk) names no file: name the one that was not written
            raise OSError(exc.errno, exc.strerror, str(target)) from exc
        raise


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes | str,
    *,
    durable: bool = False,
    exclusive: bool = False,
) -> None:
    """Replace the content of ``path`` with ``data`` (text as UTF-8); see :func:`replacing`.

    :param durable: also flush the new content to the disk before the rename (a file that other
        processes start from, such as a job's configuration).
    :param exclusive: only create ``path``: ``FileExistsError`` when a file is there already.
    :raises OSError: the folder or the file cannot be written; no temporary file is left behind.
    """
    with replacing(path, exclusive=exclusive) as temporary, open(temporary, "wb") as handle:
        handle.write(data.encode() if isinstance(data, str) else data)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
