"""The damaged records of one raw file: counted as they are met, reported once.

A reader skips a record it cannot read and keeps the rest; the user gets one warning per file
that names the file, the first bad record's position (its line and byte offset, or its index
in a one-line document), and how many were skipped.
"""

from __future__ import annotations

import logging

from stepscope.errors import CorruptFileError

__all__ = ["DamagedRecords"]

logger = logging.getLogger(__name__)


class DamagedRecords:
    """Counts the bad records of one file and logs them once, at the first position.

    :param path: the file's name for the message.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.count = 0
        self.first: CorruptFileError | None = None
        self._first_line: int | None = None

    def add(self, line_no: int, offset: int, reason: str) -> None:
        """Count one bad record, at line ``line_no`` starting at byte ``offset``; records may
        be added out of line order (a check of all the records read comes last)."""
        if self._first_line is not None and line_no < self._first_line:
            self.first = None
        if self.first is None:
            self._first_line = line_no
        self.add_at(f"line {line_no} (byte {offset})", reason)

    def add_at(self, position: str, reason: str) -> None:
        """Count one bad record at ``position`` (e.g. ``"event 12 of traceEvents"``)."""
        self.count += 1
        if self.first is None:
            self.first = CorruptFileError(self.path, position, reason)

    def report(self) -> None:
        """Log the warning, if any record was bad."""
        if self.first is not None:
            logger.warning(
                "%s; skipped %d damaged record(s) in this file and kept the rest.",
                self.first,
                self.count,
            )
