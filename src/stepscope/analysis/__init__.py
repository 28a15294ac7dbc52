"""Analyses of stored data: DataFrames, step, data-loader, Python-profile and kernel analyses."""

from __future__ import annotations

from stepscope.analysis.utilization import system_active_time, system_utilization_timeline

__all__: list[str] = ["system_active_time", "system_utilization_timeline"]
