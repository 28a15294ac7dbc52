"""Run a training command under the profiler: the job folder, its monitor, rule engine and child.

:func:`launch` is what ``stepscope run`` and ``stepscope demo`` call. It owns the life of one job:

1. create the job folder and write ``job.json`` (status ``Running``) and the resolved
   ``profiler-config.json`` that every rank reads through ``STEPSCOPE_CONFIG``;
2. start one system monitor for the node and the live rule engine, each in its own process (a
   node that ``torchrun`` numbers at its rendezvous, without ``--node-rank``, gets its name
   and its monitor from its first local rank instead, which learns the number there);
3. run the command with the instrumentation bootstrap on ``PYTHONPATH`` (``torch.distributed.run``
   when more than one process per node is asked for);
4. whatever happens to the command (exit, crash, Ctrl-C, a SIGTERM, SIGHUP or SIGQUIT to this
   process, passed on to the command, as SIGUSR1, SIGUSR2 and job control's signals are), mark
   the end (``training_job_end.ts``), stop the monitor, let the rules make their final pass,
   write the report and complete ``job.json`` with the end time, status, exit code and every
   rank's description.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from stepscope._atomic import write_atomic
from stepscope._optional import require_installed
from stepscope._signals import handling
from stepscope.collect.clock import now_us
from stepscope.config import ProfilerConfig, job_config_path
from stepscope.errors import ConfigError, MissingDependencyError, StepscopeError
from stepscope.store.filesystem import local_output_path
from stepscope.store.layout import job_name, new_job_folder_name, node_name

__all__ = ["Job", "JobStatus", "launch"]

logger = logging.getLogger(__name__)

JOB_FILE = "job.json"
PROFILER_OUTPUT = "profiler-output"
DEFAULT_JOBS_ROOT = Path("stepscope-jobs")
#: How long a command stopped from code gets to exit after SIGINT before it is terminated.
STOP_GRACE_S = 10.0
#: The exit code of a job interrupted before its command started (a shell's 128 + SIGINT).
_INTERRUPTED_EXIT_CODE = 128 + signal.SIGINT


class JobStatus:
    """The values of ``job.json``'s ``status``."""

    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"
    STOPPED = "Stopped"


@dataclass
class Job:
    """A profiled job: where its data is, and how it ended.

    :param path: the job folder.
    :param exit_code: the command's exit code (``None`` while it runs).
    :param status: one of :class:`JobStatus`.
    """

    path: Path
    exit_code: int | None = None
    status: str = JobStatus.RUNNING
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def profiler_output(self) -> Path:
        return self.path / PROFILER_OUTPUT

    @property
    def report_path(self) -> Path:
        return self.path / "rule-output" / "profiler-report.html"

    def rule_statuses(self) -> dict[str, dict[str, Any]]:
        """Each rule's latest ``status.json``, keyed by rule name."""
        return read_rule_statuses(self.path)


def read_rule_statuses(job_dir: Path) -> dict[str, dict[str, Any]]:
    """Read ``rule-output/<Rule>/status.json`` of a job; unreadable files are skipped."""
    statuses: dict[str, dict[str, Any]] = {}
    for status_file in sorted((job_dir / "rule-output").glob("*/status.json")):
        try:
            statuses[status_file.parent.name] = json.loads(status_file.read_text())
        except (OSError, ValueError):
            continue  # being replaced right now: the next poll sees the new file
    return statuses


