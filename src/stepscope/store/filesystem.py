"""Where a job's raw files live: the local disk or an ``s3://`` prefix, behind one small interface.

Readers and the cache see a job as a root plus relative, ``/``-separated paths. A
:class:`LocalFiles` root is read with the standard library; an ``s3://bucket/prefix`` root goes
through fsspec and s3fs (the optional extra ``s3``), configured the usual way: ``AWS_*``
environment variables, or ``storage_options`` such as ``{"client_kwargs": {"endpoint_url": ...}}`` (the environment
variable ``AWS_ENDPOINT_URL`` is honoured by botocore itself).
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from stepscope._optional import require
from stepscope.errors import ConfigError, StorageAccessError

__all__ = [
    "FileInfo",
    "LocalFiles",
    "RemoteFiles",
    "SourceFiles",
    "local_output_path",
    "source_files",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FileInfo:
    """One raw file: its path relative to the root, and what tells us it changed."""

    path: str
    size_bytes: int
    mtime: float


class LocalFiles:
    """A folder on the local disk.

    :param confined: list no file or folder that is a symbolic link leading out of the folder
        (each logged once), so nothing outside it is read: the Profiler UI serves nothing
        outside the folders it was given. Default ``False``: links are followed.
    """

    def __init__(self, root: str | os.PathLike[str], *, confined: bool = False) -> None:
        self.root = Path(root).resolve()
        self.url = str(self.root)
        self.confined = confined
        self._refused: set[str] = set()

    def leads_outside(self, full: str | os.PathLike[str]) -> bool:
        """Whether ``full``, a path in this folder, is one that a ``confined`` folder refuses:
        it leads out of the folder (a link, or a path through one)."""
        return self.confined and not Path(os.path.realpath(full)).is_relative_to(self.root)

    def _refuses(self, full: str) -> bool:
        """Whether ``full`` leads out of a confined folder; logged once per path."""
        if not self.leads_outside(full):
            return False
        if full not in self._refused:
            self._refused.add(full)
            logger.warning("skipping %s: it links outside %s", full, self.root)
        return True

    def is_file(self, rel: str) -> bool:
        return (self.root / rel).is_file()

    def exists(self) -> bool:
        return self.root.exists()

    def missing_detail(self) -> str:
        """What is missing when the root does not exist: the path says it all."""
        return ""

    def list_dir(self, rel: str = "") -> list[str]:
        """Names directly inside ``rel`` (empty when it is not a folder), without the cache
        folder ``.stepscope``, which is never data (:func:`~stepscope.store.cache.cache_dir_for`
        says when it links out)."""
        folder = self.root / rel
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            return []
        return [
            name
            for name in names
            if name != ".stepscope" and not self._refuses(os.path.join(folder, name))
        ]

    def walk(self, rel: str = "") -> list[FileInfo]:
        """Every file below ``rel``, with size and modification time, sorted by path."""
        base = self.root / rel if rel else self.root
        if self._refuses(str(base)):
            return []
        found: list[FileInfo] = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if d != ".stepscope"]
            for name in filenames:
                full = os.path.join(dirpath, name)
                if self._refuses(full):
                    continue
                try:
                    st = os.stat(full)
                except OSError:  # removed while we walked (a .tmp renamed by its writer)
                    continue
                rel_path = os.path.relpath(full, self.root).replace(os.sep, "/")
                found.append(FileInfo(rel_path, st.st_size, st.st_mtime))
        found.sort(key=lambda f: f.path)
        return found

    def file_info(self, rel: str) -> FileInfo:
        """The size and modification time of one file (``""``: the root, when it is a file)."""
        st = (self.root / rel).stat()
        return FileInfo(rel, st.st_size, st.st_mtime)

    def read_bytes(self, rel: str) -> bytes:
        return (self.root / rel).read_bytes()

    def read_head(self, rel: str, size_bytes: int) -> bytes:
        """The first ``size_bytes`` of a file (all of a smaller one)."""
        with open(self.root / rel, "rb") as raw:
            return raw.read(size_bytes)

    def open(self, rel: str) -> IO[bytes]:
        return open(self.root / rel, "rb")

    @contextmanager
    def local_path(self, rel: str) -> Iterator[Path]:
        """A local path of the file, for readers that need one."""
        yield self.root / rel

    def writable(self) -> bool:
        """Whether we may write inside the folder: the permission bits say so, not only access.

        ``os.access`` is always true for root, so a folder without any write bit (a read-only
        input, such as recorded data) counts as read-only even then.
        """
        try:
            mode = self.root.stat().st_mode
        except OSError:
            return False
        return self.root.is_dir() and bool(mode & 0o222) and os.access(self.root, os.W_OK)


class RemoteFiles:
    """An fsspec location such as ``s3://bucket/prefix`` (needs the ``s3`` extra for S3)."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        fsspec = require("fsspec", extra="s3", feature=f"Reading {url}")
        if url.startswith("s3://"):
            require("s3fs", extra="s3", feature=f"Reading {url}")
        self.url = url.rstrip("/")
        #: the caller's fsspec options, for whoever opens this location again
        self.storage_options: dict[str, Any] = dict(storage_options or {})
        # A fresh instance, not fsspec's cached one: credentials and endpoints come from the
        # environment at open time, and a cached client may point at a stale endpoint.
        options = {"skip_instance_cache": True, **(storage_options or {})}
        if url.startswith("s3://"):
            options = _with_s3_patience(options)
        self.fs, root = fsspec.core.url_to_fs(self.url, **options)
        if url.startswith("s3://"):
            self.fs.retries = 1  # s3fs's own tries (not an option): botocore's retries suffice
        self._root: str = root.rstrip("/")

    def _full(self, rel: str) -> str:
        return f"{self._root}/{rel}" if rel else self._root

    @contextmanager
    def requests(self) -> Iterator[None]:
        """Requests the store refuses, or that never reach it, raise a :class:`StorageAccessError`
        that names the location and what to check; a missing file stays ``FileNotFoundError``.
        For the requests a caller makes through :attr:`fs` itself too."""
        try:
            yield
        except FileNotFoundError:
            raise
        except Exception as exc:
            error = _access_error(self.url, exc)
            if error is None:
                raise
            raise error from exc

    def is_file(self, rel: str) -> bool:
        with self.requests():
            return bool(self.fs.isfile(self._full(rel)))

    def exists(self) -> bool:
        with self.requests():
            if self.fs.exists(self._root):
                return True
            try:
                # s3fs says False, not why, for a bucket it may not look into: a listing says why
                self.fs.ls(self._root, refresh=True)
            except FileNotFoundError:
                return False
        return True

    def missing_detail(self) -> str:
        """What is missing when the root does not exist: on S3 the bucket itself (a typo in its
        name), or only the prefix inside it."""
        if not self.url.startswith("s3://"):
            return ""
        bucket, _, prefix = self._root.partition("/")
        try:
            self.fs.call_s3("head_bucket", Bucket=bucket)
        except FileNotFoundError:
            return f"The bucket {bucket!r} does not exist."
        except Exception:  # refused (a policy limited to a prefix, say): it may well exist
            logger.debug("cannot tell whether the bucket %s exists", bucket, exc_info=True)
        return f"The bucket {bucket!r} holds nothing under {prefix + '/'!r}."

    def list_dir(self, rel: str = "") -> list[str]:
        try:
            with self.requests():
                entries = self.fs.ls(self._full(rel), detail=False, refresh=True)
        except FileNotFoundError:
            return []
        return sorted(str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries)

    def walk(self, rel: str = "") -> list[FileInfo]:
        self.fs.invalidate_cache()
        try:
            with self.requests():
                entries = self.fs.find(self._full(rel), detail=True)
        except FileNotFoundError:
            return []
        found = []
        prefix = self._root + "/"
        for name, info in entries.items():
            if info.get("type") == "directory" or not name.startswith(prefix):
                continue
            rel_path = name[len(prefix) :]
            if rel_path.startswith(".stepscope/"):
                continue
            found.append(_file_info(rel_path, info))
        found.sort(key=lambda f: f.path)
        return found

    def file_info(self, rel: str) -> FileInfo:
        """The size and modification time of one file (``""``: the root, when it is a file)."""
        self.fs.invalidate_cache()
        with self.requests():
            return _file_info(rel, self.fs.info(self._full(rel)))

    def read_bytes(self, rel: str) -> bytes:
        with self.requests():
            return bytes(self.fs.cat_file(self._full(rel)))

    def read_head(self, rel: str, size_bytes: int) -> bytes:
        """The first ``size_bytes`` of a file, in one ranged request: enough to tell what it is
        without downloading it (:meth:`open` reads tens of MB ahead)."""
        with self.requests():
            return bytes(self.fs.cat_file(self._full(rel), start=0, end=size_bytes))

    def open(self, rel: str) -> IO[bytes]:
        with self.requests():
            return self.fs.open(self._full(rel), "rb")  # type: ignore[no-any-return]

    @contextmanager
    def local_path(self, rel: str) -> Iterator[Path]:
        """Download the file to a temporary folder for readers that need a local path."""
        folder = tempfile.mkdtemp(prefix="stepscope-")
        try:
            target = Path(folder) / self._full(rel).rsplit("/", 1)[-1]
            with self.requests():
                self.fs.get_file(self._full(rel), str(target))
            yield target
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def writable(self) -> bool:
        return False

    @property
    def fsspec_root(self) -> str:
        """The root as the fsspec filesystem names it (no scheme)."""
        return self._root


