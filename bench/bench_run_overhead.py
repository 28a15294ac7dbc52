"""Step-time overhead of ``stepscope run`` (default configuration) against the bare script.

The training loop of ``cnn_training.py`` (a small CPU CNN, one torch thread) runs bare and under
``stepscope run``, in separate fresh processes, in ABBA order (bare, stepscope, stepscope, bare,
...) so a drift of the machine's load hits both sides alike. With ``--sidecars`` a third side
runs the bare script while a system monitor and a live rule engine, started by this benchmark
on an empty job folder, run beside it: what the two processes ``stepscope run`` starts cost the
training process without any instrumentation in it.

The script times its own steps, data loading included, three ways: wall time
(``perf_counter``), CPU time of the training thread (``time.thread_time``: what the hooks cost
the step, steadier than wall time) and CPU time of the whole training process (``time.process_time``:
the writer threads count there). The launcher starts the monitor and the rule engine just before
the training process; their start-up (imports, the rule engine's first scan and report) runs
while the training process imports torch and takes its first steps. So each run is split by
time: steps that start in the first ``--skip-s`` seconds after the first step (the first 20 steps
always excluded) and the steady state after them. Per run and part: the median step (wall,
thread CPU) and the process CPU per step; printed are the medians of those per side and the
median of the paired ratios (each side's run against the bare run next to it). Beside the
training process, the CPU time of the other processes (monitor, rule engine, launcher) is
sampled every 0.2 s and given per part, in % of one core. The target is under 1 % at the
defaults, in the steady state.

    python bench/bench_run_overhead.py [--reps 6] [--steps 1500] [--skip-s 5] [--sidecars]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

#: per-run figures, in the order printed
METRICS = ("wall", "thread CPU", "process CPU")
#: the parts of a run, split at ``--skip-s``
PARTS = ("start", "steady")
#: steps excluded from every figure (allocator and cache warm-up)
WARMUP_STEPS = 20
TRAIN_SCRIPT = Path(__file__).resolve().with_name("cnn_training.py")


class _SidecarCpu:
    """Samples the CPU time (user + system) of every process under ``root`` but the training
    one, every 0.2 s, on the ``perf_counter`` clock (system-wide, so the training process's
    step starts can be placed on it)."""

    def __init__(self, root: int) -> None:
        self._root = psutil.Process(root)
        self.samples: list[tuple[float, float]] = []
        self._cpu: dict[int, float] = {}  # last CPU seen per process, so exited ones still count
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _SidecarCpu:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                children = self._root.children(recursive=True)
            except psutil.Error:
                continue
            for child in children:
                try:
                    if str(TRAIN_SCRIPT) in child.cmdline():
                        continue
                    cpu = child.cpu_times()
                    self._cpu[child.pid] = cpu.user + cpu.system
                except psutil.Error:
                    pass
            self.samples.append((time.perf_counter(), sum(self._cpu.values())))

    def cpu_s(self, begin: float, end: float) -> float:
        """CPU seconds of the sampled processes between two ``perf_counter`` times."""
        inside = [cpu for t, cpu in self.samples if begin <= t <= end]
        return inside[-1] - inside[0] if len(inside) >= 2 else float("nan")


def _figures(times: dict[str, Any], first: int, last: int) -> dict[str, float]:
    """Median wall and thread-CPU step and the process CPU per step of steps first..last-1."""
    steps = last - first
    return {
        "wall": statistics.median(times["wall"][first:last]),
        "thread CPU": statistics.median(times["cpu"][first:last]),
        "process CPU": (times["process"][last - 1] - times["process"][first - 1]) / steps,
    }


def _run(command: list[str], times_file: Path, skip_s: float, sidecars: Any = None) -> dict:
    """Run one side; per part its figures (s) and the other processes' CPU (% of a core)."""
    with _SidecarCpu(os.getpid()) as cpu:
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if sidecars is not None:
        sidecars.stop()
    times = json.loads(times_file.read_text())
    split = next(
        (i for i, start in enumerate(times["start"]) if start >= skip_s), len(times["start"])
    )
    if not WARMUP_STEPS < split < len(times["start"]) - 1:
        raise SystemExit(f"--skip-s {skip_s} leaves no steps in one part: use more --steps")
    t0 = times["t0"]
    end = t0 + times["start"][-1] + times["wall"][-1]
    return {
        "start": _figures(times, WARMUP_STEPS, split),
        "steady": _figures(times, split, len(times["start"])),
        "before other CPU": cpu.cpu_s(0.0, t0),
        "start other CPU": cpu.cpu_s(t0, t0 + skip_s),
        "steady other CPU": cpu.cpu_s(t0 + skip_s, end),
        "steady s": end - t0 - skip_s,
        "start steps": split - WARMUP_STEPS,
    }