def launch(
    command: str | os.PathLike[str] | Sequence[str],
    *,
    args: Sequence[str] = (),
    profiler_config: ProfilerConfig | None = None,
    rules: Sequence[Any] | None = None,
    job_dir: str | os.PathLike[str] | None = None,
    nproc_per_node: int = 1,
    hyperparameters: Mapping[str, Any] | None = None,
    on_start: Callable[[Job], None] | None = None,
    on_status: Callable[[str, dict[str, Any]], None] | None = None,
    report: bool = True,
) -> Job:
    """Run ``command`` under the profiler and return the finished :class:`Job`.

    :param command: the training command, e.g. ``["python", "train.py", "--epochs", "3"]``, or
        one script or program alone (``"train.py"``, never split at spaces); a leading ``*.py``
        script runs with this Python. A script that does not exist (leading, or given to
        ``python`` or ``torchrun``), a program that cannot be found, or a Python interpreter
        given ``-I``, ``-E`` or ``-S`` (which skip the instrumentation) is a
        :class:`ConfigError` before the job starts.
    :param args: arguments added after ``command``: ``launch("train.py", args=["--epochs",
        "3"])``.
    :param profiler_config: what to profile; default :class:`ProfilerConfig` with a
        :class:`FrameworkProfile` (SageMaker's defaults for every option).
    :param rules: ``ProfilerRule`` objects (default: ``ProfilerReport``); at most 20.
    :param job_dir: the job folder; default a new folder under ``./stepscope-jobs/`` named
        after the command and the start time.
    :param nproc_per_node: processes per node; above 1 the command runs through
        ``torch.distributed.run`` (each rank instruments itself). ``job.json`` ends with the
        number that ran, counted from the ranks' descriptions: more when the command starts its
        own ranks (``torchrun --nproc-per-node 2 train.py``).
    :param hyperparameters: SageMaker's estimator ``hyperparameters``: passed to the script as
        SageMaker passes them (see :func:`hyperparameter_arguments`), after ``args``, and
        recorded in ``job.json`` as given. Without them, ``job.json`` records those parsed from
        the ``--name value`` options the command gives its script (not torchrun's own).
    :param on_start: called with the :class:`Job` once its folder exists, as the command
        starts (where to look at it while it trains).
    :param on_status: called with (rule name, status dict) whenever a rule's status changes.
    :param report: write the HTML report at the end (without plotly, the ``ui`` extra, the job
        runs with a warning and no report).
    """
    command = [os.fspath(command)] if isinstance(command, (str, os.PathLike)) else list(command)
    if isinstance(args, str) or not all(isinstance(arg, str) for arg in args):
        raise ConfigError("args", args, "a list of strings")
    command += args
    if hyperparameters is not None:
        command += hyperparameter_arguments(hyperparameters)
    if not command or not command[0]:
        raise ConfigError("command", command, "a non-empty command to run")
    if (
        not isinstance(nproc_per_node, int)
        or isinstance(nproc_per_node, bool)
        or nproc_per_node < 1
    ):
        raise ConfigError("nproc_per_node", nproc_per_node, "an integer >= 1")
    _check_command(command, nproc_per_node)
    from stepscope.rules import build_rules

    # a bad rule list fails now, not after hours of training
    rule_names = [rule.rule_name() for rule in build_rules(rules)]
    report = report and _report_can_be_written()
    config = _job_config(profiler_config)
    job = Job(path=_make_job_dir(job_dir, command))
    config = _with_local_path(config, job.profiler_output)
    child_command = _child_command(command, nproc_per_node)
    node_index = _node_index(command)
    # a node that torchrun numbers at its rendezvous is named by its ranks, and until they do,
    # job.json calls it the first node
    node = node_name(node_index or 0)
    job.info = _initial_job_info(
        job, command, config, rule_names, hyperparameters, nproc_per_node, node
    )
    _claim_job_folder(job)
    job.profiler_output.mkdir(parents=True, exist_ok=True)
    config_path = job_config_path(job.path)
    config.to_file(config_path)

    monitor = engine = None
    watcher = _JobWatcher(job, on_status, node_named_by_ranks=node_index is None)
    try:
        if node_index is not None:
            monitor = _start_monitor(job, config, node)
        engine = _start_rule_engine(job, rules, report)
        if on_start is not None:
            on_start(job)
        env = _child_env(job, config_path, node if node_index is not None else None)
        job.exit_code, job.status = _run_child(job, child_command, env, watcher)
    except KeyboardInterrupt:
        # Ctrl-C before the command started: the job ends here, stopped, and stays readable
        job.exit_code, job.status = _INTERRUPTED_EXIT_CODE, JobStatus.STOPPED
    finally:
        with handling(_REQUEST_SIGNALS, signal.SIG_IGN):
            _finish(job, monitor, engine, watcher, report, rules)
    return job


