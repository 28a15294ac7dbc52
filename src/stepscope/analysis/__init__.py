"""Analyses of stored data: DataFrames, step, data-loader, Python-profile and kernel analyses."""

from __future__ import annotations

__all__: list[str] = []
