"""The Profiler UI: a local web app with job list, dashboard, timeline, information and settings."""

from __future__ import annotations

from stepscope.ui.app import create_app
from stepscope.ui.server import serve

__all__ = ["create_app", "serve"]
