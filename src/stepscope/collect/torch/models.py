"""Which modules are "the model": found by a global hook that is on only while models may appear.

Timing steps, ``Forward`` and ``Backward(post-forward)`` needs hooks on the model(s) only. A model
is a module with parameters called from outside any other model's forward (a loss module has no
parameters; a sub-module runs inside its model's forward; a DataParallel replica runs while its
model's forward is running). Nobody has to register it: :class:`ModelFinder` keeps a global
forward pre-hook while it is *armed*, and the first call that qualifies hands the module to
``adopt`` (which puts per-module hooks on it, :mod:`~stepscope.collect.torch.steps`).

A global module hook takes every module call of the process off torch's fast path (about 60 empty
Python calls each, even for a hook that does nothing), so the finder does not stay armed. It
*retires* (removes its hook) at the end of a step once a model is known and the whole step found
no new one, and it is *re-armed* whenever a new model may appear:

* at the start of the session (models built before it are found at their first call);
* when a module gets a sub-module or a parameter (a model being built, wrapped in
  ``DistributedDataParallel`` or ``torch.compile``'s ``OptimizedModule``): torch's registration
  hooks, which cost nothing per call;
* when a data-loader iterator is created, or a persistent-workers one is reset (a new epoch or
  an evaluation loop starts, perhaps with another model);
* while no model is known.

What this misses: a model built before the last re-arming and called for the first time in the
middle of a loop that creates no data-loader iterator (it is found at the next epoch).
``DataParallel`` re-registers its replicas' sub-modules every step, so it keeps the finder armed.

``torch.compile``: a compiled model is found as its ``OptimizedModule`` (whose hooks run outside
the compiled code). Hooks that can run inside compiled code go through :func:`untraced`, so the
compiler runs them as Python instead of tracing them: stepscope's package is on its list of
libraries not to trace, which costs nothing per call. Where that list cannot be extended (a torch
without it), ``untraced`` wraps the hook in ``torch.compiler.disable``, about ten Python calls per
hook call: the model's own hooks and the backward timer, a few calls per step, always have it (a
model may be called inside a compiled training step); the finder's and a sub-module's, which run
at every module call, only once a compiled module is seen (built, or called). While the finder is
armed, torch warns once that a compiled module meets a global hook.
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch.nn.modules import module as _module

from stepscope.collect.session import Session

__all__ = ["ModelFinder", "compiled_module", "is_compiled", "untraced"]

logger = logging.getLogger(__name__)

_F = TypeVar("_F", bound=Callable[..., Any])


def untraced(hook: _F) -> _F:
    """``hook``, run as Python by ``torch.compile`` (a graph break) rather than traced into the
    compiled code: as it is, once stepscope's code is on the compiler's list of libraries it does
    not trace (:func:`_keep_out_of_compiled_code`), else through ``torch.compiler.disable``."""
    if _keep_out_of_compiled_code():
        return hook
    return torch.compiler.disable(hook)  # type: ignore[no-untyped-call, no-any-return]


@functools.cache
def _keep_out_of_compiled_code() -> bool:
    """Put stepscope's code on ``torch.compile``'s list of libraries it does not trace (once per
    process); whether it is there. A hook met inside a compiled function then runs as Python, a
    graph break, with no wrapper to pay at every call. Traced, the sub-module hooks' code was
    compiled into frames of its own, recompiled for every sub-module name until
    ``torch.compile`` gave up, with warnings."""
    try:
        from torch._dynamo import trace_rules

        trace_rules.add("stepscope")
    except (ImportError, AttributeError, RuntimeError):
        logger.debug("torch.compile may trace into stepscope's hooks", exc_info=True)
        return False
    return True


def compiled_module(model: torch.nn.Module) -> torch.nn.Module:
    """The module ``torch.compile`` wrapped in ``model`` (an ``OptimizedModule``), else ``model``."""
    inner = getattr(model, "_orig_mod", model)
    return inner if isinstance(inner, torch.nn.Module) else model


def is_compiled(module: torch.nn.Module) -> bool:
    """Whether ``module`` is ``torch.compile``'s wrapper or was compiled in place."""
    return (
        type(module).__name__ == "OptimizedModule"
        or getattr(module, "_compiled_call_impl", None) is not None
    )


class ModelFinder:
    """Finds models with a global forward pre-hook armed only while new models may appear.

    :param session: the session whose guard protects the hooks and whose ``enabled`` they check.
    :param adopt: called with a newly found model, from inside its first call's forward
        pre-hooks (so it must record that call's start too: the module's own pre-hooks of this
        call have already been collected by torch).
    :param model_running: whether a model's forward is running now (on any thread): modules
        called then belong to it.
    """

    def __init__(
        self,
        session: Session,
        *,
        adopt: Callable[[torch.nn.Module, Any], None],
        model_running: Callable[[], bool],
    ) -> None:
        self.session = session
        self._adopt = adopt
        self._model_running = model_running
        #: module -> whether it is a model (non-models are remembered so they cost one look-up)
        self._verdicts: weakref.WeakKeyDictionary[torch.nn.Module, bool] = (
            weakref.WeakKeyDictionary()
        )
        #: how many models were found so far
        self.models_found = 0
        self._found_this_step = False
        self._hook: Any = None
        #: whether a compiled module was seen: hooks that may run in compiled code are untraced
        self.compiled = False
        self._registration_hooks: list[Any] = []
        guard = session.guard
        self._discover_hook = guard.wrap("torch.model_finder", self._discover)
        self.arm = guard.wrap("torch.model_finder_arm", self._arm)

    def install(self) -> None:
        rearm = self.arm

        def on_registration(owner: Any, name: str, value: Any) -> None:
            if not self.compiled and is_compiled(owner):
                self._saw_compiled()
            if self._hook is None:
                rearm()

        guarded = self.session.guard.wrap("torch.model_finder_arm", on_registration)
        self._registration_hooks = [
            _module.register_module_module_registration_hook(guarded),
            _module.register_module_parameter_registration_hook(guarded),
        ]
        self._arm()

    def remove(self) -> None:
        self._retire()
        for handle in self._registration_hooks:
            handle.remove()
        self._registration_hooks = []

    def step_ended(self) -> None:
        """Retire once a model is known and a whole step found no new one."""
        if self._hook is not None and self.models_found and not self._found_this_step:
            self._retire()
        self._found_this_step = False

    def _saw_compiled(self) -> None:
        """From now on, arm with a hook the compiler will not trace (re-arm if armed)."""
        self.compiled = True
        if self._hook is not None:
            self._retire()
            self._arm()

    def _arm(self) -> None:
        if self._hook is None and self.session.enabled:
            hook = untraced(self._discover_hook) if self.compiled else self._discover_hook
            self._hook = _module.register_module_forward_pre_hook(hook)

    def _retire(self) -> None:
        hook, self._hook = self._hook, None
        if hook is not None:
            hook.remove()

    def _discover(self, module: torch.nn.Module, args: Any) -> None:
        # Runs before every module call of the process while armed: keep it short.
        verdict = self._verdicts.get(module)
        if verdict is not None or self._model_running():
            return
        if not self.compiled and is_compiled(module):
            self._saw_compiled()  # before its forward runs the compiled code
        verdict = next(module.parameters(), None) is not None
        self._verdicts[module] = verdict
        if verdict and self.session.enabled:
            self.models_found += 1
            self._found_this_step = True
            logger.debug("stepscope: found the model %s", type(module).__name__)
            self._adopt(module, args)
