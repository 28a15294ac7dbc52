"""Lazy imports of optional packages, with an install hint when one is missing."""

from __future__ import annotations

import importlib
from types import ModuleType

from stepscope.errors import MissingDependencyError

__all__ = ["require"]


def require(module: str, *, extra: str | None, feature: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependencyError` naming the pip extra.

    :param module: the importable module name, e.g. ``"torch"``.
    :param extra: the stepscope extra that installs it, e.g. ``"torch"``; ``None`` when no
        extra does, so the install hint names the package itself.
    :param feature: what the user asked for, in words, e.g. ``"PyTorch instrumentation"``.
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependencyError(module.split(".")[0], extra, feature) from None