def _check_command(command: list[str], nproc_per_node: int) -> None:
    """A command that cannot start fails now, before a job folder, monitor and report are made
    for it: a script or program that is not there (a leading ``*.py`` script, the script a
    Python interpreter or ``torchrun`` is given, any other program), and, with
    ``nproc_per_node`` above 1, a command that ``torchrun`` cannot take."""
    program = command[0]
    if not program.endswith(".py") and shutil.which(program) is None:
        raise ConfigError("command", program, "a program on PATH or the path of an executable file")
    script = _script_of(command)
    if script.endswith(".py") and not Path(script).is_file():
        raise ConfigError(
            "command", script, "a Python script that exists", f"No file {Path(script).resolve()}."
        )
    if Path(program).name.startswith("python") and _flags_without_bootstrap(command[1:]):
        raise ConfigError(
            "command",
            " ".join(command),
            "a Python interpreter that reads PYTHONPATH and imports sitecustomize",
            "Its -I, -E or -S option keeps stepscope's instrumentation out of the script, which "
            "would run unprofiled: drop that option.",
        )
    if nproc_per_node == 1:
        return
    # the ranks start through torch.distributed.run, in this interpreter
    require_installed(
        "torch",
        extra="torch",
        feature="running several processes per node through torch.distributed.run",
    )
    if _torchrun_arguments(command) is not None:
        raise ConfigError(
            "nproc_per_node",
            nproc_per_node,
            "1 when the command is torchrun itself",
            "It starts its own ranks: give it --nproc-per-node instead.",
        )
    words = command[1:]
    rest = _after_python_options(words)
    if Path(program).name.startswith("python") and (
        rest != words or not rest or rest[0] in ("-c", "-")
    ):
        raise ConfigError(
            "command",
            " ".join(command),
            "a script (or -m module) right after the interpreter when several processes run per node",
            "torchrun starts the ranks' interpreters itself; set the interpreter's options "
            "through the environment (PYTHONUNBUFFERED=1, PYTHONWARNINGS=..., PYTHONDEVMODE=1).",
        )


#: the interpreter's options that take the next word as their value (``-W ignore``)
_PYTHON_VALUE_OPTIONS = ("-W", "-X")
#: the interpreter's options after which its own options end
_PYTHON_LAST_OPTIONS = ("-", "-m", "-c")
#: ``python -m`` modules that are ``torchrun``
_TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def _after_python_options(words: list[str]) -> list[str]:
    """What follows a Python interpreter's own options: ``[script, ...]``, ``["-m", module,
    ...]``, ``["-c", code, ...]`` or ``["-", ...]``."""
    index = 0
    while (
        index < len(words)
        and words[index].startswith("-")
        and words[index] not in _PYTHON_LAST_OPTIONS
    ):
        index += 2 if words[index] in _PYTHON_VALUE_OPTIONS else 1
    return words[index:]


#: the interpreter's flags that skip PYTHONPATH (-I, -E) or sitecustomize (-S, -I)
_PYTHON_NO_BOOTSTRAP_FLAGS = frozenset("IES")


def _flags_without_bootstrap(words: list[str]) -> set[str]:
    """Those of a Python interpreter's flags (``words`` after the interpreter) that keep the
    bootstrap out; flags may be grouped (``-uI``), and -W and -X end a group with their value."""
    found: set[str] = set()
    options = words[: len(words) - len(_after_python_options(words))]
    for word in options:
        if not word.startswith("-") or word.startswith("--") or word in _PYTHON_VALUE_OPTIONS:
            continue
        for flag in word[1:]:
            if flag in "WX":
                break
            if flag in _PYTHON_NO_BOOTSTRAP_FLAGS:
                found.add(flag)
    return found


def _torchrun_arguments(command: list[str]) -> list[str] | None:
    """``torchrun``'s arguments when ``command`` is ``torchrun`` (or ``python -m
    torch.distributed.run``); else None."""
    name = Path(command[0]).name
    if name == "torchrun":
        return command[1:]
    if name.startswith("python"):
        words = _after_python_options(command[1:])
        if words[:1] == ["-m"] and words[1:2] and words[1] in _TORCHRUN_MODULES:
            return words[2:]
    return None


#: torchrun's options for the index of this node and for the number of nodes, and the
#: variables it reads when they are absent
_NODE_RANK_OPTIONS = ("--node-rank", "--node_rank")
_NODE_RANK_VARIABLE = "PET_NODE_RANK"
_NNODES_OPTION = "--nnodes"
_NNODES_VARIABLE = "PET_NNODES"


