"""The HTML pages (one shell; the front end picks the page from the URL) and plotly.js.

plotly.js is served from the installed ``plotly`` package's bundled copy, so the UI works with no
network and no build step.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse

__all__ = ["PAGES", "STATIC_DIR", "router"]

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
#: URL path -> page name, in navigation order.
PAGES = {
    "/": "load",
    "/dashboard": "dashboard",
    "/timeline": "timeline",
    "/info": "info",
    "/settings": "settings",
}

router = APIRouter()


def _shell() -> FileResponse:
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html")


for _path in PAGES:
    router.add_api_route(_path, _shell, methods=["GET"], include_in_schema=False)


@router.get("/vendor/plotly.min.js", include_in_schema=False)
def plotly_js() -> FileResponse:
    try:
        bundled = resources.files("plotly") / "package_data" / "plotly.min.js"
    except ModuleNotFoundError as exc:
        raise HTTPException(status_code=404, detail="plotly is not installed") from exc
    path = Path(str(bundled))
    if not path.is_file():
        raise HTTPException(status_code=404, detail="plotly.min.js is missing from plotly")
    return FileResponse(
        path, media_type="text/javascript", headers={"Cache-Control": "max-age=86400"}
    )
