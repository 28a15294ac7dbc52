"""The UI's routers: one module per page or API group, each exposing ``router``."""

from __future__ import annotations

__all__: list[str] = []
