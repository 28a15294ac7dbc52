"""``/api/settings``: read and change the persisted UI settings (auto shutdown)."""

from __future__ import annotations

from typing import Annotated, Any  # Any: settings as JSON values, checked by UISettings

from fastapi import APIRouter, Body, HTTPException

from stepscope.errors import ConfigError
from stepscope.ui.settings import UISettings
from stepscope.ui.state import State

__all__ = ["router"]

router = APIRouter(prefix="/api")


@router.get("/settings")
def get_settings(state: State) -> dict[str, Any]:
    return state.settings.to_dict()


@router.put("/settings")
def put_settings(body: Annotated[dict[str, Any], Body()], state: State) -> dict[str, Any]:
    """Replace the settings (missing keys keep their current value); 422 names a bad value."""
    try:
        settings = UISettings.from_dict({**state.settings.to_dict(), **body})
    except (ConfigError, TypeError) as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from exc
    state.update_settings(settings)
    return settings.to_dict()
