"""``torch.distributed`` collectives on the timeline, and the process group's start.

Every collective the script calls through ``torch.distributed`` (``all_reduce``, ``broadcast``,
``reduce``, ``all_gather``, ``all_gather_into_tensor``, ``reduce_scatter``,
``reduce_scatter_tensor``, ``all_to_all``, ``all_to_all_single``, ``gather``, ``scatter``,
``barrier``) becomes an event of phase ``Collective``, name = the op, args ``bytes`` (of the input),
``group``, ``dtype``, ``async_op``, ``step_num`` and ``pid``. A synchronous call spans the call;
an ``async_op=True`` call spans from the call to the return of its work's ``wait()`` (the work
object is wrapped, everything else passes through). No synchronisation is added: on NCCL a
synchronous call returns once enqueued, and that is what is measured.

Collectives are recorded inside the distributed range: ``SMDataParallelProfilingConfig`` (alias
``DistributedProfilingConfig``) or ``HorovodProfilingConfig``, SageMaker's two options for
communication timelines. Collectives that DDP issues from C++ are not Python calls and are not
seen here; the detailed (Kineto) trace has them.

``init_process_group`` is wrapped too: once the group is up, this process takes the rank the
group gave it (ranks started without torchrun's ``RANK``) and notes its backend, this rank's
clock offset to rank 0 is measured (:mod:`~stepscope.collect.torch.clock_offsets`) and its rank
file written. The offset is measured only when every rank of the group agrees to (all run
stepscope, with a session on): otherwise it stays unknown, with one warning.

A script that starts its ranks itself (``torch.multiprocessing.spawn``, PyTorch's DDP tutorial
pattern) is, under ``stepscope run``, a launcher like torchrun's: each rank profiles itself, and
the script's own process, which has not stepped and only waits for them, drops its session
(:func:`~stepscope.collect.session.forget_session`) rather than write under rank 0's name.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
import torch.multiprocessing

from stepscope.collect.clock import now_us
from stepscope.collect.session import Session, forget_session, get_active_session
from stepscope.collect.torch.clock_offsets import measure_clock_offset_us, why_ranks_do_not_measure
from stepscope.collect.torch.patches import Patches

__all__ = ["COLLECTIVES", "CollectiveHooks"]

logger = logging.getLogger(__name__)

PHASE = "Collective"

#: op -> the parameter holding its input data (None: no data)
COLLECTIVES: dict[str, str | None] = {
    "all_reduce": "tensor",
    "broadcast": "tensor",
    "reduce": "tensor",
    "all_gather": "tensor",
    "all_gather_into_tensor": "input_tensor",
    "reduce_scatter": "input_list",
    "reduce_scatter_tensor": "input",
    "all_to_all": "input_tensor_list",
    "all_to_all_single": "input",
    "gather": "tensor",
    "scatter": "tensor",
    "barrier": None,
}


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [item for item in value if isinstance(item, torch.Tensor)]
    return []


def _group_name(group: Any) -> str:
    if group is None:
        return "default"
    return str(getattr(group, "group_name", None) or type(group).__name__)


class _TimedWork:
    """An async collective's work object that records the collective when ``wait()`` returns."""

    def __init__(
        self, work: Any, hooks: CollectiveHooks, name: str, start_us: float, args: dict[str, Any]
    ) -> None:
        self._work = work
        self._hooks = hooks
        self._name = name
        self._start_us = start_us
        self._args = args

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        result = self._work.wait(*args, **kwargs)
        self._hooks._write(self._name, self._start_us, now_us(), self._args)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


