"""Callbacks for training frameworks that own the loop: PyTorch Lightning and Hugging Face.

Neither is needed for profiling (the PyTorch hooks find steps on their own); a callback marks the
framework's own step boundaries instead, which is exact with gradient accumulation, manual
optimization or several optimizers, and starts a profiling session when none runs. Import them
from their modules (:mod:`.lightning`, :mod:`.huggingface`); each imports its framework.
"""

from __future__ import annotations

__all__: list[str] = []