def _node_index(command: list[str]) -> int | None:
    """The 0-based index of the node this command runs on: a multi-node ``torchrun``'s
    ``--node-rank`` (or ``PET_NODE_RANK``, which torchrun reads in its place); 0 for any other
    command; ``None`` for a multi-node ``torchrun`` without one, whose rendezvous numbers the
    nodes (its ranks learn the number as ``GROUP_RANK``).

    Its ranks' framework files, its system monitor and ``job.json`` name the node
    ``algo-<index + 1>``, so two nodes of one job never take each other's names.
    """
    arguments = _torchrun_arguments(command)
    if arguments is None:
        return 0
    values = {
        _NODE_RANK_OPTIONS[0]: os.environ.get(_NODE_RANK_VARIABLE),
        _NNODES_OPTION: os.environ.get(_NNODES_VARIABLE),
    }
    for index, word in enumerate(arguments):
        if word in ("-m", "--module") or (word.endswith(".py") and not word.startswith("-")):
            break  # what follows is the training script's own
        option, equals, given = word.partition("=")
        option = _NODE_RANK_OPTIONS[0] if option in _NODE_RANK_OPTIONS else option
        if option in values:
            values[option] = given if equals else " ".join(arguments[index + 1 : index + 2])
    node_rank, nnodes = values[_NODE_RANK_OPTIONS[0]], values[_NNODES_OPTION]
    if node_rank is None and nnodes not in (None, "1", "1:1"):
        return None
    try:
        return max(0, int(node_rank or 0))
    except ValueError:
        return 0  # torchrun itself refuses it


def _script_arguments(command: list[str]) -> list[str]:
    """What the training script is given: the words after it, without the options of the
    interpreter or of ``torchrun`` (``--nnodes 2 --node-rank 1`` are no hyperparameters); the
    whole command when it runs no script that can be told."""
    script = _script_of(command)
    if script and script in command:
        return command[command.index(script) + 1 :]
    return command


def _script_of(command: list[str]) -> str:
    """The Python script ``command`` runs, or "" when it runs none or it cannot tell: a
    leading script, the first word after a Python interpreter's options (``python -u
    train.py``), and the first ``*.py`` word given to ``torchrun`` when it is not told to run a
    module (``-m``) or a program."""
    program = command[0]
    if program.endswith(".py"):
        return program
    torchrun = _torchrun_arguments(command)
    if torchrun is not None:
        if any(word in ("-m", "--module", "--no-python", "--no_python") for word in torchrun):
            return ""
        return next((w for w in torchrun if w.endswith(".py") and not w.startswith("-")), "")
    if Path(program).name.startswith("python"):
        words = _after_python_options(command[1:])
        return words[0] if words[:1] and words[0] not in _PYTHON_LAST_OPTIONS else ""
    return ""


# -- the job folder and job.json -------------------------------------------------------------


def _job_config(config: ProfilerConfig | None) -> ProfilerConfig:
    from stepscope.config import FrameworkProfile

    if config is None:
        return ProfilerConfig(framework_profile_params=FrameworkProfile())
    if not isinstance(config, ProfilerConfig):
        raise ConfigError("profiler_config", config, "a ProfilerConfig")
    return config


def _with_local_path(config: ProfilerConfig, profiler_output: Path) -> ProfilerConfig:
    """The job's output always goes to its own folder, whatever ``local_path`` said; a
    ``local_path`` elsewhere (a ported SageMaker config's, say) is named in one warning."""
    data = config.to_dict()
    framework = data.get("framework_profile_params")
    if framework is not None:
        given = framework["local_path"]
        if given is not None and Path(given).expanduser().resolve() != profiler_output.resolve():
            logger.warning(
                "FrameworkProfile.local_path %s is not used: a launched job writes its profiler "
                "output into its own folder, %s; choose that folder with --job-dir (job_dir=)",
                given,
                profiler_output,
            )
        framework["local_path"] = str(profiler_output)
    return ProfilerConfig.from_dict(data)


def _make_job_dir(job_dir: str | os.PathLike[str] | None, command: Sequence[str]) -> Path:
    from stepscope.store import holds_job

    if job_dir is not None:
        path = local_output_path("job_dir", job_dir).expanduser().resolve()
        if path.exists() and not path.is_dir():
            raise ConfigError("job_dir", str(path), "a folder (or a path that does not exist yet)")
        if holds_job(path):  # a new job's files there would hide it from every reader
            raise _folder_taken(path)
        path.mkdir(parents=True, exist_ok=True)
        return path
    base = (DEFAULT_JOBS_ROOT / new_job_folder_name(_command_name(command))).resolve()
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    path.mkdir(parents=True)
    return path


def _folder_taken(path: Path) -> ConfigError:
    return ConfigError(
        "job_dir",
        str(path),
        "a folder that holds no job yet",
        "Pick a new job folder (each node of a multi-node job needs one of its own: its "
        "launcher writes the job's end, rules and report).",
    )


def _claim_job_folder(job: Job) -> None:
    """Write the first ``job.json`` only if there is none yet: of two launchers started at once
    with the same folder (two nodes given one ``--job-dir``), one is refused here rather than
    both ending, judging and reporting one job."""
    try:
        write_atomic(job.path / JOB_FILE, _job_document(job), exclusive=True)
    except FileExistsError:
        raise _folder_taken(job.path) from None


