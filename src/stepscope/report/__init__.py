"""The self-contained HTML profiling report."""

from __future__ import annotations

__all__: list[str] = []
