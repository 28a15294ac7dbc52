"""What an export wrote, and the time origin every format measures from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb

from stepscope.export.window import Window

__all__ = ["ExportSummary", "origin_us"]


@dataclass
class ExportSummary:
    """Counts of what went into an exported trace."""

    path: Path
    format: str
    tracks: int = 0
    slices: int = 0
    flows: int = 0
    counters: int = 0

    def __str__(self) -> str:
        return (
            f"{self.path}: {self.format} trace with {self.slices:,} slices on {self.tracks} "
            f"tracks, {self.flows:,} launch flows, {self.counters} counter tracks"
        )


def origin_us(con: duckdb.DuckDBPyConnection, window: Window) -> float:
    """The earliest time the export shows: the first event or sample inside the window."""
    row = con.execute(
        f"SELECT least((SELECT min(start_us) FROM events WHERE {window.sql()}), "
        f"(SELECT CAST(min(timestamp_us) AS DOUBLE) FROM system "
        f"WHERE {window.sql('timestamp_us', '0')}))"
    ).fetchone()
    return float(row[0]) if row and row[0] is not None else 0.0
