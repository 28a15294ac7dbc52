"""Step-time overhead of ``stepscope run`` (default configuration) against the bare script.

The same CPU training loop runs bare and under ``stepscope run``, in separate fresh processes,
in ABBA order (bare, stepscope, stepscope, bare, ...) so a drift of the machine's load hits both
sides alike. The script times its own steps, data loading included (start-up, the first 20 steps
and shut-down are excluded), three ways: wall time (``perf_counter``), CPU time of the training
thread (``time.thread_time``: what the hooks cost the step, steadier than wall time) and CPU time
of the whole training process over the timed steps (``time.process_time``: the writer threads
count there). Each run gives its median step (the process CPU: its mean per step); printed are
the medians of those per side, and the median of the paired ratios (each stepscope run against
the bare run next to it). The target is under 1 % at the defaults.

    python bench/bench_run_overhead.py [--reps 5] [--steps 300]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

#: per-run figures, in the order printed
METRICS = ("wall", "thread CPU", "process CPU")

TRAIN = textwrap.dedent(
    """
    import json, sys, time
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    steps, out = int(sys.argv[1]), sys.argv[2]
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(32, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(512, 3, 32, 32), torch.randint(0, 10, (512,)))
    loader = torch.utils.data.DataLoader(data, batch_size=32, shuffle=True)
    wall, cpu, step, warmup = [], [], 0, 20  # the first steps warm up allocators and caches
    process_t0 = 0.0
    iterator = iter(loader)
    while step < steps:
        if step == warmup:
            process_t0 = time.process_time()
        t0, c0 = time.perf_counter(), time.thread_time()  # data loading counts in the step
        try:
            x, y = next(iterator)
        except StopIteration:
            iterator = iter(loader)
            x, y = next(iterator)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
        step += 1
    process = (time.process_time() - process_t0) / (steps - warmup)
    with open(out, "w") as file:
        json.dump({"wall": wall[warmup:], "cpu": cpu[warmup:], "process": process}, file)
    """
)


def _run(command: list[str], times_file: Path) -> dict[str, float]:
    """Run one side; its median step (wall, thread CPU) and mean process CPU per step, in s."""
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    times = json.loads(times_file.read_text())
    return {
        "wall": statistics.median(times["wall"]),
        "thread CPU": statistics.median(times["cpu"]),
        "process CPU": times["process"],
    }


def _ms(figures: dict[str, float]) -> str:
    return ", ".join(f"{metric} {figures[metric] * 1e3:.3f} ms" for metric in METRICS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="pairs of runs (ABBA order)")
    parser.add_argument("--steps", type=int, default=300, help="steps per run (20 untimed)")
    args = parser.parse_args()
    print(f"load average at the start: {os.getloadavg()[0]:.2f}")
    bare: list[dict[str, float]] = []
    profiled: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "train.py"
        script.write_text(TRAIN)
        times_file = Path(tmp) / "times.json"
        train = [sys.executable, str(script), str(args.steps), str(times_file)]
        for rep in range(args.reps):
            job_dir = Path(tmp) / f"job-{rep}"
            run = [sys.executable, "-m", "stepscope", "run", "--job-dir", str(job_dir), "--"]
            sides = [("bare", train), ("stepscope", run + train)]
            for side, command in sides if rep % 2 == 0 else reversed(sides):
                (bare if side == "bare" else profiled).append(_run(command, times_file))
            print(f"rep {rep + 1}: bare {_ms(bare[-1])}; stepscope {_ms(profiled[-1])}", flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    for metric in METRICS:
        b = statistics.median(run[metric] for run in bare)
        p = statistics.median(run[metric] for run in profiled)
        paired = statistics.median(
            s[metric] / r[metric] for s, r in zip(profiled, bare, strict=True)
        )
        print(
            f"{metric}: bare {b * 1e3:.3f} ms, under stepscope run {p * 1e3:.3f} ms, "
            f"{100 * (p / b - 1):+.2f} %; median of paired ratios {100 * (paired - 1):+.2f} % "
            "(target < 1 %)"
        )


if __name__ == "__main__":
    main()