def _command_name(command: Sequence[str]) -> str:
    """``python train.py`` → ``train``; ``python -m pkg.mod`` → ``mod``; else the program."""
    words = [w for w in command if not w.startswith("-")]
    interesting = [w for w in words if w.endswith(".py")]
    if "-m" in command and command.index("-m") + 1 < len(command):
        name = command[command.index("-m") + 1].rsplit(".", 1)[-1]
    elif interesting:
        name = Path(interesting[0]).stem
    else:
        name = Path(words[0] if words else command[0]).name
    return job_name(name, fallback="job")


def hyperparameter_arguments(hyperparameters: Mapping[str, Any]) -> list[str]:
    """The command-line arguments SageMaker gives a training script for its estimator's
    ``hyperparameters``, so that a ported script gets what it parsed there: ``--name value`` in
    the order of the names (``-n value`` for a one-letter name), each value as Python writes it
    (``True``, ``0.001``), a dict's as ``key=value,key=value``.

    :raises ConfigError: ``hyperparameters`` is no dict of non-empty names.
    """
    if not isinstance(hyperparameters, Mapping) or not all(
        isinstance(name, str) and name for name in hyperparameters
    ):
        raise ConfigError(
            "hyperparameters",
            hyperparameters,
            "a dict of names (non-empty strings) to values",
            "Each is given to the script as --name value, as SageMaker does.",
        )
    arguments: list[str] = []
    for name in sorted(hyperparameters):
        value = hyperparameters[name]
        if isinstance(value, Mapping):
            value = ",".join(f"{key}={item}" for key, item in sorted(value.items()))
        arguments += [
            f"--{name}" if len(name) > 1 else f"-{name}",
            "" if value is None else str(value),
        ]
    return arguments


def parse_hyperparameters(args: Sequence[str]) -> dict[str, Any]:
    """``--lr 0.1 --epochs=3 --amp`` → ``{"lr": 0.1, "epochs": 3, "amp": True}``."""
    found: dict[str, Any] = {}
    i = 0
    while i < len(args):
        word = args[i]
        if word.startswith("--") and len(word) > 2:
            key, eq, value = word[2:].partition("=")
            if not eq:
                if i + 1 < len(args) and not args[i + 1].startswith("--"):
                    value = args[i + 1]
                    i += 1
                else:
                    found[key] = True
                    i += 1
                    continue
            found[key] = _scalar(value)
        i += 1
    return found


def _scalar(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _initial_job_info(
    job: Job,
    command: list[str],
    config: ProfilerConfig,
    rule_names: list[str],
    hyperparameters: Mapping[str, Any] | None,
    nproc_per_node: int,
    node: str,
) -> dict[str, Any]:
    from stepscope.collect import describe_hardware
    from stepscope.store.job_status import process_identity

    host = socket.gethostname()
    return {
        "name": job.path.name,
        "command": command,
        "cwd": os.getcwd(),
        "host": host,
        "hosts": {node: host},
        # who completes job.json at the end: a reader on this host tells when it is gone
        "launcher": process_identity(),
        "start_time_us": int(now_us()),
        "end_time_us": None,
        "status": JobStatus.RUNNING,
        "exit_code": None,
        "nodes": [node],
        "nproc_per_node": nproc_per_node,
        "ranks": {},
        "hardware": {node: describe_hardware()},
        "versions": _versions(),
        "hyperparameters": (
            dict(hyperparameters)
            if hyperparameters is not None
            else parse_hyperparameters(_script_arguments(command))
        ),
        "profiler_config": config.to_dict(),
        "rules": rule_names,
    }


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": sys.version.split()[0]}
    for package in ("stepscope", "torch", "numpy"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found


def _write_job_file(job: Job) -> None:
    """Atomic, so a UI or reader never sees half a job.json."""
    write_atomic(job.path / JOB_FILE, _job_document(job))


def _record(job: Job, what: str) -> None:
    """Rewrite ``job.json`` with ``what`` changed; a failure (a full disk) is a warning."""
    try:
        _write_job_file(job)
    except OSError as exc:
        logger.warning("%s could not record %s (%s)", job.path / JOB_FILE, what, exc)


def _job_document(job: Job) -> str:
    return json.dumps(job.info, indent=2, default=str)


# -- the child process ----------------------------------------------------------------------


def _child_command(command: list[str], nproc_per_node: int) -> list[str]:
    if command[0].endswith(".py"):
        command = [sys.executable, *command]
    if nproc_per_node == 1:
        return command
    # torchrun takes the script (or -m module) and its arguments, without the interpreter.
    if Path(command[0]).name.startswith("python"):
        command = command[1:]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc_per_node}",
        *command,
    ]


