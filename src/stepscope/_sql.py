"""SQL text for DuckDB queries built from values: a string literal, quoted once, everywhere."""

from __future__ import annotations

__all__ = ["sql_text"]


def sql_text(value: str) -> str:
    """``value`` as an SQL string literal (single quotes, an inner quote doubled)."""
    return "'" + value.replace("'", "''") + "'"