class CollectiveHooks:
    """Wraps the ``torch.distributed`` collectives and ``init_process_group`` for one session."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._patches = Patches()
        guard = session.guard
        self._describe = guard.wrap("torch.collective_describe", self._on_call)
        self._write = guard.wrap("torch.collective", self._on_done)
        self._after_init = guard.wrap("torch.clock_offsets", self._on_process_group)
        self._before_launch = guard.wrap("torch.spawn", self._on_launching_ranks)
        #: process groups started in this process, which numbers the clock-offset agreements
        self._group_starts = 0
        self._offset_unknown_warned = False

    def recording(self) -> bool:
        session = self.session
        return session.enabled and (session.active["smdataparallel"] or session.active["horovod"])

    def install(self) -> None:
        if dist.is_available() and dist.is_initialized():  # profiling began after the group
            self.session.backend = str(dist.get_backend())
        for op, data_parameter in COLLECTIVES.items():
            original = getattr(c10d, op, None)
            if original is None:
                continue
            self._patch(op, self._wrap(op, original, data_parameter))
        self._patch("init_process_group", self._wrap_init(c10d.init_process_group))
        # ``torch.multiprocessing.spawn`` is also a function, which hides the module of that name
        spawn_module = importlib.import_module("torch.multiprocessing.spawn")
        for owner in (spawn_module, torch.multiprocessing):
            self._patches.call_first(owner, "start_processes", self._before_launch)

    def remove(self) -> None:
        self._patches.restore()

    def _patch(self, name: str, replacement: Any) -> None:
        for owner in (c10d, dist):
            if getattr(owner, name, None) is not None:
                self._patches.replace(owner, name, replacement)

    def _original(self, name: str) -> Any:
        return self._patches.original(c10d, name)

    # -- collectives ----------------------------------------------------------------------

    def _wrap(self, op: str, original: Any, data_parameter: str | None) -> Any:
        hooks = self
        signature = inspect.signature(original)

        def collective(*args: Any, **kwargs: Any) -> Any:
            if not hooks.recording():
                return original(*args, **kwargs)
            described = hooks._describe(signature, data_parameter, args, kwargs)
            start = now_us()
            work = original(*args, **kwargs)
            if described is None:
                return work
            event_args, async_op = described
            if async_op and work is not None:
                return _TimedWork(work, hooks, op, start, event_args)
            hooks._write(op, start, now_us(), event_args)
            return work

        collective.__name__ = op
        collective.__qualname__ = op
        collective.__doc__ = original.__doc__
        collective.__wrapped__ = original  # type: ignore[attr-defined]
        return collective

    def _on_call(
        self, signature: inspect.Signature, data_parameter: str | None, args: Any, kwargs: Any
    ) -> tuple[dict[str, Any], bool]:
        bound = signature.bind_partial(*args, **kwargs).arguments
        tensors = _tensors(bound.get(data_parameter)) if data_parameter else []
        session = self.session
        async_op = bool(bound.get("async_op", False))
        event_args: dict[str, Any] = {
            "bytes": sum(t.numel() * t.element_size() for t in tensors),
            "group": _group_name(bound.get("group")),
            "dtype": str(tensors[0].dtype).removeprefix("torch.") if tensors else "",
            "async_op": async_op,
            "step_num": session.current_step_num,
            "pid": session.pid,
        }
        return event_args, async_op

    def _on_done(self, op: str, start_us: float, end_us: float, event_args: dict[str, Any]) -> None:
        self.session.write_later(PHASE, op, start_us, end_us - start_us, event_args)

    # -- the process group -----------------------------------------------------------------

    def _wrap_init(self, original: Any) -> Any:
        hooks = self

        def init_process_group(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            hooks._after_init()
            return result

        init_process_group.__doc__ = original.__doc__
        init_process_group.__wrapped__ = original  # type: ignore[attr-defined]
        return init_process_group

    def _on_launching_ranks(self, *_launch_args: Any, **_launch_kwargs: Any) -> None:
        session = self.session
        launched_by_stepscope_run = bool(os.environ.get("STEPSCOPE_JOB_DIR"))
        if launched_by_stepscope_run and session.step < 0 and get_active_session() is session:
            logger.info("stepscope: this process starts the ranks, which profile themselves")
            forget_session()

    def _on_process_group(self) -> None:
        session = self.session
        if not session.enabled:
            return
        session.adopt_rank(dist.get_rank(), dist.get_world_size())
        session.backend = str(dist.get_backend())
        self._group_starts += 1
        refused = why_ranks_do_not_measure(f"stepscope/clock_offset/{self._group_starts}")
        if refused is None:
            all_gather, barrier = self._original("all_gather"), self._original("barrier")
            session.set_clock_offset(measure_clock_offset_us(all_gather, barrier))
        else:
            self._warn_offset_unknown(refused)
            session.write_rank_file()

    def _warn_offset_unknown(self, reason: str) -> None:
        if self._offset_unknown_warned:
            return
        self._offset_unknown_warned = True
        logger.warning(
            "stepscope: the ranks' clock offsets to rank 0 are not measured: %s. Each rank's "
            "events keep its own clock, which on another machine may be off from rank 0's, so "
            "compare ranks' times with care; run every rank under stepscope (each node under "
            "`stepscope run`) to measure them (set the logger %s to ERROR to silence this).",
            reason,
            __name__,
        )
