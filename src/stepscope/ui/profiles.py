"""Loaded profiles: the jobs the user loaded, their load state, and a result cache per job.

Loading a job opens it through the store (``open_job``) and brings its columnar cache up to date
(``JobData.refresh()``) in a background thread, so the page stays responsive while a large job
is read; the job list shows the state (``loading``, ``loaded``, ``error``). A running job stays
live: before answering a dashboard question, a profile whose job is still running refreshes
itself at most every ``refresh_interval_s`` and drops its cached answers when new data arrived,
and once more when the job has ended, for what it wrote after the last refresh.

Each profile caches computed panels by key (bounded, oldest dropped first) and serializes work on
its job with a lock, since one DuckDB connection is not meant for concurrent queries (a
``JobData``'s connections are cursors of one database, so asking is cheap).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import duckdb

from stepscope.errors import StepscopeError
from stepscope.store.kineto import is_unix_time
from stepscope.ui.discovery import JobEntry

__all__ = ["JobOpener", "LoadState", "LoadedProfile", "ProfileJob", "ProfileRegistry"]

logger = logging.getLogger(__name__)

LoadState = Literal["loading", "loaded", "error"]


class ProfileJob(Protocol):
    """What the UI uses of a job: a ``stepscope.store.JobData``, or anything with its surface."""

    @property
    def metadata(self) -> Mapping[str, Any]:  # Any: job.json's values are any JSON
        """job.json and the facts the store recovered from the data."""

    def refresh(self) -> bool:
        """Read new data; True when rows were added or removed."""

    def connect(self) -> duckdb.DuckDBPyConnection:
        """A connection with the ``system`` and ``events`` views."""


#: Opens a job path (``stepscope.store.open_job``; tests pass their own).
JobOpener = Callable[[Path], ProfileJob]

_CACHE_ENTRIES = 128

_Answer = TypeVar("_Answer")


@dataclass
class LoadedProfile:
    """One loaded job: its entry, its JobData once loaded, and its cached answers."""

    entry: JobEntry
    state: LoadState = "loading"
    error: str = ""
    job: ProfileJob | None = None
    refreshed_at_s: float = 0.0
    # the job was running when its data was last read: read it once more after it ends
    read_while_running: bool = False
    first_us: float | None = None
    last_us: float | None = None
    nodes: list[str] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)
    # Any: each key caches the answer of its own question (a panel, an index, a list...)
    cache: OrderedDict[Hashable, Any] = field(default_factory=OrderedDict)

    def to_json(self) -> dict[str, Any]:  # Any: JSON values
        """The browser's record: times are dates (µs since the epoch) or ``None``.

        ``own_clock`` is true when the times are known only on a trace's own clock (a trace cut
        before its ``baseTimeNanoseconds``): start and end are then ``None``, not 1970 dates,
        and only the duration is known.
        """
        start_us, end_us = self.entry.start_us, self.entry.end_us
        duration_s = self.entry.duration_s  # a running job's: its time so far
        if self.first_us is not None and self.entry.timed_by_data:
            start_us, end_us = self.first_us, self.last_us
            duration_s = (end_us - start_us) / 1e6 if start_us and end_us else None
        own_clock = start_us is not None and not is_unix_time(start_us)
        return {
            "id": self.entry.id,
            "name": self.entry.name,
            "location": self.entry.location,
            "state": self.state,
            "error": self.error,
            "status": self.entry.status,
            "start_us": None if own_clock else start_us,
            "end_us": None if own_clock else end_us,
            "duration_s": duration_s,
            "own_clock": own_clock,
        }


class ProfileRegistry:
    """The set of loaded profiles, shared by every request of one app.

    :param opener: opens a job path (``stepscope.store.open_job``).
    :param refresh_interval_s: how often a running job's profile rereads new data at most.
    """

    def __init__(self, opener: JobOpener, *, refresh_interval_s: float = 5.0) -> None:
        self._opener = opener
        self._refresh_interval_s = refresh_interval_s
        self._profiles: dict[str, LoadedProfile] = {}
        self._lock = threading.Lock()

    def load(self, entry: JobEntry, *, wait: bool = False) -> LoadedProfile:
        """Start loading ``entry`` (no-op when already loaded or loading).

        :param wait: load in the calling thread instead of in the background.
        """
        with self._lock:
            profile = self._profiles.get(entry.id)
            if profile is not None and profile.state != "error":
                return profile
            profile = LoadedProfile(entry=entry)
            self._profiles[entry.id] = profile
        if wait:
            self._open(profile)
        else:
            threading.Thread(
                target=self._open, args=(profile,), name="stepscope-ui-load", daemon=True
            ).start()
        return profile

    def unload(self, job_id: str) -> bool:
        with self._lock:
            profile = self._profiles.pop(job_id, None)
        if profile is None:
            return False
        with profile.lock:
            profile.cache.clear()
            profile.job = None
        return True

    def update_entries(self, entries: list[JobEntry]) -> None:
        """Take fresh job-list entries (a running job may have completed since it was loaded)."""
        by_id = {entry.id: entry for entry in entries}
        with self._lock:
            for job_id, profile in self._profiles.items():
                if job_id in by_id:
                    profile.entry = by_id[job_id]

    def get(self, job_id: str) -> LoadedProfile | None:
        with self._lock:
            return self._profiles.get(job_id)

    def all(self) -> list[LoadedProfile]:
        """The profiles in the order they were asked to load: a list that reordered itself as
        loads end would move another profile under the pointer of a user picking one."""
        with self._lock:
            return list(self._profiles.values())

    def compute(
        self, profile: LoadedProfile, key: Hashable, fn: Callable[[ProfileJob], _Answer]
    ) -> _Answer:
        """``fn(job)`` for a loaded profile, cached under ``key`` until new data arrives.

        :param key: names the question: every call with one key must pass a ``fn`` giving the
            same type of answer, since a cached answer is returned as that type.
        """
        with profile.lock:
            job = profile.job
            if job is None:
                raise LookupError(f"profile {profile.entry.name!r} is not loaded")
            self._refresh_if_live(profile, job)
            if key in profile.cache:
                profile.cache.move_to_end(key)
                cached: _Answer = profile.cache[key]  # what an earlier fn of this key returned
                return cached
            value = fn(job)
            profile.cache[key] = value
            while len(profile.cache) > _CACHE_ENTRIES:
                profile.cache.popitem(last=False)
            return value

    def _open(self, profile: LoadedProfile) -> None:
        started = time.monotonic()
        try:
            job = self._opener(profile.entry.path)
            with profile.lock:
                running = profile.entry.status == "running"
                job.refresh()
                profile.job = job
                profile.refreshed_at_s = time.monotonic()
                profile.read_while_running = running
                self._note_data_facts(profile, job)
        except (StepscopeError, OSError, ValueError) as exc:
            logger.warning("could not load %s: %s", profile.entry.name, exc, exc_info=True)
            profile.error = str(exc)
            profile.state = "error"
            return
        except Exception as exc:  # the thread's boundary: a bug must show as an error, not hang
            logger.exception("loading %s failed unexpectedly", profile.entry.name)
            profile.error = f"unexpected error: {exc}"
            profile.state = "error"
            return
        profile.state = "loaded"
        logger.info("loaded %s in %.1f s", profile.entry.name, time.monotonic() - started)

    def _refresh_if_live(self, profile: LoadedProfile, job: ProfileJob) -> None:
        running = profile.entry.status == "running"
        if not running and not profile.read_while_running:
            return
        now = time.monotonic()
        if running and now - profile.refreshed_at_s < self._refresh_interval_s:
            return
        profile.refreshed_at_s = now
        profile.read_while_running = running
        try:
            changed = job.refresh()
        except (StepscopeError, OSError, ValueError) as exc:
            logger.warning("refreshing %s failed: %s", profile.entry.name, exc, exc_info=True)
            return
        if changed:
            profile.cache.clear()
            self._note_data_facts(profile, job)

    @staticmethod
    def _note_data_facts(profile: LoadedProfile, job: ProfileJob) -> None:
        """Remember the data's time range and nodes (discovery cannot know them for a trace)."""
        metadata = job.metadata
        if isinstance(metadata, Mapping):
            profile.first_us = metadata.get("first_timestamp_us")
            profile.last_us = metadata.get("last_timestamp_us")
            profile.nodes = [str(n) for n in metadata.get("nodes") or []]
