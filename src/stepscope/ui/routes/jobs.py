"""``/api/jobs``: the job list, and loading and unloading profiles."""

from __future__ import annotations

from typing import Any  # Any: the JSON values of an answer

from fastapi import APIRouter, Response

from stepscope.ui.discovery import listing_order
from stepscope.ui.state import State, removal

__all__ = ["MAX_LISTED_JOBS", "router"]

router = APIRouter(prefix="/api")

#: The job list shows the newest this many jobs (``truncated`` says when there were more).
MAX_LISTED_JOBS = 1000


@router.get("/jobs")
def list_jobs(state: State) -> dict[str, Any]:
    """Every job under the roots with its load state (``not_loaded`` unless loaded)."""
    jobs = []
    order = []
    entries = state.jobs()
    for entry in entries[:MAX_LISTED_JOBS]:
        profile = state.registry.get(entry.id)
        item = entry.to_json()
        item["load_state"] = profile.state if profile else "not_loaded"
        item["load_error"] = profile.error if profile else ""
        item["own_clock"] = False
        if profile is not None and entry.timed_by_data:
            # a trace's time range is known once loaded, and may have no date; that of profiler
            # output without job.json, to the second
            loaded = profile.to_json()
            for key in ("start_us", "end_us", "duration_s", "own_clock"):
                item[key] = loaded[key]
        if profile is not None and not entry.nodes:
            item["nodes"] = profile.nodes
        jobs.append(item)
        order.append(listing_order(entry, item["start_us"]))
    # a trace dated only once loaded takes its place by that date
    jobs = [item for _, item in sorted(zip(order, jobs, strict=True), key=lambda pair: pair[0])]
    return {"jobs": jobs, "roots": len(state.roots), "truncated": len(entries) > MAX_LISTED_JOBS}


@router.get("/loaded")
def list_loaded(state: State) -> dict[str, Any]:
    """The loaded profiles, in the order they were asked to load, with their jobs' status as it
    is now and, for a job removed or moved since it was loaded, what ``removed`` says of it."""
    profiles = state.registry.all()
    state.refresh_status(profiles)
    return {"loaded": [{**p.to_json(), "removed": removal(p)} for p in profiles]}


@router.post("/jobs/{job_id}/load", status_code=202)
def load_job(job_id: str, state: State) -> dict[str, Any]:
    """Start loading a job; poll ``/api/loaded`` (or the job list) for ``loaded``."""
    profile = state.registry.load(state.entry(job_id))
    return profile.to_json()


@router.delete("/jobs/{job_id}/load", status_code=204)
def unload_job(job_id: str, state: State) -> Response:
    """Unload a job (its cached answers go with it, and so does a job removed since it was
    loaded); 404 when it was not loaded."""
    if state.registry.unload(job_id):
        return Response(status_code=204)
    state.entry(job_id)  # the 404 of an id that names no job
    return Response(status_code=404)
