"""Lazy public names for a package: each resolves from its defining module on first use.

Training scripts import stepscope for annotations, so a package's ``__init__`` must not import
what its heavier names need (torch, pyarrow, duckdb, psutil). A package lists its names in one
table and hands it here; the import happens on first access and is then cached on the package.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str, table: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` for the names in ``table``.

    :param package: the package's ``__name__``.
    :param table: public name -> module that defines it.
    """

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(table)

    return __getattr__, __dir__
