"""What an export wrote, where it writes, and the time origin every format measures from."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import duckdb

from stepscope._gzip import gzip_writer
from stepscope.export.window import Window

__all__ = ["ExportSummary", "open_output", "origin_us"]


@dataclass
class ExportSummary:
    """Counts of what went into an exported trace, and its file (``None`` for a stream)."""

    path: Path | None
    format: str
    tracks: int = 0
    slices: int = 0
    flows: int = 0
    counters: int = 0

    def __str__(self) -> str:
        counts = (
            f"{self.format} trace with {self.slices:,} slices on {self.tracks} tracks, "
            f"{self.flows:,} launch flows, {self.counters} counter tracks"
        )
        return counts if self.path is None else f"{self.path}: {counts}"


@contextlib.contextmanager
def open_output(output: Path | BinaryIO, *, gzip: bool = False) -> Iterator[BinaryIO]:
    """The binary stream a writer writes to: a file it opens and closes (gzipped when ``gzip``
    and the name ends in ``.gz``), or a stream it is given (standard output), left open as is.
    """
    if not isinstance(output, Path):
        yield output
        return
    if gzip and output.name.lower().endswith(".gz"):
        with gzip_writer(output) as packed:
            yield packed
    else:
        with open(output, "wb") as plain:
            yield plain


def origin_us(con: duckdb.DuckDBPyConnection, window: Window) -> float:
    """The earliest time the export shows: the first event or sample inside the window."""
    row = con.execute(
        f"SELECT least((SELECT min(start_us) FROM events WHERE {window.sql()}), "
        f"(SELECT CAST(min(timestamp_us) AS DOUBLE) FROM system "
        f"WHERE {window.sql('timestamp_us', '0')}))"
    ).fetchone()
    return float(row[0]) if row and row[0] is not None else 0.0
