"""A generator of realistic profiled jobs in the SageMaker Debugger layout, for tests and benchmarks.

:func:`generate_job` writes what a PyTorch training job profiled by stepscope (or SageMaker
Debugger) leaves on disk: ``job.json``, one system-metrics file per minute and node, framework
``pevents`` files rotated every 60 s (``pythontimeline`` for steps, forward and backward;
``model_timeline`` for the data loader), the rank files and the end-of-job marker. Its defaults
are the reference 1-hour job: one node, 32 CPUs, 8 GPUs (gpu0 at about 30 % utilization, the
others 80 %), 500 ms snapshots of 88 records (633,600 records), 11,736 steps of about 0.28 s with
1 % five times slower, 24 events per step and every 2,000 steps a data-loader initialization
with 4 workers (281,694 events).

The timeline of each node: ``init_s`` of initialization, then the training loop, then
``finalize_s``. A step is the compute (``step_s``, jittered ±5 %, five times longer for slow
steps) followed by the wait for the next batch (``DataLoaderIter::GetNext``). The number of steps
is what fits in the loop at the mean step time, and the loop is scaled to fill its time exactly.
System metrics follow the timeline: GPUs idle outside the loop and nearly idle during slow steps
and data-loader waits; with ``dataloader_starved`` the waits are long and the CPUs busy.

Everything is a function of the arguments: the same ``seed`` writes the same bytes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from stepscope.errors import ConfigError
from stepscope.store import layout
from stepscope.store.system_writer import write_job_end_marker

__all__ = ["TINY_JOB", "generate_job"]

#: Knobs of a job small enough for unit tests (a fraction of a second to write).
TINY_JOB: dict[str, Any] = {"nodes": 1, "gpus": 2, "cpus": 4, "minutes": 2, "step_s": 0.5}

_INIT_S = 5.0
_FINALIZE_S = 1.25
_DATALOADER_WAIT_S = 0.015
_SLOW_FACTOR = 5.0
_INIT_EVERY_STEPS = 2000
_WORKERS = 4
_ROTATE_S = 60
_DEFAULT_START_S = 1_700_000_040  # a whole minute, so minute files line up with the job
_SUBMODULES = (
    "conv1",
    "bn1",
    "relu",
    "maxpool",
    "layer1",
    "layer2",
    "layer3",
    "layer4",
    "avgpool",
    "fc",
)
_MODEL = "ResNet"
_TRAIN = "Step:ModeKeys.TRAIN"
# phase -> pid, stable for a writer's life (pids start at 1, as stepscope's writer does)
_PYTHON_PHASES = {
    _TRAIN: 1,
    "Forward": 2,
    "Forward-SubModuleInternal": 3,
    "Backward(post-forward)": 4,
    "Backward-SubModuleInternal": 5,
}
_LOADER_PHASES = {"DataLoaderIterInitialize": 1, "DataLoaderWorker": 2, "DataLoaderIter": 3}


def generate_job(
    root: str | os.PathLike[str],
    *,
    nodes: int = 1,
    gpus: int = 8,
    cpus: int = 32,
    minutes: int = 60,
    step_s: float = 0.28,
    slow_step_fraction: float = 0.01,
    slow_steps: Iterable[int] = (),
    low_gpu: Mapping[int, float] | None = None,
    dataloader_starved: bool = False,
    gpu_memory_growth: bool = False,
    seed: int = 0,
    interval_ms: int = 500,
    start_time_s: int = _DEFAULT_START_S,
    name: str | None = None,
) -> Path:
    """Write a complete, finished job into the folder ``root`` and return it.

    :param root: the job folder to create (its parent must exist or be creatable).
    :param nodes: number of nodes ``algo-1`` ... ; each runs one rank (rank = node index).
    :param gpus: GPUs per node (``gpu0`` ...), each with utilization and memory records.
    :param cpus: CPU cores per node, each with utilization and I/O-wait records.
    :param minutes: job length; one system file per minute and node, pevents rotated every 60 s.
    :param step_s: mean compute time of a step in seconds (the data-loader wait comes on top).
    :param slow_step_fraction: share of steps, drawn with ``seed``, that are 5x slower.
    :param slow_steps: step numbers that are 5x slower in addition.
    :param low_gpu: GPU index -> mean utilization % during steps (others 80 %); default
        ``{0: 30.0}`` as in the reference job; pass ``{}`` for all GPUs at 80 %.
    :param dataloader_starved: make every data-loader wait longer than the compute (twice
        ``step_s``), with busy CPUs and idle GPUs meanwhile.
    :param gpu_memory_growth: GPU memory utilization climbs from 20 % to 95 % over the job
        (else steady around 40 %).
    :param seed: seed of every random draw.
    :param interval_ms: system snapshot interval.
    :param start_time_s: job start, seconds since the epoch (default a fixed whole minute).
    :param name: the job's name in job.json; default the folder name.
    """
    if not isinstance(minutes, int) or minutes < 1:
        raise ConfigError("generate_job.minutes", minutes, "an integer >= 1")
    job_dir = Path(root)
    output = layout.profiler_output_dir(job_dir)
    output.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    start_us = int(start_time_s * 1_000_000)
    end_us = start_us + minutes * 60_000_000
    low = {0: 30.0} if low_gpu is None else dict(low_gpu)
    slow_extra = set(slow_steps)
    timelines = []
    for node_index in range(nodes):
        timeline = _Timeline.draw(
            rng,
            start_us=start_us,
            end_us=end_us,
            step_s=step_s,
            slow_step_fraction=slow_step_fraction,
            slow_steps=slow_extra,
            dataloader_starved=dataloader_starved,
        )
        timelines.append(timeline)
        node_id = layout.node_id_for(node_index, node_index)
        pid = 4000 + node_index
        _write_framework(output, node_id, pid, start_us, timeline)
        _write_system(
            output,
            layout.node_name(node_index),
            rng,
            timeline,
            start_us=start_us,
            end_us=end_us,
            gpus=gpus,
            cpus=cpus,
            interval_ms=interval_ms,
            low_gpu=low,
            dataloader_starved=dataloader_starved,
            gpu_memory_growth=gpu_memory_growth,
        )
        rank_file = layout.rank_file_path(output, node_id)
        rank_file.parent.mkdir(parents=True, exist_ok=True)
        rank_file.write_bytes(
            orjson.dumps(
                {
                    "rank": node_index,
                    "local_rank": 0,
                    "world_size": nodes,
                    "node": layout.node_name(node_index),
                    "node_id": node_id,
                    "pid": pid,
                    "hostname": f"host-{node_index + 1}",
                    "clock_offset_us": 0.0,
                }
            )
        )
    write_job_end_marker(output)
    _write_job_json(job_dir, name or job_dir.name, nodes, gpus, cpus, start_us, end_us, step_s)
    return job_dir


class _Timeline:
    """Step boundaries of one node: compute and data-loader wait per step, in µs."""

    def __init__(
        self,
        step_start_us: np.ndarray,
        compute_us: np.ndarray,
        wait_us: np.ndarray,
        slow: np.ndarray,
        loop_end_us: int,
    ) -> None:
        self.step_start_us = step_start_us
        self.compute_us = compute_us
        self.wait_us = wait_us
        self.slow = slow
        self.loop_end_us = loop_end_us

    @classmethod
    def draw(
        cls,
        rng: np.random.Generator,
        *,
        start_us: int,
        end_us: int,
        step_s: float,
        slow_step_fraction: float,
        slow_steps: set[int],
        dataloader_starved: bool,
    ) -> _Timeline:
        loop_start_us = start_us + int(_INIT_S * 1e6)
        loop_end_us = end_us - int(_FINALIZE_S * 1e6)
        wait_s = 2.0 * step_s if dataloader_starved else _DATALOADER_WAIT_S
        mean_step_s = step_s * (1 + (_SLOW_FACTOR - 1) * slow_step_fraction) + wait_s
        count = max(1, math.floor((loop_end_us - loop_start_us) / 1e6 / mean_step_s))
        compute = step_s * rng.uniform(0.95, 1.05, count)
        slow = np.zeros(count, dtype=bool)
        n_slow = round(count * slow_step_fraction)
        if n_slow:
            slow[rng.choice(count, n_slow, replace=False)] = True
        slow[[s for s in slow_steps if 0 <= s < count]] = True
        compute[slow] *= _SLOW_FACTOR
        wait = wait_s * rng.uniform(0.8, 1.2, count)
        scale = (loop_end_us - loop_start_us) / 1e6 / float(compute.sum() + wait.sum())
        compute_us = np.maximum(np.round(compute * scale * 1e6), 50).astype(np.int64)
        wait_us = np.maximum(np.round(wait * scale * 1e6), 10).astype(np.int64)
        starts = loop_start_us + np.concatenate(([0], np.cumsum(compute_us + wait_us)[:-1]))
        return cls(starts.astype(np.int64), compute_us, wait_us, slow, loop_end_us)


# --------------------------------------------------------------------------- framework files


def _framework_events(timeline: _Timeline, pid: int) -> tuple[list[tuple[Any, ...]], ...]:
    """(phase, name, start_us, dur_us, args) of the python timeline and of the data loader."""
    python: list[tuple[Any, ...]] = []
    loader: list[tuple[Any, ...]] = []
    starts = timeline.step_start_us.tolist()
    computes = timeline.compute_us.tolist()
    waits = timeline.wait_us.tolist()
    count = len(starts)
    for step, (t, compute, wait) in enumerate(zip(starts, computes, waits, strict=True)):
        args = {"pid": pid, "step_num": str(step)}
        python.append((_TRAIN, _TRAIN, t, compute + wait, args))
        forward = int(compute * 0.35)
        backward = int(compute * 0.55)
        python.append(("Forward", _MODEL, t, forward, args))
        sub = forward // len(_SUBMODULES)
        for i, module in enumerate(_SUBMODULES):
            python.append(("Forward-SubModuleInternal", module, t + i * sub, sub, args))
        b0 = t + forward
        python.append(("Backward(post-forward)", _SUBMODULES[-1], b0, backward, args))
        sub = backward // len(_SUBMODULES)
        for i, module in enumerate(reversed(_SUBMODULES)):
            python.append(("Backward-SubModuleInternal", module, b0 + i * sub, sub, args))
        worker = step % _WORKERS
        loader.append(
            (
                "DataLoaderIter",
                "DataLoaderIter::GetNext",
                t + compute,
                wait,
                {"worker_id": worker, "pid": pid},
            )
        )
        if step % _INIT_EVERY_STEPS == 0:
            init_us = min(8_000, compute // 4)
            loader.append(
                (
                    "DataLoaderIterInitialize",
                    "_MultiProcessingDataLoaderIter.__init__",
                    t,
                    init_us,
                    {"num_workers": _WORKERS, "pin_memory": False, "pid": pid},
                )
            )
            last = min(step + _INIT_EVERY_STEPS, count) - 1
            worker_end = starts[last] + computes[last] + waits[last]
            for w in range(_WORKERS):
                loader.append(
                    (
                        "DataLoaderWorker",
                        "_worker_loop",
                        t + init_us + w,
                        worker_end - (t + init_us + w),
                        {"worker_id": w, "pid": pid + 100 + w},
                    )
                )
    return python, loader


def _write_framework(
    output: Path, node_id: str, pid: int, start_us: int, timeline: _Timeline
) -> None:
    python, loader = _framework_events(timeline, pid)
    for suffix, events, phases in (
        ("pythontimeline.json", python, _PYTHON_PHASES),
        ("model_timeline.json", loader, _LOADER_PHASES),
    ):
        _write_rotated(output, node_id, suffix, events, phases, start_us)


def _write_rotated(
    output: Path,
    node_id: str,
    suffix: str,
    events: list[tuple[Any, ...]],
    phases: dict[str, int],
    start_us: int,
) -> None:
    """Write events, in the order they end, into one file per 60 s window of their end time."""
    events.sort(key=lambda e: e[2] + e[3])
    header = (
        '[\n{"name": "process_name", "ph": "M", "pid": 0, "args": '
        f'{{"start_time_since_epoch_in_micros": {start_us}}}}},\n'
        '{"name": "process_sort_index", "ph": "M", "pid": 0, "args": {"sort_index": 0}}'
    )
    window_us = _ROTATE_S * 1_000_000
    index = 0
    while index < len(events):
        window = (events[index][2] + events[index][3] - start_us) // window_us
        lines = [header]
        seen: set[str] = set()
        last_end = 0
        while index < len(events):
            phase, name, t, dur, args = events[index]
            end = t + dur
            if (end - start_us) // window_us != window:
                break
            if phase not in seen:
                seen.add(phase)
                p = phases[phase]
                lines.append(
                    f'{{"name": "process_name", "ph": "M", "pid": {p}, "args": {{"name": "{phase}"}}}}'
                )
                lines.append(
                    f'{{"name": "process_sort_index", "ph": "M", "pid": {p}, "args": {{"sort_index": {p}}}}}'
                )
            lines.append(
                f'{{"name": "{name}", "pid": {phases[phase]}, "ph": "X", "ts": {t - start_us}, '
                f'"dur": {dur}, "args": {_args_json(args)}}}'
            )
            last_end = max(last_end, end)
            index += 1
        path = layout.pevents_file_path(output, last_end, node_id, suffix)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(",\n".join(lines) + "\n]\n")


def _args_json(args: dict[str, Any]) -> str:
    parts = []
    for key, value in args.items():
        if isinstance(value, str):
            parts.append(f'"{key}": "{value}"')
        elif isinstance(value, bool):
            parts.append(f'"{key}": {"true" if value else "false"}')
        else:
            parts.append(f'"{key}": {value}')
    return "{" + ", ".join(parts) + "}"


# --------------------------------------------------------------------------- system files


def _write_system(
    output: Path,
    node: str,
    rng: np.random.Generator,
    timeline: _Timeline,
    *,
    start_us: int,
    end_us: int,
    gpus: int,
    cpus: int,
    interval_ms: int,
    low_gpu: Mapping[int, float],
    dataloader_starved: bool,
    gpu_memory_growth: bool,
) -> None:
    """One file per minute: ``snapshots x 88``-style records (cpu, gpu, memory, i/o, network)."""
    interval_us = interval_ms * 1000
    snap_us = np.arange(start_us, end_us, interval_us, dtype=np.int64)
    n = len(snap_us)
    step = np.searchsorted(timeline.step_start_us, snap_us, side="right") - 1
    in_loop = (step >= 0) & (snap_us < timeline.loop_end_us)
    step_c = np.clip(step, 0, len(timeline.step_start_us) - 1)
    waiting = in_loop & (snap_us >= timeline.step_start_us[step_c] + timeline.compute_us[step_c])
    slow = in_loop & timeline.slow[step_c]
    busy_gpu = in_loop & ~waiting & ~slow
    metrics: list[tuple[str, str, str, np.ndarray, int]] = []  # type, name, dim, values, offset_us
    cpu_mean = np.where(waiting & dataloader_starved, 95.0, np.where(in_loop, 35.0, 8.0))
    for c in range(cpus):
        values = np.clip(cpu_mean + rng.normal(0, 4, n), 0, 100)
        metrics.append(("cpu", f"cpu{c}", "CPUUtilization", values, 0))
    for c in range(cpus):
        values = np.clip(rng.exponential(1.0, n), 0, 100)
        metrics.append(("cpu", f"cpu{c}", "I/OWaitPercentage", values, 0))
    for g in range(gpus):
        mean = low_gpu.get(g, 80.0)
        values = np.where(busy_gpu, mean, np.where(in_loop, 3.0, 0.0)) + rng.normal(0, 4, n)
        metrics.append(("gpu", f"gpu{g}", "GPUUtilization", np.clip(values, 0, 100), 150))
    progress = (snap_us - start_us) / max(1, end_us - start_us)
    memory_base = 20.0 + 75.0 * progress if gpu_memory_growth else np.full(n, 40.0)
    for g in range(gpus):
        values = np.clip(memory_base + rng.normal(0, 1, n), 0, 100)
        metrics.append(("gpu", f"gpu{g}", "GPUMemoryUtilization", values, 150))
    metrics.append(
        ("memory", "MemoryUsedPercent", "", np.clip(45 + rng.normal(0, 1, n), 0, 100), 220)
    )
    metrics.append(("i/o", "IOPS", "", np.abs(rng.normal(200, 30, n)), 260))
    metrics.append(
        ("i/o", "ReadThroughputInBytesPerSecond", "", np.abs(rng.normal(5e7, 5e6, n)), 260)
    )
    metrics.append(
        ("i/o", "WriteThroughputInBytesPerSecond", "", np.abs(rng.normal(1e6, 1e5, n)), 260)
    )
    for dimension in ("Algorithm", "Platform"):
        for metric in ("ReceiveBytesPerSecond", "TransmitBytesPerSecond"):
            values = np.abs(rng.normal(2e7, 2e6, n))
            metrics.append(("network", metric, dimension, values, 300))

    prefixes = [
        f'{{"Type": "{t}", "Name": "{name}", "Dimension": "{d}", "Value": '
        for t, name, d, _, _ in metrics
    ]
    middle = f', "NodeId": "{node}", "Timestamp": '
    value_text = [np.char.mod("%.2f", values).tolist() for _, _, _, values, _ in metrics]
    stamps = [
        np.char.mod("%.6f", (snap_us + offset) / 1e6).tolist() for _, _, _, _, offset in metrics
    ]
    minute_of = (snap_us // 60_000_000).tolist()
    k = 0
    while k < n:
        minute = minute_of[k]
        lines = []
        while k < n and minute_of[k] == minute:
            for m, prefix in enumerate(prefixes):
                lines.append(f"{prefix}{value_text[m][k]}{middle}{stamps[m][k]}}}")
            k += 1
        path = layout.system_file_path(output, node, minute * 60)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")


# --------------------------------------------------------------------------- job.json


def _write_job_json(
    job_dir: Path,
    name: str,
    nodes: int,
    gpus: int,
    cpus: int,
    start_us: int,
    end_us: int,
    step_s: float,
) -> None:
    node_names = [layout.node_name(i) for i in range(nodes)]
    document = {
        "name": name,
        "command": ["python", "train.py"],
        "cwd": str(job_dir),
        "host": "host-1",
        "hosts": {node: f"host-{i + 1}" for i, node in enumerate(node_names)},
        "start_time_us": start_us,
        "end_time_us": end_us,
        "status": "Completed",
        "exit_code": 0,
        "nodes": node_names,
        "ranks": {
            str(i): {"node": node, "pid": 4000 + i, "clock_offset_us": 0.0}
            for i, node in enumerate(node_names)
        },
        "hardware": {
            node: {
                "cpu_model": "Generated CPU",
                "cpu_count": cpus,
                "memory_bytes": 256 * 2**30,
                "gpus": [
                    {"index": g, "name": "Generated GPU", "memory_bytes": 40 * 2**30}
                    for g in range(gpus)
                ],
            }
            for node in node_names
        },
        "versions": {"python": "3", "torch": "", "stepscope": "generated"},
        "hyperparameters": {"step_s": step_s},
        "profiler_config": {},
        "rules": [],
    }
    layout.job_file_path(job_dir).write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))
