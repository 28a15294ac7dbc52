"""Starting and stopping the system monitor process, one per node.

The monitor is a fresh interpreter (``python -m stepscope.collect.monitor``), not a fork: it
inherits no torch, CUDA or thread state of the training process, and no stepscope
instrumentation (the variables that would bootstrap it are removed from its environment). Its
stdout is discarded and its stderr appended to ``monitor-<node>.log``, so even a crash before logging
starts leaves a trace there. It tells it is ready (its stop handler installed, its counters
primed) through a pipe of its own, which :meth:`MonitorHandle.stop` waits on, briefly, before
stopping it: stopped sooner, it would die or stop without a sample.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

from stepscope.collect.monitor.gpu import GpuBackend, gpu_backend_from_spec
from stepscope.errors import ConfigError, StepscopeError
from stepscope.store.layout import NODE_NAME_RE, monitor_log_path

__all__ = ["MonitorHandle", "start_monitor", "start_monitor_or_warn"]

logger = logging.getLogger(__name__)

#: Environment variables that would instrument the monitor like a training process.
_INSTRUMENTATION_ENV = ("STEPSCOPE_JOB_DIR", "STEPSCOPE_CONFIG")


class MonitorHandle:
    """The running monitor process of one node (see :func:`start_monitor`)."""

    def __init__(
        self, process: subprocess.Popen[bytes], log_path: Path, ready_fd: int | None = None
    ) -> None:
        self._process = process
        #: the monitor's own log, where a crash says why
        self.log_path = log_path
        self._ready_fd = ready_fd  # readable once the monitor is ready (or gone)

    @property
    def pid(self) -> int:
        """The monitor's process id."""
        return self._process.pid

    def is_alive(self) -> bool:
        """Whether the monitor process is still running."""
        return self._process.poll() is None

    def stop(self, timeout_s: float = 5) -> int | None:
        """Ask the monitor to write what it has and exit (SIGTERM); kill it after ``timeout_s``.

        A monitor still starting is given up to ``timeout_s`` to be ready first, so that a job
        shorter than its start-up still gets its sample rather than a monitor killed unready.

        :returns: its exit code (``None`` only if even the kill could not be confirmed).
        """
        self._wait_until_ready(timeout_s)
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                return self._process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._process.kill()
                try:
                    return self._process.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    return None
        return self._process.returncode

    def _wait_until_ready(self, timeout_s: float) -> None:
        fd, self._ready_fd = self._ready_fd, None
        if fd is None:
            return
        try:
            select.select([fd], [], [], timeout_s)
        except (OSError, ValueError):  # a wait cut short only costs the last sample
            pass
        finally:
            os.close(fd)

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Wait until the monitor exits by itself; ``None`` if it still runs after ``timeout_s``."""
        try:
            return self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None


def start_monitor(
    profiler_output_dir: str | Path,
    *,
    node: str = "algo-1",
    interval_ms: int = 500,
    parent_pid: int | None = None,
    gpu_backend: str | GpuBackend = "nvml",
    config_path: str | Path | None = None,
) -> MonitorHandle:
    """Start the system monitor of one node in its own process.

    It samples every ``interval_ms`` into ``system/incremental/`` and exits by itself when
    ``parent_pid`` dies or ``training_job_end.ts`` appears (or on :meth:`MonitorHandle.stop`).

    :param profiler_output_dir: the profiler output folder (created if missing).
    :param node: the node name, ``algo-<n>``.
    :param interval_ms: the sampling interval (SageMaker's ``system_monitor_interval_millis``;
        it allows 100, 200, 500, 1000, 5000 and 60000).
    :param parent_pid: the process whose death stops the monitor; default: the caller.
    :param gpu_backend: ``"nvml"``, ``"none"``, ``"scripted:<JSON or file>"`` or a
        :class:`~stepscope.collect.monitor.gpu.ScriptedGpuBackend` (passed on as its spec).
    :param config_path: the job's configuration file, whose interval and ``disable_profiler``
        the monitor follows while it runs (``stepscope update``); default: none.
    :raises ConfigError: for a bad node name, interval or GPU backend spec.
    :raises OSError: when the output folder cannot be created or the process cannot start.
    """
    if NODE_NAME_RE.match(node) is None:
        raise ConfigError("start_monitor.node", node, "'algo-<n>' with n >= 1")
    if isinstance(interval_ms, bool) or not isinstance(interval_ms, int) or interval_ms < 1:
        raise ConfigError("start_monitor.interval_ms", interval_ms, "an integer >= 1")
    spec = gpu_backend_from_spec(gpu_backend).spec()  # validates here, not in the other process
    output_dir = Path(profiler_output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "stepscope.collect.monitor",
        str(output_dir),
        "--node",
        node,
        "--interval-ms",
        str(interval_ms),
        "--parent-pid",
        str(parent_pid if parent_pid is not None else os.getpid()),
        "--gpu-backend",
        spec,
    ]
    if config_path is not None:
        command += ["--config", str(config_path)]
    env = {key: value for key, value in os.environ.items() if key not in _INSTRUMENTATION_ENV}
    log_path = monitor_log_path(output_dir, node)
    ready_fd, tell_ready_fd = os.pipe()
    try:
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                [*command, "--ready-fd", str(tell_ready_fd)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
                close_fds=True,
                pass_fds=(tell_ready_fd,),
                start_new_session=True,  # a Ctrl-C in the terminal reaches the launcher only
            )
    except BaseException:
        os.close(ready_fd)
        raise
    finally:
        os.close(tell_ready_fd)
    return MonitorHandle(process, log_path, ready_fd)


def start_monitor_or_warn(
    profiler_output_dir: str | Path,
    *,
    node: str,
    interval_ms: int,
    parent_pid: int,
    config_path: str | Path | None = None,
) -> MonitorHandle | None:
    """:func:`start_monitor` for a job that goes on without system metrics when the monitor
    cannot start: ``None`` and one warning instead of an error."""
    try:
        return start_monitor(
            profiler_output_dir,
            node=node,
            interval_ms=interval_ms,
            parent_pid=parent_pid,
            config_path=config_path,
        )
    except (OSError, StepscopeError) as exc:
        logger.warning("stepscope's system monitor did not start (%s): no system metrics", exc)
        return None
