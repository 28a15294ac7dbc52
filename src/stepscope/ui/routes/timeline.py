"""``/api/jobs/{id}/timeline/...``: the timeline view's tracks, windows, slice details and area stats.

Every answer is bounded: a window request returns at most ``MAX_ITEMS`` slices or bins in all,
whatever the zoom (see :mod:`stepscope.analysis.timeline`), and track ids are opaque hashes that
must name tracks of the loaded job.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from typing import Annotated, Any, TypeVar  # Any: the JSON values of an answer

from fastapi import APIRouter, HTTPException, Query

from stepscope.analysis.timeline import TimelineIndex, TimelineTrack
from stepscope.ui.profiles import LoadedProfile
from stepscope.ui.state import State, UIState

__all__ = ["MAX_BINS", "MAX_ITEMS", "MAX_TRACKS", "router"]

router = APIRouter(prefix="/api/jobs/{job_id}/timeline")

#: At most this many slices and bins in one window answer, over all tracks.
MAX_ITEMS = 6000
MAX_BINS = 2000
#: At most this many tracks in one request.
MAX_TRACKS = 400

_Answer = TypeVar("_Answer")

_TrackIds = Annotated[str, Query(max_length=MAX_TRACKS * 13, pattern=r"^[0-9a-f,]*$")]


def _index(state: UIState, profile: LoadedProfile) -> TimelineIndex:
    """The job's timeline index, built on first use and rebuilt when new data arrives."""
    return state.registry.compute(
        profile, ("timeline", "index"), lambda job: TimelineIndex(job.connect())
    )


def _select(index: TimelineIndex, ids: str) -> list[TimelineTrack]:
    wanted = [i for i in ids.split(",") if i]
    if len(wanted) > MAX_TRACKS:
        raise HTTPException(status_code=422, detail=f"At most {MAX_TRACKS} tracks per request.")
    unknown = [i for i in wanted if i not in index.by_id]
    if unknown:
        raise HTTPException(status_code=404, detail=f"No track {unknown[0]!r} in this job.")
    return index.select(wanted)


def _check_window(start_us: float, end_us: float) -> None:
    if not (math.isfinite(start_us) and math.isfinite(end_us)):
        raise HTTPException(
            status_code=422,
            detail="start_us and end_us must be finite numbers (µs since the epoch).",
        )
    if not end_us > start_us:
        raise HTTPException(status_code=422, detail="end_us must be greater than start_us.")


def _ask(
    state: UIState,
    profile: LoadedProfile,
    key: tuple[Hashable, ...],
    question: Callable[[TimelineIndex], _Answer],
) -> _Answer:
    """Run ``question(index)`` under the profile's lock (one DuckDB connection per index)."""
    index = _index(state, profile)
    return state.registry.compute(profile, ("timeline", *key), lambda job: question(index))


@router.get("/tracks")
def tracks(job_id: str, state: State) -> dict[str, Any]:
    """The track tree (``path`` from node down) and the job's time bounds in epoch µs."""
    index = _index(state, state.loaded(job_id))
    return {
        "bounds": list(index.bounds) if index.bounds else None,
        "tracks": [t.to_json() for t in index.tracks],
    }


@router.get("/window")
def window(
    job_id: str,
    state: State,
    start_us: float,
    end_us: float,
    tracks: _TrackIds = "",
    bins: Annotated[int, Query(ge=1, le=MAX_BINS)] = 1000,
) -> dict[str, Any]:
    """Slices (or bins), counter points and launch flows of ``tracks`` in the window."""
    _check_window(start_us, end_us)
    profile = state.loaded(job_id)
    selected = _select(_index(state, profile), tracks)
    return _ask(
        state,
        profile,
        ("window", tracks, start_us, end_us, bins),
        lambda index: index.window(selected, start_us, end_us, bins=bins, max_items=MAX_ITEMS),
    )


@router.get("/slice")
def slice_(
    job_id: str,
    state: State,
    track: Annotated[str, Query(pattern=r"^[0-9a-f]{12}$")],
    start_us: float,
    name: Annotated[str, Query(max_length=4000)],
) -> dict[str, Any]:
    """One slice's details, and its launch ↔ GPU activity connections."""
    profile = state.loaded(job_id)
    (selected,) = _select(_index(state, profile), track)

    def find(index: TimelineIndex) -> dict[str, Any] | None:
        details = index.details(selected, start_us, name)
        if details is None:
            return None
        return {"details": details, "connections": index.connections(details)}

    found = _ask(state, profile, ("slice", track, start_us, name), find)
    if found is None:
        raise HTTPException(status_code=404, detail="No such slice on that track.")
    return found


@router.get("/find")
def find(
    job_id: str,
    state: State,
    text: Annotated[str, Query(min_length=1, max_length=200)],
    after_us: float,
) -> dict[str, Any]:
    """The next slice after ``after_us`` whose name holds ``text``, and how many match."""
    if not math.isfinite(after_us):
        raise HTTPException(status_code=422, detail="after_us must be a finite number.")
    profile = state.loaded(job_id)
    return _ask(state, profile, ("find", text, after_us), lambda index: index.find(text, after_us))


@router.get("/stats")
def stats(
    job_id: str,
    state: State,
    start_us: float,
    end_us: float,
    tracks: _TrackIds = "",
) -> dict[str, Any]:
    """Count and time per name of what an area selection covers (top 50)."""
    _check_window(start_us, end_us)
    profile = state.loaded(job_id)
    selected = _select(_index(state, profile), tracks)
    rows = _ask(
        state,
        profile,
        ("stats", tracks, start_us, end_us),
        lambda index: index.statistics(selected, start_us, end_us),
    )
    return {"rows": rows}
