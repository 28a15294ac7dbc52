"""``/api/jobs/{id}/dashboard``: the dashboard's panels, annotation names, rule verdicts, report.

Panels are computed once per loaded job and parameter set and then served from the profile's
cache (a running job's cache is dropped when new data arrives). Parameters are bounded: ``k`` in
1..100, and the annotation histogram requires an annotation, one of the job's annotation names.
"""

from __future__ import annotations

from typing import Annotated, Any  # Any: the JSON values of an answer

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import FileResponse

from stepscope.ui.discovery import current_entry
from stepscope.ui.panels import (
    DEFAULT_K,
    MAX_ANNOTATION_CHARS,
    MAX_K,
    PANELS,
    PanelQuery,
    annotation_names,
    compute_panel,
)
from stepscope.ui.rule_status import read_rule_statuses, report_file, stopped_rules
from stepscope.ui.state import State

__all__ = ["router"]

router = APIRouter(prefix="/api")


@router.get("/panels")
def list_panels() -> dict[str, Any]:
    """The dashboard's panels in display order, with the parameters each accepts."""
    return {
        "panels": [
            {
                "name": name,
                "title": p.title,
                "uses_k": p.uses_k,
                "uses_annotation": p.uses_annotation,
            }
            for name, p in PANELS.items()
        ],
        "default_k": DEFAULT_K,
        "max_k": MAX_K,
    }


@router.get("/jobs/{job_id}/dashboard/{panel}")
def dashboard_panel(
    job_id: str,
    panel: str,
    state: State,
    k: Annotated[int, Query(ge=1, le=MAX_K)] = DEFAULT_K,
    annotation: Annotated[str, Query(max_length=MAX_ANNOTATION_CHARS)] = "",
) -> dict[str, Any]:
    """One panel's payload (see :mod:`stepscope.ui.panels` for the shapes)."""
    profile = state.loaded(job_id)
    spec = PANELS.get(panel)
    if spec is None:
        raise HTTPException(status_code=404, detail=f"No panel named {panel!r}.")
    query = PanelQuery(
        k=k if spec.uses_k else DEFAULT_K, annotation=annotation if spec.uses_annotation else ""
    )
    if spec.uses_annotation:
        if not annotation:
            raise HTTPException(
                status_code=422,
                detail=f"annotation: Field required for the {panel} panel: one of the job's "
                f"annotation names (GET /api/jobs/{job_id}/annotations lists them).",
            )
    payload = state.registry.compute(
        profile, ("panel", panel, query), lambda job: compute_panel(panel, job, query)
    )
    if spec.uses_annotation and payload.get("empty"):
        # any of the job's names, also one the drop-down's 500 leave out
        raise HTTPException(status_code=404, detail="No annotation of that name in this job.")
    return payload


@router.get("/jobs/{job_id}/annotations")
def list_annotations(job_id: str, state: State) -> dict[str, Any]:
    """Names of the job's custom annotations, for the "Create a new histogram" drop-down."""
    profile = state.loaded(job_id)
    return {"annotations": state.registry.compute(profile, ("annotations",), annotation_names)}


@router.get("/jobs/{job_id}/rules")
def rule_statuses(job_id: str, state: State) -> dict[str, Any]:
    """The latest verdict of every rule, and where the report is when it exists."""
    entry = current_entry(state.entry(job_id))
    has_report = entry.kind == "stepscope" and report_file(entry.path) is not None
    rules = read_rule_statuses(entry.path) if entry.path.is_dir() else []
    if entry.status in ("completed", "failed", "stopped"):
        rules = stopped_rules(rules)
    return {
        "rules": rules,
        "report_url": f"/api/jobs/{entry.id}/report" if has_report else None,
    }


#: The report draws its figures with inline scripts (plotly and its data are in the file). They
#: run in a sandbox of their own origin, so a report, which comes from a job folder, can neither
#: reach the UI's API nor load anything.
_REPORT_POLICY = (
    "sandbox allow-scripts allow-popups allow-popups-to-escape-sandbox; default-src 'none'; "
    "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:; font-src data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)


@router.get("/jobs/{job_id}/report")
def profiling_report(job_id: str, state: State) -> FileResponse:
    """The job's HTML profiling report."""
    entry = state.entry(job_id)
    path = report_file(entry.path) if entry.path.is_dir() else None
    if path is None:
        raise HTTPException(status_code=404, detail="This job has no profiling report yet.")
    return FileResponse(
        path, media_type="text/html", headers={"Content-Security-Policy": _REPORT_POLICY}
    )