def _child_env(job: Job, config_path: Path, node: str | None) -> dict[str, str]:
    """The command's environment; ``node`` ``None`` leaves the node's name and its system
    monitor to the ranks (:data:`~stepscope.collect.bootstrap.RANK_STARTS_MONITOR`)."""
    from stepscope.collect.bootstrap import BOOTSTRAP_DIR, RANK_STARTS_MONITOR

    env = dict(os.environ)
    env["STEPSCOPE_CONFIG"] = str(config_path)
    env["STEPSCOPE_JOB_DIR"] = str(job.path)
    env.pop(RANK_STARTS_MONITOR, None)
    if node is None:
        env.pop("STEPSCOPE_NODE", None)
        env[RANK_STARTS_MONITOR] = "1"
    else:
        env["STEPSCOPE_NODE"] = node
    paths = [str(BOOTSTRAP_DIR), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def _run_child(
    job: Job, command: list[str], env: dict[str, str], watcher: _JobWatcher
) -> tuple[int, str]:
    """Run the command to its end; Ctrl-C stops it gracefully, and SIGTERM, SIGHUP or SIGQUIT
    sent to this process go on to the command, which ends as it chooses (a preempted job saving
    its checkpoint); either counts as Stopped. Other signals go on too
    (:data:`_FORWARDED_SIGNALS`). ``job.json`` names the command's process: killed alone, this
    launcher leaves a job that runs as long as it does."""
    from stepscope.store.job_status import process_identity

    try:
        child = subprocess.Popen(command, env=env)
    except OSError as exc:
        logger.error("could not start %s: %s", command[0], exc)
        return 127, JobStatus.FAILED
    job.info["command_process"] = process_identity(child.pid)
    # without it (a full disk), the job's status is told by its ranks alone
    _record(job, "the command's process")
    forwarded: list[int] = []
    with _forwarding_signals(child, forwarded):
        stopped = False
        while True:
            try:
                code = child.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                watcher.poll()
            except KeyboardInterrupt:
                stopped = True
                code = _stop_child(child)
                break
    if stopped or any(signum in _ENDING_SIGNALS for signum in forwarded):
        return code, JobStatus.STOPPED
    return code, JobStatus.COMPLETED if code == 0 else JobStatus.FAILED


#: Signals that ask this process to end: passed on to the command, and the job ends Stopped.
_ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
#: Every signal passed on to the command, as if it ran without stepscope: the ending ones, those
#: a scheduler sends to ask for a checkpoint (Slurm's ``--signal``), and job control's.
_FORWARDED_SIGNALS = (
    *_ENDING_SIGNALS,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGWINCH,
    signal.SIGTSTP,
    signal.SIGCONT,
)
#: Signals the terminal or the shell's job control sends to the whole foreground process group:
#: a command in that group with this process has them already.
_GROUP_SIGNALS = (signal.SIGQUIT, signal.SIGWINCH, signal.SIGTSTP, signal.SIGCONT)


@contextmanager
def _forwarding_signals(child: subprocess.Popen[bytes], forwarded: list[int]) -> Iterator[None]:
    """While the command runs, pass :data:`_FORWARDED_SIGNALS` on to it (noting them in
    ``forwarded``) instead of dying at once and leaving it running without its report, or of
    ignoring a checkpoint request. A SIGTSTP then stops this process too, as it does the
    command."""

    def forward(signum: int, frame: object) -> None:
        forwarded.append(signum)
        already_there = signum in _GROUP_SIGNALS and _interrupted_with_us(child)
        if child.poll() is None and not already_there:
            child.send_signal(signum)
        if signum == signal.SIGTSTP:
            # stop as the command does: the kernel ignores it in an orphaned process group
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
            signal.signal(signum, forward)

    with handling(_FORWARDED_SIGNALS, forward):
        yield


#: A scheduler's requests to the command (a checkpoint): once it has ended, they have no one to
#: go to, and their default action would kill this process before the job's end is recorded.
_REQUEST_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)


