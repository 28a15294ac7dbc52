"""The Profiler UI: a local web app with job list, dashboard, timeline, information and settings."""

from __future__ import annotations

__all__: list[str] = []
