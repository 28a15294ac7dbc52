"""PyTorch instrumentation: every hook stepscope puts into a PyTorch training process.

:func:`instrument` installs them for a session (the bootstrap calls it when the script imports
torch; :func:`stepscope.profile` calls it directly) and :func:`uninstrument` removes them all.
This package's ``__init__`` imports no torch: the guard, shared with the torch-free session,
lives here too.
"""

from __future__ import annotations

from typing import Any

__all__ = ["instrument", "is_instrumented", "uninstrument"]


def instrument(session: Any, *, submodules: bool | None = None) -> Any:
    """Install the PyTorch hooks of ``session``; see :mod:`stepscope.collect.torch.instrumentation`."""
    from stepscope.collect.torch.instrumentation import instrument as _instrument

    return _instrument(session, submodules=submodules)


def uninstrument() -> None:
    """Remove every PyTorch hook stepscope installed (a no-op when there are none)."""
    import sys

    module = sys.modules.get("stepscope.collect.torch.instrumentation")
    if module is not None:
        module.uninstrument()


def is_instrumented() -> bool:
    """Whether stepscope's PyTorch hooks are installed in this process."""
    import sys

    module = sys.modules.get("stepscope.collect.torch.instrumentation")
    return module is not None and module.is_instrumented()