class _Sidecars:
    """A system monitor and a live rule engine on an empty job folder, as ``stepscope run``
    starts them (default interval and rules)."""

    def __init__(self, job_dir: Path) -> None:
        from stepscope.collect import start_monitor
        from stepscope.rules import start_rule_engine

        self._monitor = start_monitor(job_dir / "profiler-output")
        self._engine = start_rule_engine(job_dir)
        self._job_dir = job_dir

    def stop(self) -> None:
        from stepscope.store import write_job_end_marker

        write_job_end_marker(self._job_dir / "profiler-output")
        self._monitor.stop()
        self._engine.finish()


def _ms(run: dict) -> str:
    return "; ".join(
        f"{part} " + ", ".join(f"{m} {run[part][m] * 1e3:.3f}" for m in METRICS) for part in PARTS
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=6, help="pairs of runs (ABBA order)")
    parser.add_argument("--steps", type=int, default=1500, help="steps per run")
    parser.add_argument(
        "--skip-s", type=float, default=5.0, help="seconds after the first step that are 'start'"
    )
    parser.add_argument("--sidecars", action="store_true", help="add the monitor + rules side")
    args = parser.parse_args()
    print(f"load average at the start: {os.getloadavg()[0]:.2f}")
    sides = ["bare", "stepscope"] + (["sidecars"] if args.sidecars else [])
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory() as tmp:
        times_file = Path(tmp) / "times.json"
        train = [sys.executable, str(TRAIN_SCRIPT), str(args.steps), str(times_file)]
        for rep in range(args.reps):
            job_dir = Path(tmp) / f"job-{rep}"
            for side in sides if rep % 2 == 0 else reversed(sides):
                sidecars = None
                command = train
                if side == "stepscope":
                    run = [sys.executable, "-m", "stepscope", "run", "--job-dir", str(job_dir)]
                    command = [*run, "--", *train]
                elif side == "sidecars":
                    sidecars = _Sidecars(Path(tmp) / f"sidecars-{rep}")
                runs[side].append(_run(command, times_file, args.skip_s, sidecars))
                print(f"rep {rep + 1} {side}: {_ms(runs[side][-1])} ms", flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    start_steps = statistics.median(r["start steps"] for r in runs["bare"])
    print(
        f"'start' = the steps beginning in the first {args.skip_s:g} s after the first step, "
        f"the first {WARMUP_STEPS} excluded (median {start_steps:.0f} steps); 'steady' = the rest"
    )
    for side in sides[1:]:
        other = {
            key: statistics.median(r[f"{key} other CPU"] for r in runs[side])
            for key in ("before", *PARTS)
        }
        steady_pct = 100 * other["steady"] / statistics.median(r["steady s"] for r in runs[side])
        print(
            f"{side}: CPU of the other processes (medians): {other['before']:.2f} s before the "
            f"first step, {other['start']:.2f} s in the first {args.skip_s:g} s, "
            f"{steady_pct:.1f} % of a core after"
        )
        for part in PARTS:
            print(f"  {side}, {part}:")
            for metric in METRICS:
                b = statistics.median(r[part][metric] for r in runs["bare"])
                p = statistics.median(r[part][metric] for r in runs[side])
                ratios = sorted(
                    100 * (s[part][metric] / r[part][metric] - 1)
                    for s, r in zip(runs[side], runs["bare"], strict=True)
                )
                print(
                    f"    {metric}: bare {b * 1e3:.3f} ms, {side} {p * 1e3:.3f} ms, "
                    f"{100 * (p / b - 1):+.2f} %; paired ratios: median "
                    f"{statistics.median(ratios):+.2f} % ["
                    + ", ".join(f"{r:+.1f}" for r in ratios)
                    + "]"
                )


if __name__ == "__main__":
    main()