def _stop_child(child: subprocess.Popen[bytes]) -> int:
    """The command's exit code, once a Ctrl-C stopped it.

    A Ctrl-C typed in the terminal reached the command too: it ends as it chooses, as it would
    without stepscope (a second SIGINT would be its "press Ctrl-C again to quit", and a timer
    would cut a checkpoint's saving short), and a further Ctrl-C reaches it the same way.
    Otherwise (``launch()`` called from code, this process interrupted alone) it gets SIGINT,
    then SIGTERM after :data:`STOP_GRACE_S`, then SIGKILL.
    """
    if _interrupted_with_us(child):
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:
                continue
    for sig, grace in ((signal.SIGINT, STOP_GRACE_S), (signal.SIGTERM, 5.0)):
        if child.poll() is None:
            child.send_signal(sig)
        try:
            return child.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
        except KeyboardInterrupt:
            continue  # a second Ctrl-C: move on to the next, firmer signal
    child.kill()
    return child.wait()


def _interrupted_with_us(child: subprocess.Popen[bytes]) -> bool:
    """Whether the child got this process's Ctrl-C (or Ctrl-\\, Ctrl-Z, ...) from the terminal:
    the terminal signals its foreground process group, and this process and the child are in it."""
    try:
        terminal = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False  # no controlling terminal
    try:
        return os.tcgetpgrp(terminal) == os.getpgrp() == os.getpgid(child.pid)
    except OSError:
        return False
    finally:
        os.close(terminal)


# -- monitor, rules, and the end of the job ---------------------------------------------------


def _start_monitor(job: Job, config: ProfilerConfig, node: str) -> Any:
    """The monitor of ``node``, following the job's configuration file: a job started with the
    profiler disabled gets one too, paused, so that ``stepscope update --enable`` can start it."""
    from stepscope.collect.monitor import start_monitor_or_warn

    return start_monitor_or_warn(
        job.profiler_output,
        node=node,
        interval_ms=config.system_monitor_interval_millis,
        parent_pid=os.getpid(),
        config_path=job_config_path(job.path),
    )


def _start_rule_engine(job: Job, rules: Sequence[Any] | None, report: bool) -> Any:
    """The live rule engine; it rewrites the HTML report as it goes only when one is wanted."""
    from stepscope.rules import start_rule_engine
    from stepscope.rules.live import DEFAULT_REPORT_HOOK

    try:
        return start_rule_engine(
            job.path,
            list(rules) if rules else None,
            report_hook=DEFAULT_REPORT_HOOK if report else None,
        )
    except (OSError, StepscopeError) as exc:
        logger.warning("the rule engine did not start (%s): rules run after the job", exc)
        return None


def _finish(
    job: Job,
    monitor: Any,
    engine: Any,
    watcher: _JobWatcher,
    report: bool,
    rules: Sequence[Any] | None,
) -> None:
    from stepscope.store import recover_timeline_files, write_job_end_marker

    if engine is not None and engine.exitcode not in (None, 0):
        # killed (the OOM killer) or crashed while the job ran: its verdicts would stay InProgress
        logger.warning(
            "the rule engine stopped while the job ran (exit code %s): the rules run now instead",
            engine.exitcode,
        )
        engine = None
    monitor_exit = monitor.wait(0) if monitor is not None else None
    if monitor_exit not in (None, 0):  # killed or crashed: the report's system metrics end early
        logger.warning(
            "the system monitor stopped while the job ran (exit code %s): system metrics end "
            "there (see %s)",
            monitor_exit,
            monitor.log_path,
        )
    # a rank killed before it closed its timeline files leaves .tmp files: close them now
    recover_timeline_files(job.profiler_output)
    write_job_end_marker(job.profiler_output)
    importing = None
    try:
        if monitor is not None:
            monitor.stop()
        if engine is not None:
            # this process imports nothing else meanwhile (two threads importing the same
            # modules at once could deadlock)
            importing = _import_report_dependencies() if report else None
            engine.finish(report=False)  # this process writes it, once the job's end is recorded
        else:
            _run_rules_offline(job, rules)
    except KeyboardInterrupt:
        # Ctrl-C while the rules make their final pass: the job's end is recorded all the same
        logger.warning(
            "interrupted: the rules' final pass and the report are skipped (run `stepscope "
            "rules %s` for the verdicts)",
            job.path,
        )
        if monitor is not None:
            monitor.stop()
        if engine is not None:
            engine.stop()
        report = False
    if importing is not None:
        importing.join()
    watcher.poll()
    ranks = _collect_ranks(job.profiler_output)
    watcher.take_node_name(ranks)
    job.info.update(
        # on the clock of the job's data: a wall clock NTP stepped back during the job would
        # make the job end before it started
        end_time_us=int(now_us()),
        status=job.status,
        exit_code=job.exit_code,
        nproc_per_node=_processes_per_node(ranks, job.info["nproc_per_node"]),
        ranks=ranks,
    )
    _record(job, "the job's end")  # on a full disk: the job is over all the same
    if report:
        _write_report(job)


