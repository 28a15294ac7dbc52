"""Step boundaries and forward/backward timing, from hooks on the model(s) and the optimizer.

No model has to be registered: :class:`~stepscope.collect.torch.models.ModelFinder` finds them
(a module with parameters called from outside any model) and hands each to
:class:`ModuleHooks`, which puts a forward pre-hook and post-hook on that module only. Every
other module call stays on torch's fast path; sub-modules get hooks only while sub-module events
are on (the detailed-profiling range, or always when asked), and lose them when they go off.

Step boundaries (SageMaker's global step counts every mode; ``step_num`` counts per mode):

* **TRAIN** (model in training mode, gradients on): the step begins at the first forward of the
  model after the previous step ended, and ends when ``optimizer.step()`` returns (or a mixed
  precision ``GradScaler.step()`` that skipped it). Its start is the end of the previous step (or
  the start of the data-loader epoch), so data loading counts in the step it feeds, as in
  SageMaker's forward-to-forward steps. Scripts without an optimizer fall back
  to SageMaker's rule: the next training forward ends the step.
* **EVAL** (model in eval mode or under ``no_grad``), **PREDICT** (``stepscope.set_mode``): one
  step per forward of the model; an eval-mode forward inside an open TRAIN step belongs to it
  (unless it follows the step's backward in a new data-loader loop: an evaluation after an
  epoch's last micro-batches, which no optimizer step closed, ends that step),
  and so does one of a model that is not trained (a distillation teacher, a frozen encoder)
  called between two training steps of the same data-loader loop, or first in a new epoch of a
  loader that fed training steps: it belongs to the next one. A model kept in eval mode that an
  optimizer step trains (batch-norm statistics frozen) is seen to train at the optimizer step
  right after its first (EVAL) step; its forwards with gradients on are TRAIN ones from then on.

Times are true ones: ``Forward`` spans the model's forward pre- and post-hook;
``Backward(post-forward)`` spans the call of ``torch.autograd.backward`` (what ``loss.backward()``
calls) or ``torch.autograd.grad`` that follows a training forward of the model in the same step:
both are wrapped while the hooks are installed, because any Python hook on the autograd graph
costs torch about 10 µs per step even when it does nothing. A backward or grad call inside an
open pass (re-entrant activation checkpointing) or inside a model's forward is not a pass of its
own. With sub-module events on, ``Forward-SubModuleInternal`` spans each sub-module's own hooks,
and ``Backward-SubModuleInternal`` runs from the gradient reaching the sub-module's output to the
gradient of its input (or the end of the pass, for the first layer). Nothing here changes a
module's mode, the RNG or the gradients.

Copies and pickles of a module leave our hooks out (``torch.nn.Module.__getstate__`` is wrapped
while the hooks are installed); ``torch.jit.script``, which compiles every hook of a module, is
wrapped too, to script the module without ours (:mod:`~stepscope.collect.torch.hook`).

Sub-module hooks run for every sub-module call, so they only take times: a forward post-hook
notes (module, start, end, step) and, for the backward, which autograd nodes its output and input
came from. Each node gets one pre-hook that notes when the gradient reaches it, shared by every
sub-module that meets it there (a layer's output node is the next layer's input node), so a chain
of layers costs one backward hook per layer, not two. The events are built when the backward pass
ends (or the step, for a forward that no backward follows), off the per-module path.
"""

from __future__ import annotations

import functools
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.optim.optimizer as _optimizer

from stepscope.collect.clock import now_us
from stepscope.collect.session import Session
from stepscope.collect.torch.hook import detach_hooks, reattach_hooks, state_without_hooks
from stepscope.collect.torch.models import ModelFinder, compiled_module, is_compiled, untraced
from stepscope.collect.torch.patches import Patches

if TYPE_CHECKING:
    from stepscope.store.timeline_writer import TimelineEvent

__all__ = ["ModuleHooks"]

