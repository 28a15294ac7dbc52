"""Lazy imports of optional packages, with an install hint when one is missing."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from stepscope.errors import MissingDependencyError

__all__ = ["installed", "require", "require_installed"]


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


def require_installed(module: str, *, extra: str | None, feature: str) -> None:
    """Raise :class:`MissingDependencyError` unless ``module`` is installed, without importing it:
    for a feature that imports it in a process of its own (torch in the demo's training run),
    which would otherwise start, fail there and leave a failed job behind.

    The parameters are :func:`require`'s; ``module`` is a top-level package name.
    """
    if not installed(module):
        raise MissingDependencyError(module, extra, feature)


def installed(module: str) -> bool:
    """Whether the top-level package ``module`` is installed (found, not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module marked absent, or a broken package
        return False