def _run_rules_offline(job: Job, rules: Sequence[Any] | None) -> None:
    """The job's own rules, when the live engine could not run them."""
    from stepscope.rules import run_rules

    try:
        run_rules(job.path, rules)
    except StepscopeError as exc:
        logger.warning("rules could not run on %s: %s", job.path, exc)


def _report_can_be_written() -> bool:
    """Whether the report's plotly (the ``ui`` extra) is installed. Without it the job runs, and
    says so once as it starts, instead of failing to write the report at every update."""
    try:
        require_installed("plotly", extra="ui", feature="the HTML profiling report")
    except MissingDependencyError as exc:
        logger.warning("%s (this job runs without it)", exc)
        return False
    return True


def _import_report_dependencies() -> threading.Thread:
    """Import the report's dependencies on a thread (see
    :func:`stepscope.report.import_dependencies`); one that fails to import fails again, and is
    reported, when the report is written."""

    def import_them() -> None:
        try:
            from stepscope.report import import_dependencies

            import_dependencies()
        except Exception:  # reported when the report is written
            logger.debug("importing the report's dependencies failed", exc_info=True)

    thread = threading.Thread(target=import_them, name="stepscope-report-imports", daemon=True)
    thread.start()
    return thread


def _write_report(job: Job) -> None:
    """The report is the last thing written: a full disk or an unwritable ``rule-output/`` is
    a warning, and the job still ends with its command's exit status and its summary."""
    from stepscope.report import write_report

    try:
        write_report(job.path)
    except (OSError, StepscopeError) as exc:
        logger.warning("the profiling report could not be written: %s", exc)


def _collect_ranks(profiler_output: Path) -> dict[str, dict[str, Any]]:
    """Merge ``framework/ranks/<node_id>.json`` written by every instrumented rank."""
    ranks: dict[str, dict[str, Any]] = {}
    for rank_file in sorted((profiler_output / "framework" / "ranks").glob("*.json")):
        try:
            info = json.loads(rank_file.read_text())
            ranks[str(info["rank"])] = info
        except (OSError, ValueError, KeyError, TypeError):
            logger.warning("skipping unreadable rank description %s", rank_file)
    return ranks


def _processes_per_node(ranks: dict[str, dict[str, Any]], asked: int) -> int:
    """The most ranks that described themselves on one node, or ``asked`` if more: a command
    that starts its own ranks (``torchrun --nproc-per-node 2 train.py``) runs more processes
    than ``nproc_per_node`` asked for, and a rank that profiled nothing wrote no description."""
    per_node = Counter(str(info.get("node")) for info in ranks.values())
    return max([asked, *per_node.values()])


class _JobWatcher:
    """What the launcher looks at every second while the job runs: the rules' statuses, told to
    ``on_status`` as they change; and, for a node that torchrun numbers at its rendezvous
    (``node_named_by_ranks``), the name its ranks give it, which job.json takes at once."""

    def __init__(
        self,
        job: Job,
        on_status: Callable[[str, dict[str, Any]], None] | None,
        *,
        node_named_by_ranks: bool,
    ) -> None:
        self.job = job
        self.on_status = on_status
        self.seen: dict[str, str] = {}
        self.node_pending = node_named_by_ranks

    def poll(self) -> None:
        if self.node_pending:
            self.take_node_name(_collect_ranks(self.job.profiler_output))
        if self.on_status is None:
            return
        for rule, status in read_rule_statuses(self.job.path).items():
            state = str(status.get("status"))
            if self.seen.get(rule) != state:
                self.seen[rule] = state
                self.on_status(rule, status)

    def take_node_name(self, ranks: dict[str, dict[str, Any]]) -> None:
        """Name the node in job.json as its ranks name it (``algo-<GROUP_RANK + 1>``), once
        their rank files say it; a folder is one node's, so they name one."""
        nodes = {str(info["node"]) for info in ranks.values() if info.get("node")}
        if not self.node_pending or len(nodes) != 1:
            return
        self.node_pending = False
        (node,) = nodes
        info = self.job.info
        (provisional,) = info["nodes"]
        if node == provisional:
            return
        info["nodes"] = [node]
        for key in ("hosts", "hardware"):
            info[key] = {node: info[key][provisional]}
        _record(self.job, "the node's name")  # recorded again at the end