# kinds of entries on the per-thread forward stack
_TOP = 0  # the model's outermost forward
_TOP_STEP = 1  # the model's outermost forward, which began an EVAL/PREDICT step
_SUB = 2  # a sub-module of the model
_TOP_AHEAD = 3  # the outermost forward of a model not trained, between training steps

#: one open module call: (module, start µs or 0.0 when untimed, kind)
_Entry = tuple[torch.nn.Module, float, int]

_perf_counter = time.perf_counter

#: the guard's name for the forward hooks of models and sub-modules
_MODULE_HOOKS = "torch.module_hooks"


def _first_grad_tensor(value: Any, depth: int = 0) -> torch.Tensor | None:
    """The first tensor in an output/input structure that autograd will differentiate: in a
    tuple, list or dict, or an object's attributes (a policy's ``torch.distributions`` object,
    a dataclass)."""
    if isinstance(value, torch.Tensor):
        return value if value.requires_grad else None
    if depth > 3:
        return None
    if isinstance(value, (tuple, list)):
        items: Any = value
    elif isinstance(value, dict):
        items = value.values()
    else:
        attributes = getattr(value, "__dict__", None)
        if not isinstance(attributes, dict):
            return None
        items = attributes.values()
    for item in items:
        found = _first_grad_tensor(item, depth + 1)
        if found is not None:
            return found
    return None


def _note_reached(reached: list[float], slot: int, grad: Any) -> None:
    """A sub-module's gradient hook: note when the gradient reached its node (nothing here can
    fail, so it needs no guard)."""
    reached[slot] = _perf_counter()


#: a sub-module forward waiting for its event: (name, start s, end s, step_num), in
#: ``perf_counter`` seconds
_SubForward = tuple[str, float, float, str]
#: a sub-module backward waiting for its gradients: (name, step_num, slot of its output's
#: node, slot of its input's node or -1); a slot indexes the times the gradients arrived
_SubBackward = tuple[str, str, int, int]

_Tensor = torch.Tensor
_grad_enabled = torch.is_grad_enabled


#: ``_active_mode(_FAKE_MODE)``: the active fake-tensor mode, or None; ``torch.compile``'s AOT
#: autograd traces the backward graph under one (one C call, where
#: ``torch._guards.detect_fake_mode`` costs 20 times more)
_active_mode: Callable[[Any], Any] = getattr(torch._C, "_get_dispatch_mode", lambda key: None)
_FAKE_MODE = getattr(getattr(torch._C, "_TorchDispatchModeKey", None), "FAKE", None)


