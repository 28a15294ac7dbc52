"""A job held in memory as Arrow tables, behind the JobData interface (refresh, connect, path).

Rule tests build exactly the samples and events they need with numpy and run the real engine on
them; no rule test depends on how a job is stored on disk.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from stepscope.store.schema import EVENT_SCHEMA, SYSTEM_SCHEMA

T0_US = 1_700_000_000_000_000
SNAPSHOT_US = 500_000


class TableJob:
    """System samples and events appended with numpy; ``connect()`` exposes the two views."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.kind = "stepscope"
        self.name = path.name
        self.metadata: dict[str, Any] = {}
        self._system: list[pa.Table] = []
        self._events: list[pa.Table] = []
        #: only data before this time is visible, to replay a job as it is being written
        self.visible_until_us: int | None = None
        self._refreshed_until: int | None = -1

    def refresh(self) -> bool:
        """True when more data became visible since the last call, as JobData.refresh() says."""
        changed = self.visible_until_us != self._refreshed_until
        self._refreshed_until = self.visible_until_us
        return changed

    def metric(self, node: str, times_us: Any, type_: str, name: str, dimension: str, values: Any):
        times = np.asarray(times_us, dtype=np.int64)
        n = len(times)
        self._system.append(
            pa.table(
                {
                    "timestamp_us": times,
                    "node": [node] * n,
                    "type": [type_] * n,
                    "name": [name] * n,
                    "dimension": [dimension] * n,
                    "value": np.asarray(values, dtype=np.float64),
                },
                schema=SYSTEM_SCHEMA,
            )
        )

    def events(
        self,
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
        start = np.asarray(start_us, dtype=np.float64)
        n = len(start)
        dur = np.broadcast_to(np.asarray(dur_us, dtype=np.float64), (n,))
        steps = np.full(n, -1) if step is None else np.broadcast_to(np.asarray(step), (n,))
        pids = (
            np.zeros(n, dtype=np.int64) if pid is None else np.broadcast_to(np.asarray(pid), (n,))
        )
        if isinstance(args, list):
            arg_text = [json.dumps(a) for a in args]
        else:
            arg_text = [json.dumps(args) if args else ""] * n
        self._events.append(
            pa.table(
                {
                    "source": [source] * n,
                    "node": [node] * n,
                    "rank": np.full(n, rank, dtype=np.int32),
                    "category": [category] * n,
                    "name": [name or category] * n,
                    "ph": ["X"] * n,
                    "start_us": start,
                    "dur_us": dur,
                    "pid": pids.astype(np.int64),
                    "tid": np.zeros(n, dtype=np.int64),
                    "step": steps.astype(np.int64),
                    "device": np.full(n, -1, dtype=np.int64),
                    "stream": np.full(n, -1, dtype=np.int64),
                    "correlation": np.full(n, -1, dtype=np.int64),
                    "external_id": np.full(n, -1, dtype=np.int64),
                    "bytes": np.full(n, -1, dtype=np.int64),
                    "args": arg_text,
                },
                schema=EVENT_SCHEMA,
            )
        )

    def connect(self) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect()
        system = pa.concat_tables(self._system) if self._system else SYSTEM_SCHEMA.empty_table()
        events = pa.concat_tables(self._events) if self._events else EVENT_SCHEMA.empty_table()
        con.register("system_table", system)
        con.register("events_table", events)
        until = self.visible_until_us if self.visible_until_us is not None else 2**62
        con.execute(
            f"CREATE VIEW system AS SELECT * FROM system_table WHERE timestamp_us < {until}"
        )
        con.execute(f"CREATE VIEW events AS SELECT * FROM events_table WHERE start_us < {until}")
        return con


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
        job.metric(node, times + i, "cpu", f"cpu{i}", "CPUUtilization", values)
        waits = np.clip(rng.normal(iowait_pct, noise / 3, len(times)), 0, 100)
        job.metric(node, times + i, "cpu", f"cpu{i}", "I/OWaitPercentage", waits)
    for i, mean in enumerate(gpu_util_pct or []):
        values = np.clip(rng.normal(mean, noise, len(times)), 0, 100)
        job.metric(node, times + 100 + i, "gpu", f"gpu{i}", "GPUUtilization", values)
    for i, memory in enumerate(gpu_memory_pct or []):
        values = np.broadcast_to(np.asarray(memory, dtype=np.float64), (len(times),))
        job.metric(node, times + 100 + i, "gpu", f"gpu{i}", "GPUMemoryUtilization", values)
    job.metric(node, times + 200, "memory", "MemoryUsedPercent", "", np.full(len(times), 40.0))
    job.metric(
        node, times + 201, "network", "ReceiveBytesPerSecond", "Algorithm", np.full(len(times), 1e6)
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
    job.events(node, f"Step:ModeKeys.{mode}", start, dur, rank=rank, step=steps)
    job.events(node, "Forward", start + 1000, dur * 0.3, rank=rank, step=steps)
    job.events(
        node, "Backward(post-forward)", start + 1000 + dur * 0.3, dur * 0.5, rank=rank, step=steps
    )
    return start, dur


def verdict(job: TableJob, rule: Any) -> Any:
    """Run ``rule`` (a Rule instance) over the whole job; its RuleResult."""
    from stepscope.rules import RuleSession

    session = RuleSession(job, [rule])
    session.advance(final=True)
    return session.results()[rule.rule_name()]
