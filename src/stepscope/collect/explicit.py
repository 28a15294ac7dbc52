"""The explicit profiling API: ``stepscope.profile()``, ``.step()`` and ``.set_mode()``.

For scripts that want to say what is profiled and where steps are, instead of (or on top of) the
zero-code-change collection of ``stepscope run``. Each function works on the active session
(:func:`~stepscope.collect.session.get_active_session`); outside one, ``step`` and ``set_mode``
do nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import logging
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepscope.collect.job_end import mark_rank_ended, mark_rank_running
from stepscope.collect.rank_file import rank_from_env
from stepscope.collect.session import MODES, Session, get_active_session
from stepscope.errors import ConfigError
from stepscope.store.layout import (
    job_name,
    new_job_folder_name,
    node_id_for,
    profiler_output_dir,
)

if TYPE_CHECKING:
    from stepscope.collect.monitor import MonitorHandle
    from stepscope.config import ProfilerConfig

__all__ = ["StepMark", "profile", "set_mode", "step"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class _Blocks:
    """The ``profile()`` blocks in a session that ``profile()`` started: threads that each
    enter one share the session, which stops when the last of them ends."""

    running: contextlib.AbstractContextManager[Session]
    count: int = 0


#: sessions that profile() started, with their blocks; the lock makes a block's start (or stop)
#: and another thread's look at the running session one step, so that two threads entering at
#: once do not both start one (the second start raised into the training code)
_blocks: dict[Session, _Blocks] = {}
_blocks_lock = threading.RLock()


def _check_mode(mode: str, owner: str) -> str:
    upper = str(mode).upper()
    if upper.startswith("MODEKEYS."):
        upper = upper[len("MODEKEYS.") :]
    if upper not in MODES:
        raise ConfigError(f"{owner}.mode", mode, f"one of {', '.join(MODES)}")
    return upper


class StepMark:
    """A step begun by :func:`step`: its global number, and a context manager that ends it."""

    def __init__(self, session: Session | None, number: int) -> None:
        self._session = session
        #: the global step number, or -1 outside a session
        self.number = number

    def __enter__(self) -> int:
        return self.number

    def __exit__(self, *exc_info: object) -> None:
        session, self._session = self._session, None
        # a bare step() call inside the block began another step: that one goes on
        if session is not None and session.in_step and session.step == self.number:
            session.guard.wrap("session.step_end", session.end_step)()


def step(mode: str = "TRAIN") -> StepMark:
    """Begin a step explicitly, ending the one before: call ``stepscope.step()`` where each step
    begins, or wrap one step in ``with stepscope.step("EVAL"): ...`` to end it with the block.

    Steps are detected automatically (optimizer steps, forward passes in eval mode); a script
    that marks its own steps switches that detection off for the rest of the session, so no step
    is counted twice. The last step a bare call begins ends with the session. Outside a session
    this does nothing (the mark's number is ``-1``).

    :param mode: ``TRAIN``, ``EVAL``, ``PREDICT`` or ``GLOBAL``.
    """
    checked = _check_mode(mode, "step")
    session = get_active_session()
    if session is None or not session.enabled:
        return StepMark(None, -1)
    session.explicit_steps = True
    number = session.guard.wrap("session.step_begin", session.begin_step)(checked)
    if number is None:  # the guard caught a failure
        return StepMark(None, -1)
    return StepMark(session, number)


def set_mode(mode: str | None) -> None:
    """Force the mode of automatically detected steps (``"PREDICT"``), or ``None`` to infer it.

    Inferred: ``TRAIN`` when the model is in training mode with gradients on, else ``EVAL``.
    """
    checked = None if mode is None else _check_mode(mode, "set_mode")
    session = get_active_session()
    if session is not None:
        session.mode_override = checked


def _default_job_dir() -> Path:
    # no script file: sys.argv[0] is "-c" under ``python -c``, "-" for stdin, "" in the REPL
    argv0 = sys.argv[0] if sys.argv else ""
    script = "" if argv0 in ("-c", "-") else Path(argv0).stem
    return Path("stepscope-jobs") / new_job_folder_name(job_name(script, fallback="python"))


@contextlib.contextmanager
def profile(
    config: ProfilerConfig | None = None, job_dir: str | os.PathLike[str] | None = None
) -> Iterator[Session | None]:
    """Profile the enclosed code: ``with stepscope.profile(): train()``.

    Under ``stepscope run`` the process is already profiled: the running session is reused and
    left running (see :func:`session_of_the_run` for a run that profiles no framework). A block
    another thread entered is joined: the session stops when the last block in it ends.
    Otherwise a session starts, PyTorch is instrumented, the node's system monitor starts (in a
    process of its own, by the first local rank) and everything is written to
    ``<job_dir>/profiler-output`` (a folder every stepscope reader opens).

    :param config: what to collect; default ``ProfilerConfig(framework_profile_params=
        FrameworkProfile())``, SageMaker's defaults for every option. A config without
        ``framework_profile_params`` gets ``FrameworkProfile()`` too (under ``stepscope run`` it
        means system monitoring only; here the enclosed code is what is to be profiled). With
        ``disable_profiler`` nothing is collected (no session, no monitor, no folder) and the
        block gets ``None``; so it is, with one warning, when the folder cannot be written.
    :param job_dir: the job folder; default ``FrameworkProfile.local_path`` if set (as the
        profiler output folder itself), else ``./stepscope-jobs/<script>-<time>``.
    """
    from stepscope.config.validation import check_path

    job_dir = check_path("profile.job_dir", job_dir)
    with _blocks_lock:
        session = get_active_session()
        if session is None and os.environ.get("STEPSCOPE_JOB_DIR"):
            session = session_of_the_run("profile()")
        elif session is None:
            session = _new_session(config, job_dir)
            if session is not None:
                running = _running(session)
                running.__enter__()
                _blocks[session] = _Blocks(running)
        blocks = None if session is None else _blocks.get(session)
        if blocks is not None:
            blocks.count += 1
    if session is None:
        yield None
        return
    if blocks is None:
        _note_joining(session, config, job_dir)
        yield session
        return
    try:
        yield session
    finally:
        with _blocks_lock:
            blocks.count -= 1
            if blocks.count == 0:
                del _blocks[session]
                blocks.running.__exit__(None, None, None)


def _note_joining(session: Session, config: ProfilerConfig | None, job_dir: str | None) -> None:
    """A block inside a session started elsewhere (``stepscope run``'s) joins it, so what the
    block was given cannot apply: say so, rather than profile other steps than asked, silently."""
    if config is None and job_dir is None:
        logger.info("stepscope: reusing the running profiling session of %s", session.node_id)
        return
    logger.warning(
        "stepscope: profile() joins the profiling session already running in this process "
        "(stepscope run's), which writes to %s with the run's configuration: the config and "
        "job_dir given to profile() are not used. Give the configuration to stepscope run "
        "(--config), or run the script without it.",
        session.profiler_output_dir,
    )


def session_of_the_run(caller: str) -> Session | None:
    """Under ``stepscope run`` whose configuration profiles no framework (system monitoring
    only, or SageMaker Profiler's ``profile_params`` alone), this rank's session, started now
    into the run's job folder with ``FrameworkProfile()``: the script asks for its code to be
    profiled, and a folder of its own would split the job in two. ``None``, with a warning,
    when the run's profiler is disabled.

    :param caller: what the script called, for the warning (``"profile()"``).
    """
    from stepscope.collect.bootstrap import install

    session = install(framework_default=True)
    if session is None:
        logger.warning(
            "stepscope: the run's profiler is disabled or its configuration unreadable: "
            "%s records nothing",
            caller,
        )
    return session


def _new_session(config: ProfilerConfig | None, job_dir: str | None) -> Session | None:
    """The session of a new :func:`profile` block, ``None`` with ``disable_profiler`` or a
    profiler output folder that cannot be written (with a warning)."""
    from stepscope.config import FrameworkProfile, ProfilerConfig

    if config is None:
        config = ProfilerConfig(framework_profile_params=FrameworkProfile())
    if not isinstance(config, ProfilerConfig):
        raise ConfigError("profile.config", config, "a ProfilerConfig or None")
    if config.disable_profiler:
        return None
    framework = config.framework_profile_params
    if framework is None:
        framework = FrameworkProfile()
        config = dataclasses.replace(config, framework_profile_params=framework)
    rank = _rank_of_this_process()
    config_path = None
    if job_dir is None and framework.local_path is not None:
        output = Path(framework.local_path)  # the profiler output itself, in a folder not ours
        job_folder = None
    else:
        job_folder = Path(job_dir) if job_dir is not None else _default_job_dir()
        output = profiler_output_dir(job_folder)
    problem = _unwritable(output)
    if problem is not None:
        logger.warning(
            "stepscope: not profiling: cannot write the profiler output folder %s (%s); "
            "the code runs unprofiled",
            output,
            problem,
        )
        return None
    if job_folder is not None:
        node_id = node_id_for(rank["rank"], rank["node"])
        config, config_path = _followed_config(config, job_folder, node_id)
    session = Session(config, output, config_path=config_path, **rank)
    _warn_if_it_holds_a_run(session)
    return session


def _unwritable(output: Path) -> str | None:
    """Why the profiler output folder cannot be written, ``None`` when it can: checked before
    the session starts, so that such a folder costs one warning and an unprofiled run rather
    than a warning from each writer (events, rank file, Python profile, end mark) as it fails."""
    from stepscope.store.filesystem import LocalFiles

    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return str(exc)
    return None if LocalFiles(output).writable() else "it is read-only"


def _followed_config(
    config: ProfilerConfig, job_folder: Path, node_id: str
) -> tuple[ProfilerConfig, Path | None]:
    """The configuration rank ``node_id`` starts with, and the file its session follows:
    ``<job_folder>/profiler-config.json``, which ``stepscope update`` rewrites, as a rank of
    ``stepscope run`` does. The file of another rank still running in the folder (a torchrun
    job's) is this run's: it is followed as it is, changes made since included. Any other (an
    earlier run's) gets this run's configuration. A file that cannot be written costs a warning:
    the session keeps its configuration, with nothing to follow."""
    from stepscope.config import ProfilerConfig, job_config_path
    from stepscope.errors import StepscopeError
    from stepscope.store.job_status import running_rank_ids

    path = job_config_path(job_folder)
    if running_rank_ids(profiler_output_dir(job_folder)) - {node_id}:
        try:
            return ProfilerConfig.from_file(path), path
        except StepscopeError:
            pass  # the other rank has not written it yet (or not readably): this one does
    try:
        config.to_file(path)
    except OSError as exc:
        logger.warning(
            "stepscope: cannot write %s (%s): `stepscope update` cannot change this run", path, exc
        )
        return config, None
    return config, path


def profile_again(previous: Session) -> contextlib.AbstractContextManager[Session]:
    """Profile once more into the folder of ``previous``, a stopped session, with its
    configuration and rank, numbering steps on from where it stopped: one run profiled in parts
    (a framework's fit, then its validate and test), not a run repeated."""
    session = Session(
        previous.config,
        previous.profiler_output_dir,
        node=previous.node,
        rank=previous.rank,
        local_rank=previous.local_rank,
        world_size=previous.world_size,
        config_path=previous.config_path,
    )
    session.continue_steps(previous)
    return _running(session)


@contextlib.contextmanager
def _running(session: Session) -> Iterator[Session]:
    """Start ``session`` with the node's monitor and the PyTorch hooks; stop them at the end,
    then mark the job's end if every rank of it has stopped (see :mod:`.job_end`)."""
    from stepscope.collect.torch import instrument

    mark_rank_running(session)
    ended = functools.partial(mark_rank_ended, session)
    # a block never left is marked at exit, after the session's own stop (registered later)
    atexit.register(ended)
    session.start()
    # now, not at its first event: a rank killed before that (loading its model) is told gone
    session.write_rank_file()
    monitor = _start_node_monitor(session)
    try:
        instrument(session)
        yield session
    finally:
        session.stop()
        if monitor is not None:
            monitor.stop()
        atexit.unregister(ended)
        if not sys.is_finalizing():  # else the exit handler has marked it, while imports worked
            ended()


def _rank_of_this_process() -> dict[str, Any]:
    """Node and rank from torchrun's variables; a rank started without them (by
    ``torch.multiprocessing.spawn``, as PyTorch's DDP tutorial does) whose process group is
    already up takes the rank and world size that group gave it, as under ``stepscope run``."""
    found = rank_from_env()
    dist = sys.modules.get("torch.distributed")  # imported by a script that set a group up
    if (
        "RANK" not in os.environ
        and dist is not None
        and dist.is_available()
        and dist.is_initialized()
    ):
        found.update(rank=dist.get_rank(), world_size=dist.get_world_size())
    return found


def _warn_if_it_holds_a_run(session: Session) -> None:
    """A folder that already holds this rank's events (a notebook cell run again) gets the new
    run's too, its steps numbered from 0 again: say so, since analyses by step mix the two."""
    from stepscope.store.layout import pevents_dir

    try:
        earlier = next(pevents_dir(session.profiler_output_dir).glob(f"*/*_{session.node_id}_*"))
    except (StopIteration, OSError):
        return
    logger.warning(
        "stepscope: %s already holds a run of %s (%s); this run's events are added to it, its "
        "steps numbered from 0 again. Give profile() a new job_dir to keep runs apart.",
        session.profiler_output_dir,
        session.node_id,
        earlier.name,
    )


def _start_node_monitor(session: Session) -> MonitorHandle | None:
    """The node's system monitor, for the first local rank only: one monitor per node."""
    if session.local_rank != 0:
        return None
    from stepscope.collect.monitor import start_monitor_or_warn

    return start_monitor_or_warn(
        session.profiler_output_dir,
        node=session.node,
        interval_ms=session.config.system_monitor_interval_millis,
        parent_pid=os.getpid(),
        config_path=session.config_path,
    )