class ModuleHooks:
    """The hooks on the model(s), their sub-modules when asked, and the optimizer step hook.

    :param session: where steps and events go.
    :param submodules: time every sub-module's forward and backward: ``True`` always, ``False``
        never, ``None`` while the detailed-profiling range is active.
    """

    def __init__(self, session: Session, *, submodules: bool | None) -> None:
        self.session = session
        self.submodules = submodules
        self.optimizer_seen = False
        #: how many optimizer steps ran (a ``GradScaler`` step that skipped its optimizer's
        #: step ends the training step too)
        self._optimizer_steps = 0
        self._local = threading.local()
        #: model -> the handles of its own hooks
        self._models: weakref.WeakKeyDictionary[torch.nn.Module, list[Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._names: weakref.WeakKeyDictionary[torch.nn.Module, str] = weakref.WeakKeyDictionary()
        #: the handles of the sub-modules' hooks while sub-module events are on, else None
        self._sub_handles: list[Any] | None = None
        #: the ids of the handles of every hook of ours on a module
        self._hook_ids: set[int] = set()
        self._handles: list[Any] = []
        self._backward_lock = threading.Lock()
        #: the model and step_num whose backward pass a backward call now would be (set by a
        #: training forward, cleared when its step ends)
        self._backward_of: tuple[str, str] | None = None
        self._pass_start_us: float | None = None
        self._pass_name = ""
        self._pass_step_num = "0"
        self._backward_seen = False
        #: sub-module forwards and backwards whose events are not written yet
        self._sub_forwards: list[_SubForward] = []
        self._sub_backwards: list[_SubBackward] = []
        #: per slot: when the gradient reached its node (``perf_counter`` s, 0.0 not yet); a
        #: new list every step (a late hook of a forgotten step writes into its own list)
        self._reached: list[float] = []
        #: autograd node -> its slot, for the model forward running now (nodes are not held
        #: longer: they hold the graph)
        self._node_slots: dict[Any, int] = {}
        #: the handles of this step's hooks on leaf tensors, removed when the step ends
        self._leaf_hooks: list[Any] = []
        #: the models that had a training forward
        self._trained: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
        #: the models kept in eval mode that an optimizer step trains (batch-norm statistics
        #: frozen): their forwards with gradients on are training forwards
        self._trained_in_eval: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
        #: the model whose eval-mode forward with gradients on began the last EVAL step: an
        #: optimizer step before the next step begins trains it in eval mode
        self._eval_with_grad: weakref.ref[torch.nn.Module] | None = None
        #: a data-loader loop began since the last training step began, over a loader that fed
        #: no training step yet: an evaluation may follow
        self._new_loop = False
        #: the running data-loader loop is a new epoch of a loader that fed training steps
        self._training_loop = False
        #: the loader of the running data-loader loop, and those that fed training steps
        self._loop_loader: weakref.ref[Any] | None = None
        self._training_loaders: weakref.WeakSet[Any] = weakref.WeakSet()
        #: model forwards running now, on any thread
        self._running_model_forwards = 0
        #: epoch µs minus ``perf_counter`` µs (the session's, as :func:`now_us` uses it)
        self._offset_us = session.epoch_offset_us
        guard = session.guard
        # The pre- and post-hooks keep one stack between them: they fail and stop together.
        # The sub-module hooks run on every sub-module call, so they guard themselves rather
        # than pay for the guard's wrapper (:meth:`_sub_hooks_failed`).
        # Untraced: a model may be called inside a compiled function (or be compiled in place).
        self._model_pre_hook = untraced(guard.wrap(_MODULE_HOOKS, self._model_pre))
        self._post_hook = untraced(guard.wrap(_MODULE_HOOKS, self._post))
        self._open_pass = guard.wrap("torch.backward", self._on_backward_called)
        self._write_pass = guard.wrap("torch.backward", self._on_pass_ended)
        self._patches = Patches()
        self.finder = ModelFinder(
            session, adopt=self._adopt, model_running=self._model_forward_running
        )

    def install(self) -> None:
        optimizer_step = self.session.guard.wrap("torch.optimizer_step", self._optimizer_step)
        self._handles = [_optimizer.register_optimizer_step_post_hook(optimizer_step)]
        scaler = getattr(torch.amp, "GradScaler", None) or torch.cuda.amp.GradScaler
        self._patches.wrap(
            scaler, "step", lambda step: self._step_even_when_skipped(step, optimizer_step)
        )
        self._patches.wrap(torch.autograd, "backward", self._timed)
        self._patches.wrap(torch.autograd, "grad", self._timed)
        self._patches.wrap(torch.jit, "script", self._scripted_without_hooks)
        self._patches.wrap(torch.nn.Module, "__getstate__", self._state_without_hooks)
        self.finder.install()

    def remove(self) -> None:
        self.finder.remove()
        self._unhook_submodules()
        for handles in list(self._models.values()):
            for handle in handles:
                handle.remove()
        self._models = weakref.WeakKeyDictionary()
        self._hook_ids.clear()
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._patches.restore()

    # -- step listener: sub-module hooks follow their range, the finder retires -----------

    def on_start(self, session: Session) -> None:
        self._follow_submodule_range()

    def on_step_end(self, session: Session, step: int) -> None:
        # runs at every step: what has nothing to do (no sub-module events) is not called
        self._backward_of = None
        if self._sub_forwards:
            self._write_sub_forwards()
        if self._reached:
            self._forget_sub_backwards()
        self.finder.step_ended()
        self._follow_submodule_range()

    def on_stop(self, session: Session) -> None:
        """Write the sub-module forwards still waiting (:meth:`remove` takes the hooks off)."""
        self._write_sub_forwards()
        self._forget_sub_backwards()

    # -- models -------------------------------------------------------------------------

    def _model_forward_running(self) -> bool:
        """Whether a model's forward or backward pass runs now: a module called then is part
        of it (in a backward pass: re-entrant activation checkpointing recomputing a block)."""
        return self._running_model_forwards > 0 or self._pass_start_us is not None

    def _adopt(self, module: torch.nn.Module, args: Any) -> None:
        """Hook a model the finder found, from inside its first call's global pre-hook."""
        # a compiled model (``OptimizedModule``) is named after the module it compiles, and its
        # sub-modules as that module names them
        inner = compiled_module(module)
        model_name = self._names[module] = type(inner).__name__
        for name, sub in inner.named_modules():
            if sub is not inner and sub not in self._names:
                self._names[sub] = name
        # the post-hook gets the name now, as a sub-module's does: no look-up per call
        post_hook = functools.partial(self._post_hook, model_name)
        self._models[module] = [
            self._own(module.register_forward_pre_hook(self._model_pre_hook)),
            # always_call: the post-hook also runs when a forward raises, keeping the stack true
            self._own(module.register_forward_hook(post_hook, always_call=True)),
        ]
        if self._sub_handles is not None:
            self._hook_submodules_of(module, self._sub_handles)
        # torch collected this call's own pre-hooks before ours existed: run it by hand (the
        # post-hook is collected after the forward, so it runs)
        self._model_pre_hook(module, args)

    def _submodules_on(self) -> bool:
        on = self.session.active["detailed"] if self.submodules is None else self.submodules
        return on and not self.session.guard.is_disabled(_MODULE_HOOKS)

    def _follow_submodule_range(self) -> None:
        """Hook every model's sub-modules when sub-module events go on, unhook when they go off
        (at every step end: with them off and unhooked, it asks one dict)."""
        if self._submodules_on():
            if self._sub_handles is None:
                handles: list[Any] = []
                for model in list(self._models.keys()):
                    self._hook_submodules_of(model, handles)
                self._sub_handles = handles
        elif self._sub_handles is not None:
            self._unhook_submodules()

    def _hook_submodules_of(self, model: torch.nn.Module, handles: list[Any]) -> None:
        pre_hook, post_hook = self._sub_pre, self._post
        if self.finder.compiled or is_compiled(model):
            pre_hook, post_hook = untraced(pre_hook), untraced(post_hook)
        inner = compiled_module(model)  # the model itself, in a compiled model
        for sub in model.modules():
            if sub is not model and sub is not inner and sub not in self._models:
                handles.append(self._own(sub.register_forward_pre_hook(pre_hook)))
                # The post-hook gets the name now: no look-up per call. Not ``always_call``:
                # the entry of a forward that raised is dropped by the next post-hook that
                # runs (:meth:`_resync`), and the model's post-hook always runs.
                post = functools.partial(post_hook, self._name_of(sub))
                handles.append(self._own(sub.register_forward_hook(post)))

    def _own(self, handle: Any) -> Any:
        """``handle``, of a hook of ours on a module: noted, so that copies, pickles and scripts
        of the module leave the hook out (:mod:`~stepscope.collect.torch.hook`)."""
        self._hook_ids.add(handle.id)
        return handle

    def _unhook_submodules(self) -> None:
        handles, self._sub_handles = self._sub_handles, None
        for handle in handles or ():
            handle.remove()
            self._hook_ids.discard(handle.id)

    def _sub_hooks_failed(self) -> None:
        """A sub-module hook raised (called from its ``except``): log it, switch the module
        hooks off as the guard would, and take the sub-module hooks off."""
        self.session.guard.fail(_MODULE_HOOKS)
        self._unhook_submodules()

    # -- forward --------------------------------------------------------------------------

    def _model_pre(self, module: torch.nn.Module, args: Any) -> None:
        if not self.session.enabled:
            return
        try:
            stack: list[_Entry] = self._local.stack
        except AttributeError:
            stack = self._local.stack = []
        if self._model_forward_running():
            # a model inside another's forward or backward pass, or a replica on another thread
            # (DataParallel): part of that pass
            stack.append((module, _perf_counter() if self._sub_handles is not None else 0.0, _SUB))
            return
        kind = self._model_forward_begins(module)
        self._running_model_forwards += 1
        # timed after the step boundary it may have made: the step it opens holds it whole
        stack.append((module, now_us(), kind))

    def _sub_pre(self, module: torch.nn.Module, args: Any) -> None:
        # Only while sub-module events are on, before every call of a model's sub-module.
        try:
            stack: list[_Entry] = self._local.stack
        except AttributeError:
            return  # no model forward ever ran on this thread
        try:
            if stack and self.session.enabled:  # inside a model's forward on this thread
                stack.append((module, _perf_counter(), _SUB))
        except Exception:  # noqa: BLE001 - the guard's catch-all, inlined (see __init__)
            self._sub_hooks_failed()

    def _model_forward_begins(self, module: torch.nn.Module) -> int:
        """Open a step if this forward starts one; the kind of its entry (:data:`_TOP_STEP` when
        it opened an EVAL/PREDICT step)."""
        session = self.session
        if session.explicit_steps:
            return _TOP
        if module.training:
            training = torch.is_grad_enabled()
            if training:
                self._trained.add(module)
        else:
            training = module in self._trained_in_eval and torch.is_grad_enabled()
        mode = session.mode_override or ("TRAIN" if training else "EVAL")
        if session.in_step:
            if session.mode != "TRAIN":
                session.end_step()
            elif mode != "TRAIN" and self._new_loop and self._backward_seen:
                # an evaluation loop after micro-batches that no optimizer step closed (an
                # epoch's last, partial accumulation): the training step ends where it begins
                session.end_step()
            elif self.optimizer_seen or not self._backward_seen:
                # part of the open training step: accumulation, a frozen tower, several
                # forwards or a teacher's before the backward
                return _TOP
            else:
                session.end_step()  # no optimizer: SageMaker's forward-to-forward steps
        elif (
            mode == "EVAL"
            and (self._training_loop or (session.mode == "TRAIN" and not self._new_loop))
            and module not in self._trained
        ):
            # a model that is not trained, called between training steps of the same loop or
            # first in a new epoch (a teacher, a frozen encoder): part of the next training
            # step, which begins where the previous one ended
            return _TOP_AHEAD
        self._backward_seen = False
        session.begin_step(mode)
        if mode == "TRAIN":
            if self._new_loop:
                self._new_loop = False
                loader = None if self._loop_loader is None else self._loop_loader()
                if loader is not None:
                    self._training_loaders.add(loader)
        elif mode == "EVAL" and torch.is_grad_enabled() and session.mode_override is None:
            self._eval_with_grad = weakref.ref(module)
        return _TOP if mode == "TRAIN" else _TOP_STEP

    def on_new_iterator(self, loader: Any) -> None:
        """An iterator of the data loader ``loader`` was made (an epoch or an evaluation loop
        begins): a new model may appear, and, unless ``loader`` fed training steps before,
        an evaluation may follow."""
        self._loop_loader = weakref.ref(loader)
        self._training_loop = loader in self._training_loaders
        self._new_loop = not self._training_loop
        self.finder.arm()

    def _model_forward_ended(self, name: str, entry: _Entry, output: Any) -> None:
        """Write the outermost forward of the model ``name``; end its EVAL/PREDICT step, or
        expect its backward pass."""
        kind = entry[2]
        session = self.session
        self._running_model_forwards = max(self._running_model_forwards - 1, 0)
        now = now_us()
        step_num = (
            session.next_step_num("TRAIN") if kind == _TOP_AHEAD else session.current_step_num
        )
        session.write_later(
            "Forward", name, entry[1], now - entry[1], {"step_num": step_num, "pid": session.pid}
        )
        self._node_slots = {}  # the nodes of this forward are hooked already
        if kind == _TOP_STEP and session.in_step:
            session.end_step(now)
        elif (
            torch.is_grad_enabled()
            # a model in eval mode (a frozen feature network of a perceptual loss) passes the
            # gradient on to the trained model whose forward fed it: that one's pass it is
            and (entry[0].training or self._backward_of is None)
            and _first_grad_tensor(output) is not None
        ):
            self._backward_of = (name, step_num)

    def _post(self, name: str, module: torch.nn.Module, args: Any, output: Any) -> None:
        # After every call of a model, and of a model's sub-module while sub-module events are
        # on (with its name bound when hooked): ends the entry its pre-hook pushed.
        try:
            stack: list[_Entry] = self._local.stack
        except AttributeError:
            return
        try:
            if not stack or not self.session.enabled:
                return
            entry = stack.pop() if stack[-1][0] is module else self._resync(stack, module)
            if entry is None:
                return
            if entry[2] == _SUB:
                if entry[1]:  # timed at its start (sub-module events were on)
                    self._sub_forward_ended(name, entry[1], args, output)
            else:  # a model's outermost forward (a sub-module may be a model called alone)
                self._model_forward_ended(name, entry, output)
        except Exception:  # noqa: BLE001 - the guard's catch-all, inlined (see __init__)
            self._sub_hooks_failed()

    def _sub_forward_ended(self, name: str, start_s: float, args: Any, output: Any) -> None:
        """Note a sub-module forward's times, and where its backward will begin and end.

        Runs for every sub-module call: times only, the events are built later. Its backward
        begins when the gradient reaches the autograd node of its output and ends when it reaches
        the node of its input; each node gets one hook (:meth:`_new_slot`), whichever sub-module
        meets it first. Plain tensors take the short way, anything else (subclasses,
        structures) the general one.
        """
        step_num = self.session.current_step_num
        self._sub_forwards.append((name, start_s, _perf_counter(), step_num))
        if not _grad_enabled():
            return
        if type(output) is _Tensor:
            out_tensor = output if output.requires_grad else None
        else:
            out_tensor = _first_grad_tensor(output)
        if out_tensor is None:
            return
        first = args[0] if args else None
        if type(first) is _Tensor and first.requires_grad:
            in_tensor: torch.Tensor | None = first
        else:
            in_tensor = _first_grad_tensor(args)
        slots = self._node_slots
        node = out_tensor.grad_fn
        out_slot = slots[node] if node in slots else self._new_slot(out_tensor, node)
        in_slot = -1
        if in_tensor is not None and in_tensor is not out_tensor:
            node = in_tensor.grad_fn
            if node in slots:
                in_slot = slots[node]
            else:
                in_slot = self._new_slot(in_tensor, node)
        self._sub_backwards.append((name, step_num, out_slot, in_slot))

    @staticmethod
    def _resync(stack: list[_Entry], module: torch.nn.Module) -> _Entry | None:
        """Entries out of order (hooks added mid-forward, or a sub-module whose forward raised
        and whose post-hook did not run): drop those above ``module``; a module with no entry
        (called outside a model while its hooks are on) leaves the stack alone."""
        for index in range(len(stack) - 1, -1, -1):
            if stack[index][0] is module:
                entry = stack[index]
                del stack[index:]
                return entry
        return None

    # -- backward -------------------------------------------------------------------------

    def _timed(self, original: Any) -> Any:
        """``original`` (``torch.autograd.backward`` or ``grad``), timed as a backward pass of
        the model whose training forward it follows; run as Python by ``torch.compile``, and
        not timed while the compiler traces the backward graph with fake tensors."""
        open_pass, end_pass, write_pass = self._open_pass, self._end_pass, self._write_pass

        def timed(*args: Any, **kwargs: Any) -> Any:
            if _active_mode(_FAKE_MODE) is not None or not open_pass():
                return original(*args, **kwargs)
            try:
                result = original(*args, **kwargs)
            finally:  # a pass that raised ends too, without an event
                start_us, end_us = end_pass()
            write_pass(start_us, end_us)
            return result

        functools.update_wrapper(timed, original)
        return untraced(timed)

    def _scripted_without_hooks(self, original: Any) -> Any:
        """``torch.jit.script`` (``original``), with our hooks off a module while it compiles it:
        it compiles every hook a module has, and ours cannot be compiled."""
        guard = self.session.guard
        detach = guard.wrap(
            "torch.jit_script", functools.partial(detach_hooks, ours=self._hook_ids)
        )
        reattach = guard.wrap("torch.jit_script", reattach_hooks)

        def script(obj: Any, *args: Any, **kwargs: Any) -> Any:
            if not isinstance(obj, torch.nn.Module):
                return original(obj, *args, **kwargs)
            detached = detach(obj)
            try:
                return original(obj, *args, **kwargs)
            finally:
                if detached:
                    reattach(detached)

        functools.update_wrapper(script, original)
        return script

    def _step_even_when_skipped(self, original: Any, optimizer_step: Any) -> Any:
        """``GradScaler.step`` (``original``), which ends the training step also when it skips
        the optimizer's step (gradients with infs or NaNs, as mixed precision meets while it
        finds its scale): without this, that step would run on into the next one."""

        def step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            steps_before = self._optimizer_steps
            result = original(scaler, optimizer, *args, **kwargs)
            if self._optimizer_steps == steps_before:
                optimizer_step(optimizer, args, kwargs)
            return result

        functools.update_wrapper(step, original)
        return step

    def _state_without_hooks(self, original: Any) -> Any:
        """``Module.__getstate__`` (``original``), leaving our hooks out of what a copy or a
        pickle of a module gets."""
        strip = self.session.guard.wrap(
            "torch.module_state", functools.partial(state_without_hooks, ours=self._hook_ids)
        )

        def __getstate__(module: torch.nn.Module) -> Any:
            state = original(module)
            return strip(state) or state

        functools.update_wrapper(__getstate__, original)
        return __getstate__

    def _on_backward_called(self) -> bool:
        """Open a pass if this call is one (guarded: a failure is a call not timed)."""
        of = self._backward_of
        if of is None or self._running_model_forwards or not self.session.enabled:
            return False
        with self._backward_lock:
            if self._pass_start_us is not None:
                return False  # called inside the pass: part of it
            self._pass_start_us = now_us()
        self._pass_name, self._pass_step_num = of
        self._backward_seen = True
        return True

    def _end_pass(self) -> tuple[float | None, float]:
        """Close the open pass (nothing here can fail: it needs no guard); its start and end."""
        end = now_us()
        with self._backward_lock:
            start, self._pass_start_us = self._pass_start_us, None
        return start, end

    def _on_pass_ended(self, start: float | None, end: float) -> None:
        """Write the pass's event, and its sub-modules' (guarded)."""
        if start is None or not self.session.enabled:
            return
        session = self.session
        args = {"step_num": self._pass_step_num, "pid": session.pid}
        if not (self._sub_backwards or self._sub_forwards):
            session.write_later("Backward(post-forward)", self._pass_name, start, end - start, args)
            return
        # the pass's event and its sub-modules' go to the queue as one batch
        events: list[TimelineEvent] = [
            (self._pass_name, "Backward(post-forward)", start, end - start, args, "X")
        ]
        if self._sub_backwards:
            self._sub_backward_events(end, events)
        if self._sub_forwards:
            self._sub_forward_events(events)
        session.write_batch_later(events)

    def _new_slot(self, tensor: torch.Tensor, node: Any) -> int:
        """A slot for the time the gradient of ``tensor`` arrives, with one hook on ``node``,
        the autograd node that made it (a pre-hook on the node runs when a tensor hook would,
        for a third of the cost); a leaf has no node and gets a tensor hook, taken off when the
        step ends (a leaf, such as a parameter a module returns, outlives the step)."""
        reached = self._reached
        slot = len(reached)
        reached.append(0.0)
        hook = functools.partial(_note_reached, reached, slot)
        if node is not None:
            self._node_slots[node] = slot
            node.register_prehook(hook)
        else:
            self._leaf_hooks.append(tensor.register_hook(hook))  # type: ignore[no-untyped-call]
        return slot

    def _name_of(self, module: torch.nn.Module) -> str:
        return self._names.get(module) or type(module).__name__

    def _sub_backward_events(self, pass_end_us: float, events: list[TimelineEvent]) -> None:
        """Add the sub-module backwards this pass reached to ``events``; keep those it did not
        reach (a backward's end is the gradient reaching its input, or the end of the pass)."""
        records, self._sub_backwards = self._sub_backwards, []
        reached = self._reached
        waiting = [record for record in records if not reached[record[2]]]
        if waiting:
            records = [record for record in records if reached[record[2]]]
            self._sub_backwards[:0] = waiting
        offset_us = self._offset_us
        pid = self.session.pid
        events += [
            (
                name,
                "Backward-SubModuleInternal",
                start_us,
                end_us - start_us,
                {"step_num": step_num, "pid": pid},
                "X",
            )
            for name, step_num, out_slot, in_slot in records
            for start_us in [reached[out_slot] * 1e6 + offset_us]
            for end_us in [
                reached[in_slot] * 1e6 + offset_us
                if in_slot >= 0 and reached[in_slot]
                else pass_end_us
            ]
        ]

    def _sub_forward_events(self, events: list[TimelineEvent]) -> None:
        """Add the sub-module forwards waiting for their events to ``events``."""
        records, self._sub_forwards = self._sub_forwards, []
        offset_us = self._offset_us
        pid = self.session.pid
        events += [
            (
                name,
                "Forward-SubModuleInternal",
                start_s * 1e6 + offset_us,
                (end_s - start_s) * 1e6,
                {"step_num": step_num, "pid": pid},
                "X",
            )
            for name, start_s, end_s, step_num in records
        ]

    def _write_sub_forwards(self) -> None:
        """Write the sub-module forwards no backward followed (at a step end, or the stop)."""
        if not self._sub_forwards:
            return
        if not self.session.enabled:
            self._sub_forwards = []
            return
        events: list[TimelineEvent] = []
        self._sub_forward_events(events)
        self.session.write_batch_later(events)

    def _forget_sub_backwards(self) -> None:
        """Between steps no backward runs: a sub-module backward not reached by now never is."""
        self._sub_backwards = []
        self._reached = []
        self._node_slots = {}
        for handle in self._leaf_hooks:
            handle.remove()
        self._leaf_hooks = []

    # -- optimizer ------------------------------------------------------------------------

    def _optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._optimizer_steps += 1
        session = self.session
        if not session.enabled:
            return
        self.optimizer_seen = True
        if self._eval_with_grad is not None:
            trained = self._eval_with_grad()
            self._eval_with_grad = None
            if trained is not None and not session.in_step:
                # right after the EVAL step of a model in eval mode, with gradients on: it trains
                # in eval mode (its batch-norm statistics frozen), its next forwards begin TRAIN
                # steps
                self._trained_in_eval.add(trained)
        # Between steps no forward or backward runs: forget what one that raised left behind
        # (a backward that raised never reaches its end-of-pass callback).
        self._local.stack = []
        self._running_model_forwards = 0
        with self._backward_lock:
            self._pass_start_us = None
        if self._reached:
            self._forget_sub_backwards()
        if not session.explicit_steps and session.in_step and session.mode == "TRAIN":
            session.end_step()
