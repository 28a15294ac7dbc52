"""Example training scripts that show stepscope at work (plain PyTorch, no stepscope import)."""

from __future__ import annotations

__all__: list[str] = []
