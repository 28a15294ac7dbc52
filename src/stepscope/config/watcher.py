"""``ConfigWatcher``: notices when a configuration file changes while the job runs.

This is how ``stepscope update`` reaches a running job: it rewrites the job's
``profiler-config.json`` atomically, and the instrumented process, polling a watcher once per
step, picks up the new configuration. A poll costs one ``stat`` when nothing changed; the file is
read only when its modification time, size or inode moved, and parsed only when its bytes differ.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from stepscope.config.profiler import ProfilerConfig
from stepscope.config.serialization import parse_config_bytes
from stepscope.errors import StepscopeError

__all__ = ["ConfigWatcher"]

logger = logging.getLogger(__name__)

_Signature = tuple[int, int, int]


class ConfigWatcher:
    """Watch one configuration file; :meth:`poll` returns the new configuration after a change.

    The file is read once when the watcher is built (:attr:`config`; None while the file does
    not exist). Neither that nor :meth:`poll` ever raises: a half-written, invalid, unreadable
    or deleted file logs one warning and the previous configuration stays in force.

    :param path: the JSON or YAML configuration file (any shape :meth:`ProfilerConfig.from_file`
        reads).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._signature: _Signature | None = None
        self._content: bytes | None = None
        self._config: ProfilerConfig | None = None
        self.poll()

    @property
    def config(self) -> ProfilerConfig | None:
        """The configuration in force: the last valid content read, or None if none was yet."""
        return self._config

    def _stat(self) -> _Signature | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return (stat.st_mtime_ns, stat.st_size, stat.st_ino)

    def poll(self) -> ProfilerConfig | None:
        """The new configuration if the file's content changed since the last poll, else None."""
        signature = self._stat()
        if signature is None or signature == self._signature:
            if signature is None and self._signature is not None:
                logger.warning("%s disappeared: keeping the current configuration", self.path)
                self._signature = None
            return None
        self._signature = signature
        try:
            content = self.path.read_bytes()
        except OSError as exc:
            logger.warning("cannot read %s (%s): keeping the current configuration", self.path, exc)
            return None
        if content == self._content:
            return None
        self._content = content
        try:
            config = ProfilerConfig.from_dict(parse_config_bytes(content, self.path))
        except StepscopeError as exc:
            reason = str(exc).rstrip(".")  # errors end with a full stop; the sentence goes on
            logger.warning("ignoring %s: %s; keeping the current configuration", self.path, reason)
            return None
        except Exception:  # a bug must not stop the training job: report it with the traceback
            logger.exception(
                "unexpected error reading %s; keeping the current configuration", self.path
            )
            return None
        if config == self._config:
            return None
        self._config = config
        return config
