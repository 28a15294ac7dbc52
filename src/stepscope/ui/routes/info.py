"""``/api/jobs/{id}/info``: the Information page's sections for a loaded job."""

from __future__ import annotations

from typing import Any  # Any: the JSON values of an answer

from fastapi import APIRouter

from stepscope.ui.info import job_information
from stepscope.ui.profiles import ProfileJob
from stepscope.ui.state import State

__all__ = ["router"]

router = APIRouter(prefix="/api")

_MAX_LISTED = 256


def _measured(job: ProfileJob) -> dict[str, Any]:
    """What the views hold: time range, counts, nodes and ranks seen (bounded lists)."""
    con = job.connect()
    # an aggregate without GROUP BY gives exactly one row, even over an empty view
    ((first_sys, last_sys, samples),) = con.execute(
        "SELECT min(timestamp_us), max(timestamp_us), count(*) FROM system"
    ).fetchall()
    ((first_ev, last_ev, events),) = con.execute(
        "SELECT min(start_us), max(start_us + dur_us), count(*) FROM events"
    ).fetchall()
    nodes = con.execute(
        "SELECT node FROM (SELECT node FROM system UNION SELECT node FROM events) "
        f"WHERE node <> '' ORDER BY node LIMIT {_MAX_LISTED}"
    ).fetchall()
    ranks = con.execute(
        f"SELECT DISTINCT rank FROM events WHERE rank >= 0 ORDER BY rank LIMIT {_MAX_LISTED}"
    ).fetchall()
    firsts = [t for t in (first_sys, first_ev) if t is not None]
    lasts = [t for t in (last_sys, last_ev) if t is not None]
    return {
        "first_us": min(firsts) if firsts else None,
        "last_us": max(lasts) if lasts else None,
        "system_samples": int(samples),
        "events": int(events),
        "data_nodes": [str(n) for (n,) in nodes],
        "data_ranks": [int(r) for (r,) in ranks],
    }


@router.get("/jobs/{job_id}/info")
def job_info(job_id: str, state: State) -> dict[str, Any]:
    """Hosts and hardware, ranks, versions, command, hyperparameters and profiler config."""
    profile = state.loaded(job_id)

    def build(job: ProfileJob) -> dict[str, Any]:
        recovered = job.metadata if isinstance(job.metadata, dict) else {}
        # job.json's fields, with the nodes and ranks the store recovered from the data itself;
        # the status is the job list's, which reads the same records (without job.json the
        # list also tells a recording without its end marker from a job still writing)
        metadata = dict(recovered.get("job") or {})
        for key in ("nodes", "ranks"):
            if recovered.get(key):
                metadata[key] = recovered[key]
        metadata["status"] = entry.status.capitalize()
        reason = recovered.get("status_reason")
        if reason and str(recovered.get("status")).lower() == entry.status:
            metadata["status"] += f" ({reason})"
        return {
            "name": entry.name,
            "sections": job_information(entry, metadata, _measured(job)),
        }

    # a status that changed without new data (job.json completed at the end) is not served
    # from the cache
    entry = profile.entry
    return state.registry.compute(profile, ("info", entry.status), build)
