"""The system monitor's main loop, run in its own process by ``python -m stepscope.collect.monitor``.

Every ``interval_ms`` it takes one snapshot (:class:`~stepscope.collect.monitor.sampler.SystemSampler`)
and appends it to the node's system files. Ticks fall on multiples of the interval since the
epoch, so sampling never drifts; a snapshot that overruns skips the ticks it missed.

It stops, writing what it has, when the parent process dies, when ``training_job_end.ts``
appears, or on SIGTERM/SIGINT. Stopped by a signal (the job's owner saying the training is over),
it first takes a snapshot of the time since the last tick, so a job shorter than the interval
still has its system metrics. Its own log (``<profiler-output>/monitor-<node>.log``) receives
every exception with its traceback; an error in one snapshot is logged and the next tick goes on.

Given the job's configuration file, it follows ``stepscope update`` while it runs: a new
``system_monitor_interval_millis`` applies from the next tick, and ``disable_profiler`` pauses
sampling until the profiler is enabled again (a poll is one ``stat`` per tick).

One monitor per node and job: a monitor holds ``.monitor-<node>.lock`` in the profiler output
(``flock``, released with the process, even after ``kill -9``) and one that finds it held exits
at once. Several processes may start one: ranks that ``torch.multiprocessing.spawn`` started
without ``LOCAL_RANK`` each take themselves for the node's first.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType

import psutil

from stepscope.collect.clock import now_s
from stepscope.collect.monitor.gpu import GpuBackend, gpu_backend_from_spec
from stepscope.collect.monitor.sampler import SystemSampler
from stepscope.config import ConfigWatcher
from stepscope.store import SystemMetricsWriter
from stepscope.store.layout import job_has_ended, monitor_lock_path, monitor_log_path

__all__ = ["main", "run_monitor"]

logger = logging.getLogger(__name__)

#: Snapshot errors logged with a traceback before the log switches to a count every 1000.
_LOGGED_ERRORS = 3
#: Longest wait between checks of the parent and the end marker, for long sampling intervals.
_CHECK_EVERY_S = 1.0
#: Shortest time since the last snapshot worth a snapshot of its own when the monitor is stopped.
_LAST_SNAPSHOT_MIN_S = 0.05


def run_monitor(
    profiler_output_dir: str | Path,
    *,
    node: str = "algo-1",
    interval_ms: int = 500,
    parent_pid: int | None = None,
    gpu_backend: GpuBackend,
    stop: threading.Event | None = None,
    clock_s: Callable[[], float] = now_s,
    config_path: str | Path | None = None,
    on_ready: Callable[[], None] | None = None,
) -> str:
    """Sample and write until a stop condition holds; returns why it stopped.

    :param profiler_output_dir: the profiler output folder.
    :param node: the node name, ``algo-<n>``.
    :param interval_ms: the sampling interval.
    :param parent_pid: stop when this process is gone (``None``: never).
    :param gpu_backend: the GPU backend; opened here and closed on the way out.
    :param stop: an event that stops the loop when set (SIGTERM sets it in the monitor process).
    :param clock_s: the clock of timestamps and ticks, seconds since the epoch (default the
        collection clock: a wall clock stepped back by NTP would stop the ticks until it caught
        up and date the samples back, out of order with the job's earlier samples and events).
    :param config_path: the job's configuration file, to follow its interval and
        ``disable_profiler`` as they change (``None``: sample every ``interval_ms`` throughout).
    :param on_ready: called once the counters are primed: from then on a stop gets a sample.
    :returns: ``"parent exited"``, ``"job ended"`` or ``"stopped"``.
    """
    stop = stop if stop is not None else threading.Event()
    interval_s = interval_ms / 1000.0
    watcher = ConfigWatcher(config_path) if config_path is not None else None
    paused = False
    if watcher is not None and watcher.config is not None:  # it may have changed since our start
        interval_s = watcher.config.system_monitor_interval_millis / 1000.0
        paused = watcher.config.disable_profiler
    writer = SystemMetricsWriter(profiler_output_dir, node=node)
    gpus = gpu_backend.open()
    logger.info(
        "monitor of %s started: pid %d, every %d ms%s, %d GPU(s), %d CPU(s), parent %s",
        node,
        os.getpid(),
        round(interval_s * 1000),
        " (paused: profiler disabled)" if paused else "",
        len(gpus),
        psutil.cpu_count(),
        parent_pid,
    )
    sampler = SystemSampler(gpu_backend, clock_s=clock_s)
    parent = _process_or_none(parent_pid)
    errors = 0
    last_snapshot_s = 0.0
    snapshots = 0

    def snapshot() -> None:
        nonlocal errors, last_snapshot_s, snapshots
        snapshots += 1
        try:
            writer.write(sampler.sample())
        except Exception:  # the monitor must outlive one bad snapshot: log it and go on
            errors += 1
            if errors <= _LOGGED_ERRORS:
                logger.exception("snapshot failed (%d so far)", errors)
            elif errors % 1000 == 0:
                logger.error("%d snapshots have failed so far", errors)
        last_snapshot_s = clock_s()

    def follow_config() -> bool:
        """Apply a changed configuration; True when the interval changed (a new tick is due)."""
        nonlocal interval_s, paused
        config = watcher.poll() if watcher is not None else None
        if config is None:
            return False
        new_interval_s = config.system_monitor_interval_millis / 1000.0
        changed = new_interval_s != interval_s
        if changed or config.disable_profiler != paused:
            logger.info(
                "configuration changed: every %d ms, %s",
                config.system_monitor_interval_millis,
                "paused (profiler disabled)" if config.disable_profiler else "sampling",
            )
        if paused and not config.disable_profiler:
            sampler.sample()  # prime the counters again: the next sample covers its tick only
        interval_s, paused = new_interval_s, config.disable_profiler
        return changed

    def why_stop() -> str | None:
        if parent_pid is not None and not _alive(parent):
            return "parent exited"
        if job_has_ended(profiler_output_dir):
            return "job ended"
        return None

    try:
        sampler.sample()  # prime the counters
        last_snapshot_s = clock_s()
        if on_ready is not None:
            on_ready()
        while True:
            follow_config()
            next_tick_s = (clock_s() // interval_s + 1) * interval_s
            if next_tick_s - last_snapshot_s < _LAST_SNAPSHOT_MIN_S:
                # a tick just after the counters were primed: the cores' counters (10 ms
                # ticks) may not have moved yet, and the snapshot would have no CPU metrics
                next_tick_s += interval_s
            # long intervals wait in slices, so a dead parent, the job end or a shorter interval
            # is noticed quickly
            while (remaining_s := next_tick_s - clock_s()) > 0:
                if stop.wait(min(remaining_s, _CHECK_EVERY_S)):
                    if not paused and not snapshots:  # stopped as it started: the job's only
                        time.sleep(max(last_snapshot_s + _LAST_SNAPSHOT_MIN_S - clock_s(), 0.0))
                    if not paused and clock_s() - last_snapshot_s >= _LAST_SNAPSHOT_MIN_S:
                        snapshot()  # the time since the last tick
                    return "stopped"
                if remaining_s > _CHECK_EVERY_S:
                    if (reason := why_stop()) is not None:
                        return reason
                    if follow_config():
                        next_tick_s = (clock_s() // interval_s + 1) * interval_s
            if parent_pid is not None and not _alive(parent):
                return "parent exited"
            if not paused:
                snapshot()
            if job_has_ended(profiler_output_dir):
                return "job ended"
    finally:
        writer.close()
        gpu_backend.close()
        if writer.dropped_records:
            logger.warning("%d records could not be written", writer.dropped_records)


def _utc_formatter() -> logging.Formatter:
    """Log lines dated in UTC and saying so, as every page and the report give times: the
    node's local time would disagree with them by its time zone, even on the date."""
    formatter = logging.Formatter(
        "%(asctime)s.%(msecs)03d UTC %(levelname)s %(name)s: %(message)s", "%Y-%m-%d %H:%M:%S"
    )
    formatter.converter = time.gmtime
    return formatter


def _tell_ready(fd: int | None) -> None:
    """Write to the starter's pipe that the monitor is ready (a starter gone since is fine)."""
    if fd is None:
        return
    with contextlib.suppress(OSError):
        os.write(fd, b"1")
    with contextlib.suppress(OSError):
        os.close(fd)


def _process_or_none(pid: int | None) -> psutil.Process | None:
    """The process ``pid`` (remembering its start time, so a reused pid is not taken for it)."""
    if pid is None:
        return None
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def _alive(process: psutil.Process | None) -> bool:
    if process is None:
        return False
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m stepscope.collect.monitor", description="stepscope's system monitor."
    )
    parser.add_argument("profiler_output_dir", type=Path)
    parser.add_argument("--node", default="algo-1")
    parser.add_argument("--interval-ms", type=int, default=500)
    parser.add_argument("--parent-pid", type=int, default=None)
    parser.add_argument("--config", type=Path, default=None, help="the job's configuration file")
    parser.add_argument(
        "--ready-fd", type=int, default=None, help="a pipe to write one byte to once ready"
    )
    parser.add_argument(
        "--gpu-backend", default="nvml", help="nvml | none | scripted:<JSON or file>"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """The monitor process: log to ``monitor-<node>.log``, run until told to stop, exit 0."""
    args = _parse_args(argv)
    log_path = monitor_log_path(args.profiler_output_dir, args.node)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log_path)
    handler.setFormatter(_utc_formatter())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    with _node_lock(Path(args.profiler_output_dir), args.node) as claimed:
        if not claimed:
            logger.info("another monitor samples node %s of this job: this one exits", args.node)
            return 0
        try:
            reason = run_monitor(
                args.profiler_output_dir,
                node=args.node,
                interval_ms=args.interval_ms,
                parent_pid=args.parent_pid,
                gpu_backend=gpu_backend_from_spec(args.gpu_backend),
                stop=stop,
                config_path=args.config,
                on_ready=functools.partial(_tell_ready, args.ready_fd),
            )
        except Exception:
            logger.exception("the monitor failed")
            return 1
    logger.info("monitor stopped: %s", reason)
    return 0


@contextlib.contextmanager
def _node_lock(output_dir: Path, node: str) -> Iterator[bool]:
    """Hold the node's lock file while the monitor runs; ``False`` when another monitor holds
    it. Where the file cannot be made or locked, sampling goes on, with a warning."""
    path = monitor_lock_path(output_dir, node)
    try:
        handle = open(path, "ab")
    except OSError as exc:
        logger.warning(
            "cannot open %s (%s): a second monitor of this node would not stop", path, exc
        )
        yield True
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        except OSError as exc:
            logger.warning(
                "cannot lock %s (%s): a second monitor of this node would not stop", path, exc
            )
        yield True
