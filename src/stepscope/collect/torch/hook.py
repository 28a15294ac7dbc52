"""The hook objects stepscope puts on a user's modules, and how they stay out of the user's way.

A training script may copy its model (an EMA, the best model so far), save it whole
(``torch.save(model)``, a pickle) or script it (``torch.jit.script``) while a session runs. Hooks
are part of a module's state, so each of these meets ours: a copy would be profiled as if it
were the model, a pickle would fail (a hook holds the session and its locks) and TorchScript
compiles every hook a module has (ours cannot be compiled). So every hook on a module is a
:class:`ModuleHook`: :func:`state_without_hooks` leaves them out of the state a module is
copied or pickled with (the instrumentation wraps ``torch.nn.Module.__getstate__`` with it), and
:func:`detach_hooks` / :func:`reattach_hooks` take them off a module while it is scripted. A
module whose class builds its own state still carries them, and there a copy or a pickle of a
:class:`ModuleHook` is :data:`INERT_HOOK`.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import torch

__all__ = ["INERT_HOOK", "ModuleHook", "detach_hooks", "reattach_hooks", "state_without_hooks"]

#: What a copy or a pickle of a module gets in place of each of stepscope's hooks: a hook that
#: does nothing, which any Python can load (an audit event no one listens to: the standard
#: library's no-op that takes any arguments and returns None).
INERT_HOOK = functools.partial(sys.audit, "stepscope.inert_hook")


class ModuleHook(functools.partial):  # type: ignore[type-arg]
    """A hook on a user's module: a ``functools.partial`` (called as cheaply), which
    ``copy.deepcopy`` and pickle turn into :data:`INERT_HOOK`."""

    __slots__ = ()

    def __reduce__(self) -> str | tuple[Any, ...]:
        return INERT_HOOK.__reduce__()

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return INERT_HOOK


def state_without_hooks(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` (a copy of a module's ``__dict__``, as ``Module.__getstate__`` gives it) with
    new hook dicts that leave out every :class:`ModuleHook`; the module's own are untouched."""
    for name in ("_forward_pre_hooks", "_forward_hooks"):
        hooks = state.get(name)
        if hooks and any(isinstance(hook, ModuleHook) for hook in hooks.values()):
            state[name] = type(hooks)(
                (key, hook) for key, hook in hooks.items() if not isinstance(hook, ModuleHook)
            )
    always_called = state.get("_forward_hooks_always_called")
    if always_called:
        forward_hooks = state.get("_forward_hooks") or {}
        state["_forward_hooks_always_called"] = type(always_called)(
            (key, value) for key, value in always_called.items() if key in forward_hooks
        )
    return state


#: hook dicts :func:`detach_hooks` took hooks from, each with its entries as they were
Detached = list[tuple[dict[int, Any], dict[int, Any]]]


def detach_hooks(model: torch.nn.Module) -> Detached:
    """Take every :class:`ModuleHook` off ``model`` and its sub-modules."""
    detached: Detached = []
    for module in model.modules():
        for hooks in (module._forward_pre_hooks, module._forward_hooks):
            ours = [key for key, hook in hooks.items() if isinstance(hook, ModuleHook)]
            if ours:
                detached.append((hooks, dict(hooks)))
                for key in ours:
                    del hooks[key]
    return detached


def reattach_hooks(detached: Detached) -> None:
    """Put back what :func:`detach_hooks` took off, in the order the hooks had; hooks added in
    between stay, after them."""
    for hooks, before in detached:
        added = {key: hook for key, hook in hooks.items() if key not in before}
        hooks.clear()
        hooks.update(before)
        hooks.update(added)
