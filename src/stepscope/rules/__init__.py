"""The rule engine (live and offline), the built-in profiler rules and ProfilerReport."""

from __future__ import annotations

__all__: list[str] = []
