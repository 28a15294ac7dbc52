"""Zero-code-change collection: what a process launched by ``stepscope run`` does at start-up.

``stepscope run`` prefixes ``PYTHONPATH`` with :data:`BOOTSTRAP_DIR`, whose ``sitecustomize.py``
calls :func:`install` when ``STEPSCOPE_JOB_DIR`` is set (and then chains to the
``sitecustomize`` that would have run otherwise). :func:`install`:

1. skips the launcher processes of torchrun and ``accelerate launch`` (their ranks or their
   script are the ones that train), then reads the configuration named by ``STEPSCOPE_CONFIG``,
   the job folder ``STEPSCOPE_JOB_DIR``, the node ``STEPSCOPE_NODE`` and torchrun's ``RANK``,
   ``LOCAL_RANK``, ``WORLD_SIZE``, ``GROUP_RANK``; a Python process that a process recording the
   same rank started (``subprocess.run([sys.executable, "evaluate.py"])`` from the training
   script), which would add its steps and profiles to that rank's, is that rank's helper and is
   not profiled either;
2. starts the process's profiling session (no thread, no file until the first event); when
   ``stepscope run`` could not name the node (a multi-node ``torchrun`` without
   ``--node-rank``: :data:`RANK_STARTS_MONITOR` is set), the node's first local rank names it
   from ``GROUP_RANK`` and starts its system monitor;
3. waits for the script to import torch (an import hook, one-shot), and only then installs the
   PyTorch instrumentation; a script that never imports torch pays nothing more;
4. stops the session when the main script is done (before ``atexit`` handlers, so the
   post-hook-close Python profile covers the interpreter's finalisation), and its threads too:
   a loop training on a thread that the main thread did not wait for keeps its steps.

A pool worker that ``multiprocessing`` starts by ``spawn`` (a ``multiprocessing.Pool`` or a
``concurrent.futures.ProcessPoolExecutor`` of the script) runs this too, but it is a helper of the
script, not a rank: the pool's worker function is wrapped in such a process, before the worker is
unpickled, to drop the session when it starts. (Forked workers drop it at the fork; ranks that
the script spawns itself run a function of their own and profile themselves.)

A process that cannot be profiled (bad config, unwritable folder) logs one warning and runs
unprofiled; nothing here raises into the script.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import importlib
import importlib.abc
import importlib.util
import json
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepscope.collect.rank_file import rank_from_env
from stepscope.collect.session import Session, forget_session, get_active_session
from stepscope.errors import StepscopeError

if TYPE_CHECKING:
    from stepscope.config import ProfilerConfig

__all__ = ["BOOTSTRAP_DIR", "RANK_STARTS_MONITOR", "install"]

logger = logging.getLogger(__name__)

#: The folder ``stepscope run`` puts first on ``PYTHONPATH`` (it holds ``sitecustomize.py``).
BOOTSTRAP_DIR = Path(__file__).resolve().parent / "site"

#: Set by ``stepscope run`` when torchrun's rendezvous numbers the nodes: the launcher cannot
#: name its node, so the node's first local rank starts the node's system monitor.
RANK_STARTS_MONITOR = "STEPSCOPE_RANK_STARTS_MONITOR"


def install(
    environ: Mapping[str, str] | None = None, *, framework_default: bool = False
) -> Session | None:
    """Start profiling this process as the environment says; returns the session or ``None``.

    :param environ: the environment to read; default ``os.environ``.
    :param framework_default: profile the framework with ``FrameworkProfile()`` when the
        configuration has no ``framework_profile_params`` (SageMaker Profiler's launcher config
        has ``profile_params`` alone, and its ``start_profiling`` still needs a session).
    """
    env = os.environ if environ is None else environ
    job_dir = env.get("STEPSCOPE_JOB_DIR")
    if not job_dir or get_active_session() is not None or _is_launcher():
        return None
    try:
        from stepscope.config import ProfilerConfig

        config = ProfilerConfig.from_env(env)
    except (StepscopeError, OSError, ValueError) as exc:
        logger.warning(
            "stepscope: not profiling this process: its configuration is invalid (%s)", exc
        )
        return None
    rank = rank_from_env(dict(env))
    if config is not None and not _is_multiprocessing_child():
        from stepscope.store.layout import node_id_for

        node_id = node_id_for(rank["rank"], rank["node"])
        recorder = _recorder_above(_profiler_output(config, job_dir), node_id)
        if recorder is not None:
            logger.info(
                "stepscope: not profiling this process: process %d, which started it, records %s",
                recorder,
                node_id,
            )
            return None
    if (
        config is not None
        and env.get(RANK_STARTS_MONITOR)
        and rank["local_rank"] == 0
        and not _is_multiprocessing_child()
    ):
        _start_node_monitor(config, job_dir, rank["node"], env.get("STEPSCOPE_CONFIG"))
    if config is None or config.disable_profiler:
        return None
    if config.framework_profile_params is None:
        if not framework_default:
            return None
        from stepscope.config import FrameworkProfile

        config = dataclasses.replace(config, framework_profile_params=FrameworkProfile())
    output = _profiler_output(config, job_dir)
    session = Session(config, output, config_path=env.get("STEPSCOPE_CONFIG") or None, **rank)
    session.start()
    session.guard.wrap("bootstrap.pool_workers", _leave_pool_workers_unprofiled)()
    _when_torch_is_imported(session.guard.wrap("bootstrap.instrument", _instrument_torch))
    _at_end_of_main(session.guard.wrap("bootstrap.stop", session.stop))
    return session


def _profiler_output(config: ProfilerConfig, job_dir: str) -> Path:
    local_path = getattr(config.framework_profile_params, "local_path", None)
    return Path(local_path) if local_path else Path(job_dir) / "profiler-output"


def _start_node_monitor(
    config: ProfilerConfig, job_dir: str, node: str, config_path: str | None
) -> None:
    """Start the node's system monitor, paused while the profiler is disabled (it follows the
    configuration file, as the launcher's does); it stops when the script's main module ends,
    or on its own when this process dies."""
    from stepscope.collect.monitor import start_monitor_or_warn

    monitor = start_monitor_or_warn(
        _profiler_output(config, job_dir),
        node=node,
        interval_ms=config.system_monitor_interval_millis,
        parent_pid=os.getpid(),
        config_path=config_path or None,
    )
    if monitor is not None:
        _at_end_of_main(monitor.stop)


#: ``python -m <module>`` launchers that only start the processes that train (each of them
#: profiles itself)
_LAUNCHER_MODULES = (
    "torch.distributed.run",
    "torch.distributed.launch",
    "accelerate.commands.launch",
)


def _is_launcher() -> bool:
    """Whether this process is ``torchrun`` or ``accelerate launch``, which train nothing: they
    start the script in processes of its own (torchrun's ranks; one process, or torchrun's
    ranks, for accelerate).

    A console script runs as ``python .../torchrun ...``: its name is the script's
    (``sys.argv[0]``), not the interpreter's (``sys.orig_argv[0]``).
    """
    argv = list(getattr(sys, "orig_argv", sys.argv))
    script = getattr(sys, "argv", [])[:2]  # an embedded interpreter may have none
    names = [Path(program).name for program in (*argv[:1], *script[:1])]
    if "torchrun" in names or "accelerate-launch" in names:
        return True
    if "accelerate" in names and script[1:] == ["launch"]:
        return True
    return any(a == "-m" and b in _LAUNCHER_MODULES for a, b in zip(argv, argv[1:], strict=False))


def _recorder_above(output: Path, node_id: str) -> int | None:
    """The process that records ``node_id`` when it started this one (this process's parent,
    or theirs), from that rank's file; None when no such process records it (no rank file yet,
    or another process's)."""
    from stepscope.store.layout import rank_file_path

    try:
        record = json.loads(rank_file_path(output, node_id).read_bytes())
    except (OSError, ValueError):
        return None
    pid = record.get("pid") if isinstance(record, dict) else None
    if not isinstance(pid, int) or pid == os.getpid():
        return None
    import psutil

    from stepscope.store.job_status import process_gone

    try:
        if pid not in {parent.pid for parent in psutil.Process().parents()}:
            return None
    except psutil.Error:
        return None
    # the same process, not another that took its pid since: same host, same start
    host = record.get("hostname")
    return pid if host == socket.gethostname() and not process_gone(host, record) else None


