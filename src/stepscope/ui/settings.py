"""The UI's persisted settings and the auto shutdown that acts on them.

As in SageMaker Profiler, the app shuts itself down after a period without use: enabled by
default, after 2 hours. Settings live in one JSON file in the user's config folder
(``$XDG_CONFIG_HOME/stepscope/ui-settings.json``, else ``~/.config/stepscope/ui-settings.json``);
the path can be given instead, which tests do.

:class:`IdleShutdown` is the one background thread of the app: started and stopped by the app's
lifespan (never at import), it calls its ``on_idle`` callback once when no request counted as
activity arrived for the threshold. Background polling of the front end (a running job's
dashboard refreshing itself) does not count as activity, so an open but unattended tab does not
keep the server alive forever.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any  # Any: settings as JSON values, checked by UISettings

from stepscope._atomic import write_atomic
from stepscope.errors import ConfigError

__all__ = ["IdleShutdown", "UISettings", "default_settings_path", "load_settings", "save_settings"]

logger = logging.getLogger(__name__)

#: Longest allowed auto shutdown threshold: 30 days.
MAX_THRESHOLD_HOURS = 720.0


@dataclass(frozen=True)
class UISettings:
    """What the Settings page edits.

    :param auto_shutdown_enabled: shut the app down after ``auto_shutdown_threshold_hours``
        without use (default ``True``).
    :param auto_shutdown_threshold_hours: hours of inactivity before shutdown, a number in
        ``(0, 720]`` (default 2).
    """

    auto_shutdown_enabled: bool = True
    auto_shutdown_threshold_hours: float = 2.0

    def __post_init__(self) -> None:
        if not isinstance(self.auto_shutdown_enabled, bool):
            raise ConfigError(
                "UISettings.auto_shutdown_enabled", self.auto_shutdown_enabled, "true or false"
            )
        hours = self.auto_shutdown_threshold_hours
        if (
            isinstance(hours, bool)
            or not isinstance(hours, (int, float))
            or not 0 < hours <= MAX_THRESHOLD_HOURS
        ):
            raise ConfigError(
                "UISettings.auto_shutdown_threshold_hours",
                hours,
                f"a number of hours greater than 0 and at most {MAX_THRESHOLD_HOURS:g}",
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UISettings:
        """Settings from a JSON object; unknown keys are an error that lists the known ones."""
        known = {"auto_shutdown_enabled", "auto_shutdown_threshold_hours"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError("UISettings", unknown[0], "one of " + ", ".join(sorted(known)))
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_settings_path() -> Path:
    """Where settings persist unless a path is given: the user's config folder."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "stepscope" / "ui-settings.json"


def load_settings(path: Path) -> UISettings:
    """The saved settings, or the defaults when the file is missing or unreadable (logged)."""
    try:
        return UISettings.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return UISettings()
    except (OSError, ValueError, TypeError) as exc:
        logger.warning("ignoring UI settings in %s (%s); using the defaults", path, exc)
        return UISettings()


def save_settings(path: Path, settings: UISettings) -> None:
    """Write ``settings`` atomically (a reader never sees half a file)."""
    write_atomic(path, json.dumps(settings.to_dict(), indent=2) + "\n")


class IdleShutdown:
    """Calls ``on_idle`` once when the app has been unused for the configured time.

    :param settings: returns the current settings (read on every check, so changes apply live).
    :param on_idle: what shutting down means (the server sets its exit flag).
    :param threshold_s: overrides the settings' threshold, in seconds (a seam for tests).
    :param check_interval_s: how often the thread looks at the clock.
    """

    def __init__(
        self,
        settings: Callable[[], UISettings],
        on_idle: Callable[[], None],
        *,
        threshold_s: float | None = None,
        check_interval_s: float = 1.0,
    ) -> None:
        self._settings = settings
        self._on_idle = on_idle
        self._threshold_override_s = threshold_s
        self._check_interval_s = check_interval_s
        self._last_activity = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def touch(self) -> None:
        """Record activity now (each user request calls this)."""
        self._last_activity = time.monotonic()

    @property
    def last_activity_s(self) -> float:
        """``time.monotonic()`` of the last activity."""
        return self._last_activity

    def idle_s(self) -> float:
        return time.monotonic() - self._last_activity

    def threshold_s(self) -> float | None:
        """The current threshold in seconds, ``None`` when auto shutdown is disabled."""
        current = self._settings()
        if not current.auto_shutdown_enabled:
            return None
        if self._threshold_override_s is not None:
            return self._threshold_override_s
        return current.auto_shutdown_threshold_hours * 3600.0

    def start(self) -> None:
        self.touch()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="stepscope-ui-idle", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self._check_interval_s):
            threshold = self.threshold_s()
            if threshold is not None and self.idle_s() >= threshold:
                logger.info(
                    "no activity for %.0f s (auto shutdown threshold); shutting the UI down",
                    threshold,
                )
                self._on_idle()
                return
