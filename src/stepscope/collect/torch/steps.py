"""Step boundaries and forward/backward timing, from global module and optimizer hooks.

No model has to be registered: global forward hooks see every ``nn.Module`` call, and the
outermost call of a module that has parameters is "the model" (a loss module has none).

Step boundaries (SageMaker's global step counts every mode; ``step_num`` counts per mode):

* **TRAIN** (model in training mode, gradients on): the step begins at the first forward of the
  model after the previous step ended, and ends when ``optimizer.step()`` returns. Its start is the
  end of the previous step (or the start of the data-loader epoch), so data loading counts in the
  step it feeds, as in SageMaker's forward-to-forward steps. Scripts without an optimizer fall back
  to SageMaker's rule: the next training forward ends the step.
* **EVAL** (model in eval mode or under ``no_grad``), **PREDICT** (``stepscope.set_mode``): one
  step per forward of the model; an eval-mode forward inside an open TRAIN step belongs to it.

Times are true ones: ``Forward`` spans the model's forward pre- and post-hook;
``Backward(post-forward)`` starts when the gradient reaches the model's output (a tensor hook) and
ends when autograd finishes that backward pass (an engine callback). With sub-module profiling on,
``Forward-SubModuleInternal`` spans each sub-module's own hooks, and ``Backward-SubModuleInternal``
runs from the gradient reaching the sub-module's output to the gradient of its input (or the end of
the pass, for the first layer). Nothing here changes a module's mode, the RNG or the gradients.
"""

from __future__ import annotations

import functools
import threading
import time
import weakref
from typing import Any

import torch
import torch.optim.optimizer as _optimizer
from torch.nn.modules import module as _module

from stepscope.collect.session import Session, now_us

__all__ = ["ModuleHooks"]

# kinds of entries on the per-thread forward stack
_TOP = 0  # the model's outermost forward
_TOP_STEP = 1  # the model's outermost forward, which began an EVAL/PREDICT step
_SUB = 2  # a sub-module of the model
_OUTSIDE = 3  # a module called outside any model (a loss module)

#: one open module call: (module, start µs or 0.0 when untimed, kind)
_Entry = tuple[torch.nn.Module, float, int]

_perf_counter = time.perf_counter


def _first_grad_tensor(value: Any, depth: int = 0) -> torch.Tensor | None:
    """The first tensor in an output/input structure that autograd will differentiate."""
    if isinstance(value, torch.Tensor):
        return value if value.requires_grad else None
    if depth > 3:
        return None
    if isinstance(value, (tuple, list)):
        items: Any = value
    elif isinstance(value, dict):
        items = value.values()
    else:
        return None
    for item in items:
        found = _first_grad_tensor(item, depth + 1)
        if found is not None:
            return found
    return None


class _SubBackward:
    __slots__ = ("done", "name", "start_us", "step_num")

    def __init__(self, name: str, step_num: str) -> None:
        self.name = name
        self.step_num = step_num
        self.start_us = 0.0
        self.done = False