#: (module, function) that ``multiprocessing`` pools run in each worker process
_POOL_WORKERS = (
    ("multiprocessing.pool", "worker"),
    ("concurrent.futures.process", "_process_worker"),
)


def _is_multiprocessing_child() -> bool:
    """Whether ``multiprocessing`` spawned this process (a pool or data-loader worker)."""
    return "--multiprocessing-fork" in getattr(sys, "orig_argv", ())


def _leave_pool_workers_unprofiled() -> None:
    """In a process that ``multiprocessing`` spawned, a pool worker drops the session."""
    if not _is_multiprocessing_child():
        return
    for module_name, name in _POOL_WORKERS:
        module = importlib.import_module(module_name)
        setattr(module, name, _without_session(getattr(module, name)))


def _without_session(worker: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(worker)
    def unprofiled_worker(*args: Any, **kwargs: Any) -> Any:
        forget_session()
        return worker(*args, **kwargs)

    return unprofiled_worker


def _instrument_torch() -> None:
    session = get_active_session()
    if session is None:
        return
    from stepscope.collect.torch import instrument

    instrument(session)


def _at_end_of_main(callback: Callable[[], object]) -> None:
    """Run ``callback`` once the main script returned: before ``atexit`` handlers when possible
    (the threading module's shutdown hook), else as the last ``atexit`` handler."""
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        try:
            register(functools.partial(_once_the_scripts_threads_end, callback))
            return
        except RuntimeError:
            logger.debug("threading shutdown hooks are closed; using atexit", exc_info=True)
    atexit.register(callback)


def _once_the_scripts_threads_end(callback: Callable[[], object]) -> None:
    """At the threading module's shutdown: ``callback`` now, unless threads the script did not
    wait for still run (a loop training on a thread of its own); Python joins those next, so
    then it runs after them, as the first ``atexit`` handler."""
    current = threading.current_thread()
    if any(t is not current and not t.daemon and t.is_alive() for t in threading.enumerate()):
        atexit.register(callback)
    else:
        callback()


def _when_torch_is_imported(callback: Callable[[], None]) -> None:
    if "torch" in sys.modules:
        callback()
        return
    sys.meta_path.insert(0, _TorchImportHook(callback))


class _TorchImportHook(importlib.abc.MetaPathFinder):
    """Finds nothing itself; lets ``torch`` be found as usual and calls back once it executed."""

    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback
        self._searching = False

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "torch" or self._searching:
            return None
        self._searching = True
        try:
            spec = importlib.util.find_spec("torch")
        finally:
            self._searching = False
        if spec is None or spec.loader is None:
            return None
        spec.loader = _CallbackLoader(spec.loader, self)
        return spec

    def loaded(self, module: Any, loader: Any) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        module.__loader__ = loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = loader
        self._callback()


class _CallbackLoader(importlib.abc.Loader):
    """The real torch loader, plus the callback after ``torch/__init__`` ran."""

    def __init__(self, loader: Any, hook: _TorchImportHook) -> None:
        self._loader = loader
        self._hook = hook

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        self._hook.loaded(module, self._loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)
