"""Profiler configuration objects, their validation and (de)serialization."""

from __future__ import annotations

__all__: list[str] = []
