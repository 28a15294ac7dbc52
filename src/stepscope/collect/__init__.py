"""Collection while the job trains: the system monitor, PyTorch instrumentation and annotations."""

from __future__ import annotations

__all__: list[str] = []
