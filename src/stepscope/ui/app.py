"""The UI's FastAPI application factory.

:func:`create_app` wires the state (roots, loaded profiles, settings), the access guard, activity
tracking for auto shutdown, the routers and the static front end. It starts nothing by itself:
the auto-shutdown thread runs only inside the app's lifespan, i.e. while a server serves it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles

from stepscope.ui.profiles import JobOpener, ProfileJob, ProfileRegistry
from stepscope.ui.routes import dashboard, info, jobs, pages, settings, timeline
from stepscope.ui.security import AccessGuard
from stepscope.ui.settings import IdleShutdown, default_settings_path
from stepscope.ui.state import UIState

__all__ = ["POLL_HEADER", "create_app"]

logger = logging.getLogger(__name__)

#: Requests carrying this header are background polls and do not count as activity.
POLL_HEADER = "x-stepscope-poll"

_CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'"
)


def _validation_message(error: RequestValidationError) -> str:
    """A refused parameter or body as one sentence per problem, naming what was wrong."""
    parts = []
    for problem in error.errors():
        if problem.get("type") == "json_invalid":
            # its location is a character offset, which named nothing a user could fix
            why = (problem.get("ctx") or {}).get("error")
            parts.append(
                f"The request body is not valid JSON (at character {problem['loc'][-1]}: {why})."
            )
            continue
        where = [str(part) for part in problem.get("loc", ())[1:]]
        name = ".".join(where) or "the request body"
        parts.append(f"{name}: {problem.get('msg', 'invalid value')}.")
    return " ".join(parts) or "Invalid request."


def _open_job(path: Path) -> ProfileJob:
    from stepscope.store.job import open_job  # the defining module: the lazy package is untyped

    # a link in a job folder must not make the UI serve a file from outside its roots
    return open_job(path, confined=True)


def create_app(
    roots: Sequence[str | os.PathLike[str]],
    *,
    token: str | None = None,
    settings_path: str | os.PathLike[str] | None = None,
    idle_threshold_s: float | None = None,
    on_idle: Callable[[], None] | None = None,
    job_opener: JobOpener | None = None,
    refresh_interval_s: float = 5.0,
) -> FastAPI:
    """The Profiler UI as an ASGI app.

    :param roots: folders (or single trace files) to list jobs from; nothing outside them is
        ever served.
    :param token: require this token on every request (for a server bound beyond loopback);
        ``None`` accepts only requests addressed to the loopback interface.
    :param settings_path: where settings persist (default: the user's config folder, see
        :func:`~stepscope.ui.settings.default_settings_path`).
    :param idle_threshold_s: auto shutdown threshold in seconds, overriding the saved hours
        (for tests; the enabled/disabled setting still applies).
    :param on_idle: what auto shutdown does (the server passes "stop serving"); default: log.
    :param job_opener: opens a job path (default ``stepscope.store.open_job``).
    :param refresh_interval_s: how often a running job's data is reread at most.
    """
    state = UIState(
        roots=[Path(r).expanduser().resolve() for r in roots],
        registry=ProfileRegistry(job_opener or _open_job, refresh_interval_s=refresh_interval_s),
        settings_path=Path(settings_path) if settings_path is not None else default_settings_path(),
    )
    state.idle = IdleShutdown(
        lambda: state.settings,
        on_idle or (lambda: logger.info("auto shutdown threshold reached")),
        threshold_s=idle_threshold_s,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        assert state.idle is not None
        state.idle.start()
        try:
            yield
        finally:
            state.idle.stop()

    app = FastAPI(title="stepscope Profiler UI", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.ui = state

    @app.middleware("http")
    async def track_activity(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        if state.idle is not None and POLL_HEADER not in request.headers:
            state.idle.touch()
        response = await call_next(request)
        # the pages' policy, unless the route set its own (the profiling report)
        response.headers.setdefault("Content-Security-Policy", _CONTENT_SECURITY_POLICY)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    @app.exception_handler(RequestValidationError)
    async def refuse_invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        # the documented shape of every error: {"detail": "<what is wrong>"}
        return JSONResponse({"detail": _validation_message(error)}, status_code=422)

    # Registered last so it runs first: nothing, not even activity tracking, precedes the guard.
    app.middleware("http")(AccessGuard(token))

    for module in (jobs, dashboard, timeline, info, settings, pages):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=pages.STATIC_DIR), name="static")
    return app
