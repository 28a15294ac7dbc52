"""The on-disk job layout, the raw-file writers and readers, and the columnar cache."""

from __future__ import annotations

from stepscope.store.schema import EVENT_SCHEMA, SYSTEM_SCHEMA

__all__ = ["EVENT_SCHEMA", "SYSTEM_SCHEMA"]
