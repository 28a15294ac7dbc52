"""The small CPU training loop the step-time benchmarks share: a CNN on in-memory data.

Two convolutions, 8 modules, batch 32, one torch thread, SGD; data loading counts in the step.
:class:`Loop` is imported by ``bench_instrumentation.py`` (variants in one process) and
``bench_instructions.py``; run as a script, it trains in a fresh process and writes its step
times as JSON (what ``bench_run_overhead.py`` runs bare and under ``stepscope run``):

    python bench/cnn_training.py STEPS OUT.json

The JSON holds the first step's start (``t0``, on the system-wide ``perf_counter`` clock) and,
per step: its start (s after ``t0``), its wall time, its training-thread CPU time and the
process CPU time (every thread) at its end, in s.

Each step's minor page faults on the training thread are counted too: on glibc, whether the heap
is trimmed and grown again at every step (hundreds of faults per step, a fifth of this loop's
step time) depends on the process's allocation history, not on what runs beside the loop, so a
comparison of step times must show them (``bench_instrumentation.py`` fixes the heap's
thresholds for that reason).
"""

from __future__ import annotations

import json
import resource
import statistics
import sys
import time

#: the training thread's own counters where the system has them (Linux), else the process's
_RUSAGE_WHO = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)


def _minor_faults() -> int:
    return resource.getrusage(_RUSAGE_WHO).ru_minflt


class Times:
    """Per-step wall and training-thread CPU times (s) and minor page faults, and per-block
    process CPU per step (s)."""

    def __init__(self) -> None:
        self.wall_s: list[float] = []
        self.thread_cpu_s: list[float] = []
        self.process_cpu_s: list[float] = []
        self.faults: list[int] = []

    def extend(self, other: Times) -> None:
        self.wall_s += other.wall_s
        self.thread_cpu_s += other.thread_cpu_s
        self.process_cpu_s += other.process_cpu_s
        self.faults += other.faults

    def mean_faults(self) -> float:
        """Minor page faults per step, on average (a few steps may hold them all)."""
        return statistics.mean(self.faults) if self.faults else 0.0

    def medians_ms(self) -> dict[str, float]:
        return {
            "wall": statistics.median(self.wall_s) * 1e3,
            "thread CPU": statistics.median(self.thread_cpu_s) * 1e3,
            "process CPU": statistics.median(self.process_cpu_s) * 1e3,
        }


class Loop:
    """The model, its optimizer and its data loader (seeded: every process trains alike)."""

    def __init__(self, batch_size: int = 32) -> None:
        """:param batch_size: samples per step; an epoch is 16 steps whatever the size."""
        import torch

        torch.manual_seed(0)
        torch.set_num_threads(1)
        self.torch = torch
        self.model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(32, 10),
        )
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        data = torch.utils.data.TensorDataset(
            torch.randn(16 * batch_size, 3, 32, 32), torch.randint(0, 10, (16 * batch_size,))
        )
        self.loader = torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=True)

    def steps(self, count: int, step_ranges: bool = False) -> list[tuple[float, ...]]:
        """Train ``count`` steps on a fresh data-loader iterator; per step, in s: its start
        (``perf_counter``), its wall time, its training-thread CPU time, the process CPU time
        (every thread) at its end and its minor page faults (counted outside the timing)."""
        torch = self.torch
        times = []
        iterator = iter(self.loader)
        for step in range(count):
            faults = _minor_faults()
            t0 = time.perf_counter()
            c0 = time.thread_time()
            try:
                x, y = next(iterator)
            except StopIteration:
                iterator = iter(self.loader)
                x, y = next(iterator)
            step_range = None
            if step_ranges:
                step_range = torch.profiler.record_function(f"ProfilerStep#{step}")
                step_range.__enter__()
            loss = torch.nn.functional.cross_entropy(self.model(x), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            if step_range is not None:
                step_range.__exit__(None, None, None)
            c1 = time.thread_time()
            wall = time.perf_counter() - t0
            process = time.process_time()
            times.append((t0, wall, c1 - c0, process, _minor_faults() - faults))
        return times

    def block(self, steps: int, step_ranges: bool, warmup_steps: int) -> Times:
        """Run ``steps`` steps; the first ``warmup_steps`` are not timed."""
        process_t0 = time.process_time()
        timed = self.steps(steps, step_ranges)
        if warmup_steps:
            process_t0 = timed[warmup_steps - 1][3]
        timed = timed[warmup_steps:]
        times = Times()
        times.wall_s = [step[1] for step in timed]
        times.thread_cpu_s = [step[2] for step in timed]
        times.faults = [step[4] for step in timed]
        times.process_cpu_s = [(timed[-1][3] - process_t0) / len(timed)] if timed else []
        return times


def _train(steps: int, out: str) -> None:
    """Train ``steps`` steps in this process and write every step's times to ``out``."""
    timed = Loop().steps(steps)
    first = timed[0][0] if timed else 0.0
    records = {
        "t0": first,
        "start": [step[0] - first for step in timed],
        "wall": [step[1] for step in timed],
        "cpu": [step[2] for step in timed],
        "process": [step[3] for step in timed],
    }
    with open(out, "w") as file:
        json.dump(records, file)


if __name__ == "__main__":
    _train(int(sys.argv[1]), sys.argv[2])
