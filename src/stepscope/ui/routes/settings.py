"""``/api/settings``: read and change the persisted UI settings (auto shutdown)."""

from __future__ import annotations

import json
from typing import Annotated, Any  # Any: settings as JSON values, checked by UISettings

from fastapi import APIRouter, Body, HTTPException

from stepscope.errors import ConfigError
from stepscope.ui.settings import UISettings
from stepscope.ui.state import State

__all__ = ["router"]

router = APIRouter(prefix="/api")

#: Each setting's label on the Settings page.
_LABELS = {
    "auto_shutdown_enabled": "Enable app auto shutdown",
    "auto_shutdown_threshold_hours": "Auto shutdown threshold in hours",
}


def _as_in_the_form(error: ConfigError) -> str:
    """A refused setting named as the Settings page labels it (with its JSON key, for API
    callers) and its value as JSON: ``UISettings.…`` and ``None`` named no field a user sees."""
    key = error.parameter.removeprefix("UISettings.")
    if key not in _LABELS:
        return str(error)
    value = "nothing" if error.value is None else json.dumps(error.value)
    return f"{_LABELS[key]} ({key}) must be {error.allowed}, got {value}."


@router.get("/settings")
def get_settings(state: State) -> dict[str, Any]:
    return state.settings.to_dict()


@router.put("/settings")
def put_settings(body: Annotated[dict[str, Any], Body()], state: State) -> dict[str, Any]:
    """Replace the settings (missing keys keep their current value); 422 names a bad value,
    500 the settings file that cannot be written (a full disk, a read-only folder)."""
    try:
        settings = UISettings.from_dict({**state.settings.to_dict(), **body})
    except ConfigError as exc:
        raise HTTPException(status_code=422, detail=_as_in_the_form(exc)) from exc
    except TypeError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from exc
    try:
        state.update_settings(settings)
    except OSError as exc:
        detail = f"Cannot save the settings to {state.settings_path}: {exc.strerror or exc}."
        raise HTTPException(status_code=500, detail=detail) from exc
    return settings.to_dict()
