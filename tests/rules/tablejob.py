"""Machines and training loops written into an in-memory job (``stepscope.testing.TableJob``).

Rule tests build exactly the samples and events they need with numpy and run the real engine on
them; no rule test depends on how a job is stored on disk.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from stepscope.testing import TableJob, events_table, system_table

T0_US = 1_700_000_000_000_000
SNAPSHOT_US = 500_000


def add_metric(
    job: TableJob,
    node: str,
    times_us: Any,
    type_: str,
    name: str,
    dimension: str,
    values: Any,
) -> None:
    """One system metric sampled at ``times_us``."""
    job.add(
        system=system_table(
            timestamp_us=np.asarray(times_us, dtype=np.int64),
            node=node,
            type=type_,
            name=name,
            dimension=dimension,
            value=np.asarray(values, dtype=np.float64),
        )
    )


def add_events(
    job: TableJob,
    node: str,
    category: str,
    start_us: Any,
    dur_us: Any,
    *,
    name: str | None = None,
    rank: int = 0,
    step: Any = None,
    pid: Any = None,
    args: list[dict[str, Any]] | dict[str, Any] | None = None,
    source: str = "pythontimeline",
) -> None:
    """Events of one category starting at ``start_us``; the other columns one value or one each."""
    if isinstance(args, list):
        arg_text: Any = [json.dumps(a) for a in args]
    else:
        arg_text = json.dumps(args) if args else ""
    job.add(
        events=events_table(
            source=source,
            node=node,
            rank=rank,
            category=category,
            name=name or category,
            start_us=np.asarray(start_us, dtype=np.float64),
            dur_us=np.asarray(dur_us, dtype=np.float64),
            pid=0 if pid is None else np.asarray(pid),
            tid=0,
            step=-1 if step is None else np.asarray(step),
            args=arg_text,
        )
    )


def snapshot_times(seconds: float, *, start_us: int = T0_US) -> np.ndarray:
    return start_us + np.arange(int(seconds * 1e6 // SNAPSHOT_US), dtype=np.int64) * SNAPSHOT_US


def machine(
    job: TableJob,
    seconds: float,
    *,
    node: str = "algo-1",
    cores: int = 4,
    cpu_pct: float | list[float] = 30.0,
    iowait_pct: float = 1.0,
    gpu_util_pct: list[float] | None = None,
    gpu_memory_pct: list[float] | None = None,
    noise: float = 3.0,
    start_us: int = T0_US,
    seed: int = 0,
) -> np.ndarray:
    """System samples every 500 ms: per-core CPU and I/O wait, per-GPU utilization and memory.

    Records of one snapshot get timestamps a few microseconds apart, as real monitors write them.
    ``cpu_pct`` may list one mean per core. Returns the snapshot times.
    """
    rng = np.random.default_rng(seed)
    times = snapshot_times(seconds, start_us=start_us)
    per_core = cpu_pct if isinstance(cpu_pct, list) else [cpu_pct] * cores
    for i, mean in enumerate(per_core):
        values = np.clip(rng.normal(mean, noise, len(times)), 0, 100)
        add_metric(job, node, times + i, "cpu", f"cpu{i}", "CPUUtilization", values)
        waits = np.clip(rng.normal(iowait_pct, noise / 3, len(times)), 0, 100)
        add_metric(job, node, times + i, "cpu", f"cpu{i}", "I/OWaitPercentage", waits)
    for i, mean in enumerate(gpu_util_pct or []):
        values = np.clip(rng.normal(mean, noise, len(times)), 0, 100)
        add_metric(job, node, times + 100 + i, "gpu", f"gpu{i}", "GPUUtilization", values)
    for i, memory in enumerate(gpu_memory_pct or []):
        values = np.broadcast_to(np.asarray(memory, dtype=np.float64), (len(times),))
        add_metric(job, node, times + 100 + i, "gpu", f"gpu{i}", "GPUMemoryUtilization", values)
    add_metric(job, node, times + 200, "memory", "MemoryUsedPercent", "", np.full(len(times), 40.0))
    add_metric(
        job,
        node,
        times + 201,
        "network",
        "ReceiveBytesPerSecond",
        "Algorithm",
        np.full(len(times), 1e6),
    )
    return times


def training_steps(
    job: TableJob,
    count: int,
    *,
    node: str = "algo-1",
    step_s: float = 0.2,
    start_us: int = T0_US,
    slow: dict[int, float] | None = None,
    mode: str = "TRAIN",
    rank: int = 0,
    first_step: int = 0,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` back-to-back Step events (plus Forward and Backward inside each one).

    ``slow`` maps a step number to its duration in seconds. Returns (start_us, dur_us).
    """
    rng = np.random.default_rng(seed)
    dur = rng.normal(step_s, step_s * 0.02, count).clip(step_s * 0.5) * 1e6
    steps = np.arange(first_step, first_step + count)
    for number, seconds in (slow or {}).items():
        dur[number - first_step] = seconds * 1e6
    start = start_us + np.concatenate([[0.0], np.cumsum(dur)[:-1]])
    add_events(job, node, f"Step:ModeKeys.{mode}", start, dur, rank=rank, step=steps)
    add_events(job, node, "Forward", start + 1000, dur * 0.3, rank=rank, step=steps)
    add_events(
        job,
        node,
        "Backward(post-forward)",
        start + 1000 + dur * 0.3,
        dur * 0.5,
        rank=rank,
        step=steps,
    )
    return start, dur


def verdict(job: TableJob, rule: Any) -> Any:
    """Run ``rule`` (a Rule instance) over the whole job; its RuleResult."""
    from stepscope.rules import RuleSession

    session = RuleSession(job, [rule])
    session.advance(final=True)
    return session.results()[rule.rule_name()]
