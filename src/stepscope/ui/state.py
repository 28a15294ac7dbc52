"""The state one UI app holds: its roots, the jobs found under them, loaded profiles, settings.

One :class:`UIState` lives on ``app.state.ui`` for the app's lifetime (no module-level state);
routers reach it through :func:`ui_state`. Job ids from requests are checked here, in one place:
an id must be the hex form discovery produces and must name a job found under the roots, else
the request fails with 404, so no request string ever becomes a path.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from stepscope.ui.discovery import JobEntry, current_entry, discover_jobs
from stepscope.ui.profiles import LoadedProfile, ProfileRegistry
from stepscope.ui.settings import IdleShutdown, UISettings, load_settings, save_settings

__all__ = ["State", "UIState", "removal", "ui_state"]

_JOB_ID = re.compile(r"^[0-9a-f]{20}$")


@dataclass
class UIState:
    """Everything the routers share.

    :param roots: the folders (or trace files) jobs are listed from.
    :param registry: the loaded profiles.
    :param settings_path: where settings persist.
    :param idle: the auto shutdown watchdog.
    """

    roots: list[Path]
    registry: ProfileRegistry
    settings_path: Path
    idle: IdleShutdown | None = None
    settings: UISettings = field(default_factory=UISettings)
    _entries: dict[str, JobEntry] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.settings = load_settings(self.settings_path)

    def update_settings(self, settings: UISettings) -> None:
        save_settings(self.settings_path, settings)
        self.settings = settings

    def jobs(self) -> list[JobEntry]:
        """Rediscover the jobs under the roots (the job list is always current)."""
        entries = discover_jobs(self.roots)
        with self._lock:
            self._entries = {entry.id: entry for entry in entries}
        self.registry.update_entries(entries)
        return entries

    def entry(self, job_id: str) -> JobEntry:
        """The job named by ``job_id``, or a 404 for anything else: of a loaded job no longer
        found under the roots, one that says it was removed or moved."""
        if not _JOB_ID.fullmatch(job_id):
            raise HTTPException(status_code=404, detail="No such job.")
        with self._lock:
            found = self._entries.get(job_id)
        if found is None:
            found = next((e for e in self.jobs() if e.id == job_id), None)
        if found is None:
            profile = self.registry.get(job_id)
            gone = removal(profile) if profile is not None else ""
            raise HTTPException(status_code=404, detail=gone or "No such job.")
        return found

    def loaded(self, job_id: str) -> LoadedProfile:
        """The loaded profile of ``job_id``, with its job's status as it is now; 404 if
        unknown or removed since it was loaded, 409 if not (yet) loaded."""
        entry = self.entry(job_id)
        profile = self.registry.get(entry.id)
        if profile is not None:
            self.refresh_status([profile])
        if profile is None:
            raise HTTPException(status_code=409, detail=f"Load '{entry.name}' first.")
        if profile.state == "loading":
            raise HTTPException(status_code=409, detail=f"'{entry.name}' is still loading.")
        if profile.state == "error":
            raise HTTPException(
                status_code=409, detail=f"'{entry.name}' could not be loaded: {profile.error}"
            )
        gone = removal(profile)
        if gone:
            # what it read is gone with it: its answers would say the job holds no data
            raise HTTPException(status_code=404, detail=gone)
        return profile

    def refresh_status(self, profiles: list[LoadedProfile]) -> None:
        """Read the status of the jobs of ``profiles`` again (it changes while a job runs)."""
        entries = [current_entry(profile.entry) for profile in profiles]
        with self._lock:
            self._entries.update((entry.id, entry) for entry in entries)
        self.registry.update_entries(entries)


def removal(profile: LoadedProfile) -> str:
    """Why a loaded job can no longer be shown, or ``""`` while its folder or trace is there (or
    it is not loaded: a load that failed says why itself): the message names what is missing
    (the root's own name and the path inside it, as the user knows them) and what to do."""
    entry = profile.entry
    if profile.state != "loaded" or entry.path.exists():
        return ""
    where = entry.path.relative_to(entry.root.parent).as_posix()
    return (
        f"'{entry.name}' was removed or moved after it was loaded: nothing is at '{where}' "
        "any more. Unload it; if it was moved, load it again from the job list (start "
        "'stepscope ui' with its new folder if it is not listed there)."
    )


def ui_state(request: Request) -> UIState:
    """The app's state (a FastAPI dependency)."""
    state: UIState = request.app.state.ui
    return state


#: Route parameter type that receives the app's :class:`UIState`.
State = Annotated[UIState, Depends(ui_state)]