class ModuleHooks:
    """The global module forward hooks and the optimizer step hook of one session.

    :param session: where steps and events go.
    :param submodules: time every sub-module's forward and backward: ``True`` always, ``False``
        never, ``None`` while the detailed-profiling range is active.
    """

    def __init__(self, session: Session, *, submodules: bool | None) -> None:
        self.session = session
        self.submodules = submodules
        self.optimizer_seen = False
        self._local = threading.local()
        self._is_model: weakref.WeakKeyDictionary[torch.nn.Module, bool] = (
            weakref.WeakKeyDictionary()
        )
        self._names: weakref.WeakKeyDictionary[torch.nn.Module, str] = weakref.WeakKeyDictionary()
        self._handles: list[Any] = []
        self._backward_lock = threading.Lock()
        self._pass_start_us: float | None = None
        self._pass_name = ""
        self._pass_step_num = "0"
        self._pending: list[_SubBackward] = []
        self._backward_seen = False
        #: model forwards running now, on any thread
        self._running_model_forwards = 0
        #: epoch µs minus ``perf_counter`` µs (the session's, as :func:`now_us` uses it)
        self._offset_us = session.epoch_offset_us
        guard = session.guard
        self._backward_begins = guard.wrap("torch.backward", self._on_backward_begins)
        self._backward_ends = guard.wrap("torch.backward", self._on_backward_ends)
        self._sub_begins = guard.wrap("torch.submodule_backward", self._on_sub_begins)
        self._sub_ends = guard.wrap("torch.submodule_backward", self._on_sub_ends)

    def install(self) -> None:
        # The pre- and post-hooks keep one stack between them: they fail and stop together.
        guard = self.session.guard
        self._handles = [
            _module.register_module_forward_pre_hook(
                guard.wrap("torch.module_hooks", self._forward_pre)
            ),
            # always_call: the post-hook also runs when a forward raises, keeping the stack true
            _module.register_module_forward_hook(
                guard.wrap("torch.module_hooks", self._forward_post), always_call=True
            ),
            _optimizer.register_optimizer_step_post_hook(
                guard.wrap("torch.optimizer_step", self._optimizer_step)
            ),
        ]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # -- forward --------------------------------------------------------------------------

    def _submodules_on(self) -> bool:
        if self.submodules is None:
            return self.session.active["detailed"]
        return self.submodules

    def _forward_pre(self, module: torch.nn.Module, args: Any) -> None:
        # Runs before every module call of the process: one attribute chain, one tuple.
        if not self.session.enabled:
            return
        try:
            stack: list[_Entry] = self._local.stack
        except AttributeError:
            stack = self._local.stack = []
        if stack:
            if stack[0][2] > _TOP_STEP:
                stack.append((module, 0.0, _OUTSIDE))
            elif self._submodules_on():
                stack.append((module, _perf_counter() * 1e6 + self._offset_us, _SUB))
            else:
                stack.append((module, 0.0, _SUB))
            return
        is_model = self._is_model.get(module)
        if is_model is None:
            is_model = self._learn_model(module)
        if not is_model:
            stack.append((module, 0.0, _OUTSIDE))
            return
        if self._running_model_forwards:
            # the model runs on another thread (a DataParallel replica): part of that forward
            stack.append((module, now_us() if self._submodules_on() else 0.0, _SUB))
            return
        now = now_us()
        began = self._model_forward_begins(module)
        self._running_model_forwards += 1
        stack.append((module, now, _TOP_STEP if began else _TOP))

    def _learn_model(self, module: torch.nn.Module) -> bool:
        is_model = next(module.parameters(), None) is not None
        self._is_model[module] = is_model
        if is_model:
            self._names[module] = type(module).__name__
            for name, sub in module.named_modules():
                if sub is not module and sub not in self._names:
                    self._names[sub] = name
        return is_model

    def _model_forward_begins(self, module: torch.nn.Module) -> bool:
        """Open a step if this forward starts one; True when it opened an EVAL/PREDICT step."""
        session = self.session
        if session.explicit_steps:
            return False
        training = module.training and torch.is_grad_enabled()
        mode = session.mode_override or ("TRAIN" if training else "EVAL")
        if session.in_step:
            if session.mode != "TRAIN":
                session.end_step()
            elif self.optimizer_seen:
                return False  # part of the open training step (accumulation, a frozen tower)
            elif mode == "TRAIN" and not self._backward_seen:
                return False  # several forwards before the first backward of this step
            else:
                session.end_step()  # no optimizer: SageMaker's forward-to-forward steps
        self._backward_seen = False
        session.begin_step(mode)
        return mode != "TRAIN"

    def _forward_post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not self.session.enabled:
            return
        try:
            stack: list[_Entry] = self._local.stack
        except AttributeError:
            return
        if not stack:
            return
        entry: _Entry | None = stack.pop()
        if entry is None or entry[0] is not module:
            entry = self._resync(stack, module)
            if entry is None:
                return
        kind = entry[2]
        if kind == _OUTSIDE:
            return
        session = self.session
        if kind == _SUB:
            if not entry[1]:
                return  # not timed at its start (sub-module profiling was off)
            now = _perf_counter() * 1e6 + self._offset_us
            name = self._names.get(module) or type(module).__name__
            step_num = session.step_num()
            session.write_later(
                "Forward-SubModuleInternal",
                name,
                entry[1],
                now - entry[1],
                {"step_num": step_num, "pid": session.pid},
            )
            if torch.is_grad_enabled():
                self._watch_submodule_backward(name, step_num, args, output)
            return
        self._running_model_forwards = max(self._running_model_forwards - 1, 0)
        now = now_us()
        name = self._names.get(module) or type(module).__name__
        step_num = session.step_num()
        session.write_later(
            "Forward", name, entry[1], now - entry[1], {"step_num": step_num, "pid": session.pid}
        )
        if kind == _TOP_STEP and session.in_step:
            session.end_step(now)
        elif torch.is_grad_enabled():
            tensor = _first_grad_tensor(output)
            if tensor is not None:
                tensor.register_hook(functools.partial(self._backward_begins, name, step_num))  # type: ignore[no-untyped-call]  # torch leaves it unannotated

    @staticmethod
    def _resync(stack: list[_Entry], module: torch.nn.Module) -> _Entry | None:
        """Entries out of order (hooks installed mid-forward): drop those above ``module``."""
        for index in range(len(stack) - 1, -1, -1):
            if stack[index][0] is module:
                entry = stack[index]
                del stack[index:]
                return entry
        stack.clear()
        return None

    # -- backward -------------------------------------------------------------------------

    def _begin_pass(self, name: str, step_num: str) -> None:
        """Called from a tensor hook, inside the backward pass: note it once, and ask autograd
        to tell us when the whole pass is over."""
        if self._pass_start_us is not None:
            return
        self._pass_start_us = now_us()
        self._pass_name = name
        self._pass_step_num = step_num
        self._backward_seen = True
        torch.autograd.Variable._execution_engine.queue_callback(self._backward_ends)

    def _on_backward_begins(self, name: str, step_num: str, grad: Any) -> None:
        if self.session.enabled:
            with self._backward_lock:
                self._begin_pass(name, step_num)
                # a sub-module sharing the model's output tensor may have opened the pass first
                self._pass_name, self._pass_step_num = name, step_num

    def _on_backward_ends(self) -> None:
        with self._backward_lock:
            start = self._pass_start_us
            pending, self._pending = self._pending, []
            self._pass_start_us = None
        if start is None or not self.session.enabled:
            return
        session = self.session
        end = now_us()
        session.write_later(
            "Backward(post-forward)",
            self._pass_name,
            start,
            end - start,
            {"step_num": self._pass_step_num, "pid": session.pid},
        )
        for record in pending:
            if not record.done:
                self._write_sub_backward(record, end)

    def _watch_submodule_backward(self, name: str, step_num: str, args: Any, output: Any) -> None:
        out_tensor = _first_grad_tensor(output)
        if out_tensor is None:
            return
        record = _SubBackward(name, step_num)
        out_tensor.register_hook(functools.partial(self._sub_begins, record))  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        in_tensor = _first_grad_tensor(args)
        if in_tensor is not None and in_tensor is not out_tensor:
            in_tensor.register_hook(functools.partial(self._sub_ends, record))  # type: ignore[no-untyped-call]  # torch leaves it unannotated

    def _on_sub_begins(self, record: _SubBackward, grad: Any) -> None:
        if not self.session.enabled:
            return
        record.start_us = now_us()
        with self._backward_lock:
            self._begin_pass(record.name, record.step_num)
            self._pending.append(record)

    def _on_sub_ends(self, record: _SubBackward, grad: Any) -> None:
        if record.start_us and not record.done and self.session.enabled:
            self._write_sub_backward(record, now_us())

    def _write_sub_backward(self, record: _SubBackward, end_us: float) -> None:
        record.done = True
        self.session.write_later(
            "Backward-SubModuleInternal",
            record.name,
            record.start_us,
            end_us - record.start_us,
            {"step_num": record.step_num, "pid": self.session.pid},
        )

    # -- optimizer ------------------------------------------------------------------------

    def _optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        session = self.session
        if not session.enabled:
            return
        self.optimizer_seen = True
        # Between steps no forward or backward runs: forget what one that raised left behind
        # (a backward that raised never reaches its end-of-pass callback).
        self._local.stack = []
        self._running_model_forwards = 0
        with self._backward_lock:
            self._pass_start_us = None
            self._pending = []
        if not session.explicit_steps and session.in_step and session.mode == "TRAIN":
            session.end_step()