#: How long an S3 request may wait. s3fs's defaults (its own 5 tries, each of botocore's 5
#: attempts waiting up to 15 s for an answer) make an endpoint that accepts connections and never
#: answers take about 7 minutes to fail. Here botocore alone retries (its standard mode, which
#: also backs off on throttling: SlowDown, 503), and a request fails within about half a minute;
#: ``storage_options={"config_kwargs": {...}}`` overrides each value, and the retries are left to
#: the environment when it sets them (:data:`_RETRY_VARIABLES`).
_S3_CONFIG: dict[str, Any] = {
    "connect_timeout": 5,
    "read_timeout": 10,
    "retries": {"mode": "standard", "total_max_attempts": 3},
}
#: botocore's environment variables for retries: a user who sets one gets botocore's own rules
_RETRY_VARIABLES = ("AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE")


def _with_s3_patience(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with :data:`_S3_CONFIG` wherever their ``config_kwargs`` say nothing (a copy:
    botocore may edit the retry settings it is given)."""
    ours = copy.deepcopy(_S3_CONFIG)
    if any(os.environ.get(variable) for variable in _RETRY_VARIABLES):
        del ours["retries"]
    config = {**ours, **(options.get("config_kwargs") or {})}
    return {**options, "config_kwargs": config}


_CREDENTIALS_HINT = (
    "Check the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE) "
    "and that they may list and read this location."
)
_ENDPOINT_HINT = (
    "Check the endpoint (AWS_ENDPOINT_URL, or storage_options="
    "{'client_kwargs': {'endpoint_url': ...}}) and the network."
)


def _access_error(url: str, exc: Exception) -> StorageAccessError | None:
    """What a failed request for ``url`` means to the user, when the store refused it or it
    never reached the store; None for any other failure."""
    # botocore is loaded by then if the error is one of its own (s3fs raises them untranslated)
    botocore = sys.modules.get("botocore.exceptions")
    if isinstance(exc, PermissionError):
        return StorageAccessError(url, f"access denied ({exc})", _CREDENTIALS_HINT)
    if botocore is not None and isinstance(exc, botocore.NoCredentialsError):
        return StorageAccessError(url, str(exc), _CREDENTIALS_HINT)
    if isinstance(exc, (ConnectionError, TimeoutError)) or (
        botocore is not None and isinstance(exc, botocore.BotoCoreError)
    ):
        return StorageAccessError(url, str(exc), _ENDPOINT_HINT)
    return None


def _file_info(rel: str, info: dict[str, Any]) -> FileInfo:
    """A :class:`FileInfo` from what fsspec says of a file."""
    modified = info.get("LastModified") or info.get("mtime") or 0
    mtime = modified.timestamp() if hasattr(modified, "timestamp") else float(modified)
    return FileInfo(rel, int(info.get("size") or 0), mtime)


SourceFiles = LocalFiles | RemoteFiles


def _is_remote(text: str) -> bool:
    """Whether ``text`` is a URL with a scheme other than ``file://``."""
    return "://" in text and not text.startswith("file://")


def source_files(
    path: str | os.PathLike[str],
    storage_options: dict[str, Any] | None = None,
    *,
    confined: bool = False,
) -> SourceFiles:
    """The file access for ``path``: a URL with a scheme goes through fsspec, anything else is
    local (``confined``: see :class:`LocalFiles`)."""
    text = os.fspath(path)
    if _is_remote(text):
        return RemoteFiles(text, storage_options)
    return LocalFiles(text.removeprefix("file://"), confined=confined)


def local_output_path(parameter: str, path: str | os.PathLike[str]) -> Path:
    """``path``, where ``parameter`` says to write, as a local path.

    Only inputs may be remote: an ``s3://`` output would otherwise become a folder named
    ``s3:`` in the working directory, and the user would look for it in the bucket.

    :raises ConfigError: ``path`` is a URL such as ``s3://bucket/key``, or empty (a variable
        left unset, ``--output-dir "$OUT"``), which as a path is the current folder.
    """
    text = os.fspath(path)
    if not text:
        raise ConfigError(
            parameter, text, "a local path", "An empty path is the current folder: give . for it."
        )
    if _is_remote(text):
        raise ConfigError(
            parameter,
            text,
            "a local path",
            "stepscope writes to the local disk only: write there, then copy it to the bucket "
            "(aws s3 cp, or aws s3 sync for a folder).",
        )
    return Path(text.removeprefix("file://"))
