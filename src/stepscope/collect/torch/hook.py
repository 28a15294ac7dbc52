"""Keeping the hooks stepscope puts on a user's modules out of what the user does with them.

A training script may copy its model (an EMA, the best model so far), save it whole
(``torch.save(model)``, a pickle) or script it (``torch.jit.script``) while a session runs. Hooks
are part of a module's state, so each of these meets ours: a copy would be profiled as if it
were the model, a pickle would fail (a hook holds the session and its locks) and TorchScript
compiles every hook a module has (ours cannot be compiled). Our hooks are known by the ids of
their handles (the keys of a module's hook dicts): :func:`state_without_hooks` leaves them out of
the state a module is copied or pickled with (the instrumentation wraps
``torch.nn.Module.__getstate__`` with it), and :func:`detach_hooks` / :func:`reattach_hooks` take
them off a module while it is scripted. The hooks themselves stay plain callables, which torch
calls at every module call.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Any

import torch

__all__ = ["detach_hooks", "reattach_hooks", "state_without_hooks"]

#: a module's dicts of forward hooks (and of the ids of its hooks that always run)
_HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks", "_forward_hooks_always_called")


def state_without_hooks(state: dict[str, Any], ours: Set[int]) -> dict[str, Any]:
    """``state`` (a copy of a module's ``__dict__``, as ``Module.__getstate__`` gives it) with
    new hook dicts that leave out the hooks whose ids are in ``ours``; the module's own dicts
    are untouched."""
    for name in _HOOK_DICTS:
        hooks = state.get(name)
        if hooks and not ours.isdisjoint(hooks):
            state[name] = type(hooks)((key, hook) for key, hook in hooks.items() if key not in ours)
    return state


#: hook dicts :func:`detach_hooks` took hooks from, each with its entries as they were
Detached = list[tuple[dict[int, Any], dict[int, Any]]]


def detach_hooks(model: torch.nn.Module, ours: Set[int]) -> Detached:
    """Take the forward hooks whose ids are in ``ours`` off ``model`` and its sub-modules."""
    detached: Detached = []
    for module in model.modules():
        for hooks in (module._forward_pre_hooks, module._forward_hooks):
            if not ours.isdisjoint(hooks):
                detached.append((hooks, dict(hooks)))
                for key in [key for key in hooks if key in ours]:
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
