"""Install and remove the PyTorch hooks of a session: the single list of what stepscope patches.

* forward pre/post hooks on the model(s) found by a global module pre-hook that is on only
  while new models may appear (:mod:`~stepscope.collect.torch.models`), and the global optimizer
  step hook (:mod:`~stepscope.collect.torch.steps`): steps, forward and backward;
* the data-loader iterators and worker loop (:mod:`~stepscope.collect.torch.dataloader`);
* the Python profiler and the detailed (``torch.profiler``) windows, as step listeners, and the
  start of the script's own cProfile (:mod:`~stepscope.collect.torch.python_profiling`) and
  ``torch.profiler`` (:mod:`~stepscope.collect.torch.detailed`), which come first;
* the ``torch.distributed`` collectives and ``init_process_group``
  (:mod:`~stepscope.collect.torch.distributed`), which also measures the clock offsets.

Every option is installed whatever the configuration says now: the configuration can change
while the job runs (``stepscope update``), and an inactive hook costs one attribute check.

Global state: the installed :class:`Instrumentation` (at most one per process), reached through
:func:`instrument`, :func:`uninstrument` and :func:`is_instrumented`; the session's stop removes
it.
"""

from __future__ import annotations

import logging

from stepscope.collect.session import Session
from stepscope.collect.torch.dataloader import DataLoaderHooks
from stepscope.collect.torch.detailed import DetailedProfiler
from stepscope.collect.torch.distributed import CollectiveHooks
from stepscope.collect.torch.python_profiling import PythonProfiler
from stepscope.collect.torch.steps import ModuleHooks
from stepscope.errors import SessionError

__all__ = ["Instrumentation", "instrument", "is_instrumented", "uninstrument"]

logger = logging.getLogger(__name__)

_installed: Instrumentation | None = None


class Instrumentation:
    """The hooks installed for one session.

    :param session: the session they record into.
    :param submodules: time every sub-module too: ``True`` always, ``False`` never, ``None``
        (default) during the detailed-profiling range only, next to the Kineto trace, as the
        finest-grained view SageMaker's detailed profiling gave.
    """

    def __init__(self, session: Session, *, submodules: bool | None = None) -> None:
        self.session = session
        self.modules = ModuleHooks(session, submodules=submodules)
        self.dataloader = DataLoaderHooks(session, on_new_iterator=self.modules.on_new_iterator)
        self.collectives = CollectiveHooks(session)
        self.python_profiler = PythonProfiler(session)
        self.detailed_profiler = DetailedProfiler(session)

    def install(self) -> None:
        self.modules.install()
        self.dataloader.install()
        self.collectives.install()
        self.python_profiler.install()
        self.detailed_profiler.install()
        self.session.add_listener(self.modules)
        self.session.add_listener(self.dataloader)
        self.session.add_listener(self.python_profiler)
        self.session.add_listener(self.detailed_profiler)

    def remove(self) -> None:
        """Undo :meth:`install` (also a partial one)."""
        self.modules.remove()
        self.dataloader.remove()
        self.collectives.remove()
        self.python_profiler.remove()
        self.detailed_profiler.remove()


def instrument(session: Session, *, submodules: bool | None = None) -> Instrumentation:
    """Install every PyTorch hook for ``session`` (see :class:`Instrumentation`).

    :raises SessionError: when another session's hooks are installed.
    """
    global _installed
    if _installed is not None:
        if _installed.session is session:
            return _installed
        raise SessionError("PyTorch is already instrumented for another profiling session")
    instrumentation = Instrumentation(session, submodules=submodules)
    try:
        instrumentation.install()
    except BaseException:
        instrumentation.remove()  # nothing half-installed stays behind
        raise
    _installed = instrumentation
    session.add_closer(uninstrument)
    return instrumentation


def uninstrument() -> None:
    """Remove the installed hooks, if any."""
    global _installed
    instrumentation, _installed = _installed, None
    if instrumentation is not None:
        instrumentation.remove()


def is_instrumented() -> bool:
    """Whether hooks are installed in this process."""
    return _installed is not None


def installed() -> Instrumentation | None:
    """The installed :class:`Instrumentation`, or ``None`` (SageMaker Profiler's API drives its
    detailed profiler directly)."""
    return _installed
