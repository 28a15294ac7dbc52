"""Instructions per training step, counted by callgrind: the step-time targets without the noise.

Step times on a shared machine swing by ±20 % between processes, more than the 1 % targets.
Instruction counts do not depend on the load: each variant runs the training loop of
``cnn_training.py`` (the small CNN the step-time benchmarks use, one torch thread,
``PYTHONHASHSEED=0``) in a fresh process under ``valgrind --tool=callgrind``, twice: ``--warmup``
steps, then the variant's set-up and ``--steps`` steps (default 6 and 12 after 2; at least 6, as
``run_block`` does not time its first 5), then its tear-down. The difference of the two runs'
totals over the difference of their steps is the cost of one step: start-up, imports, warm-up, the
steps both runs share (``run`` gets at least 8 warm-up steps, so that its default windows, steps
5-12, lie in those), set-up and tear-down cancel out. Every thread of the training process counts
(the timeline writer's serialisation included), and its main thread, the one that trains, is also
counted alone (callgrind's ``--separate-threads``). Few steps, because under callgrind one step of this
CNN takes 8-15 s (torch's vectorised kernels run emulated): one callgrind run takes 3-6 minutes
(torch's import alone about 45 s).

* ``bare``: the loop, no profiling;
* ``default``, ``submodules``, ``torch_profiler``, ``torch_profiler_gz``, ``detailed``: the
  in-process variants of ``bench_instrumentation.py`` (its ``run_block``: the default config's
  hooks with every window out of range; the same with sub-module events; plain
  ``torch.profiler`` with a ``ProfilerStep#`` range per step, its trace saved as plain JSON, or
  gzipped by torch; stepscope's detailed window without sub-module events). The detailed window
  covers the first 100 steps of its session, so ``--steps`` must stay at most 100. Every
  profiler variant's count includes saving its trace when it stops (the trace grows with the
  steps, so saving it is part of the cost per step);
* ``run``: ``stepscope run`` at the defaults with valgrind inside it (``stepscope run --
  valgrind ... python ...``), so only the training process is counted, instrumented by the
  launcher's bootstrap as any job is; the system monitor and the live rule engine run natively
  beside it (their own CPU: ``bench_monitor.py`` and the ``stepscope run`` section of
  ``docs/benchmarks.md``).

Printed: each variant's instructions per step and its change against ``bare`` (``detailed`` against
``torch_profiler``); ``--repeat`` runs one variant a second time to show the counts repeat (they do
to about ±0.5 %, not exactly: most likely address-space randomisation moves where tensors land, and
the kernels' and the allocator's paths depend on it). Caveat: under callgrind a step runs about
1000x slower, so what is driven by time (the writer's flush every second, closing timeline files)
happens about 1000x more often per step than in a real run; the counts overstate those costs
(conservative). Four variants and a repeat (10 callgrind runs, ``--jobs 2`` at a time, at ``nice
10``) took 43 minutes on two busy cores; the default set (16 runs) takes over an hour.

    python bench/bench_instructions.py [--variants bare,default,...] [--steps 6,12]
        [--warmup 2] [--repeat bare] [--jobs 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench_instrumentation import BLOCK_WARMUP_STEPS

VARIANTS = (
    "bare",
    "default",
    "submodules",
    "torch_profiler",
    "torch_profiler_gz",
    "detailed",
    "run",
)
#: what each variant is compared with
BASELINE = {"detailed": "torch_profiler", "torch_profiler_gz": "torch_profiler"}
#: the targets, as changes against the baseline in %
TARGET_PCT = {"default": 1.0, "submodules": 3.0, "detailed": 0.0, "run": 1.0}

#: the least warm-up of ``run``: its default windows (steps 5-12) must end in the shared steps
RUN_WARMUP_STEPS = 8


def _child(variant: str, warmup: int, steps: int, work_dir: Path) -> None:
    """In the counted process: the warm-up steps, then ``steps`` steps of ``variant``."""
    from bench_instrumentation import run_block
    from cnn_training import Loop

    loop = Loop()
    loop.steps(warmup)
    # ``run_block``'s own untimed steps do not matter here: both counted runs take them
    run_block(variant, loop, steps, work_dir)


#: (every thread of the training process, its main thread: the training loop's)
Count = tuple[int, int]


def _count(variant: str, warmup: int, steps: int, tmp: Path) -> Count:
    """Instructions of one callgrind run of ``variant``: every thread of the training process,
    and its main thread alone (callgrind's profile of each thread, ``<out>-01`` the first)."""
    work_dir = Path(tempfile.mkdtemp(dir=tmp))
    out = work_dir / "callgrind.out"
    valgrind = [
        "nice",
        "-n",
        "10",
        "valgrind",
        "--tool=callgrind",
        "--separate-threads=yes",
        f"--callgrind-out-file={out}",
    ]
    inner = "bare" if variant == "run" else variant
    if variant == "run":
        warmup = max(warmup, RUN_WARMUP_STEPS)
    train = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        inner,
        str(warmup),
        str(steps),
        str(work_dir),
    ]
    command = valgrind + train
    if variant == "run":
        launcher = [sys.executable, "-m", "stepscope", "run", "--job-dir", str(work_dir / "job")]
        command = [*launcher, "--", *command]
    env = dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1")
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    threads = {
        int(path.name.rsplit("-", 1)[1]): _summary(path) for path in work_dir.glob(f"{out.name}-*")
    }
    if done.returncode != 0 or 1 not in threads:
        raise SystemExit(f"{variant} ({steps} steps) failed:\n{done.stderr[-3000:]}")
    count = (sum(threads.values()), threads[1])
    print(
        f"  {variant}, {steps} steps: {count[0]:,} instructions, {count[1]:,} on the main "
        f"thread ({len(threads)} threads)",
        flush=True,
    )
    return count


def _summary(profile: Path) -> int:
    """The instruction count of one thread's callgrind profile (its ``summary:`` line)."""
    with open(profile) as lines:
        for line in lines:
            if line.startswith("summary:"):
                return int(line.split()[1])
    raise SystemExit(f"{profile} has no summary line")


def _per_step(
    variants: list[str], warmup: int, steps: tuple[int, int], tmp: Path, jobs: int
) -> list[tuple[float, float]]:
    """Instructions per step of each of ``variants`` (in that order), every thread's and the
    main thread's: the difference of two runs over their steps. ``jobs`` callgrind runs at a
    time (the counts do not depend on it)."""
    t0 = time.monotonic()
    runs = [(variant, n) for variant in variants for n in steps]
    with ThreadPoolExecutor(jobs) as pool:
        counts = list(pool.map(lambda run: _count(run[0], warmup, run[1], tmp), runs))
    result = []
    for i, variant in enumerate(variants):
        short, long = counts[2 * i], counts[2 * i + 1]
        every, main = ((long[k] - short[k]) / (steps[1] - steps[0]) for k in (0, 1))
        result.append((every, main))
        print(
            f"{variant}: {short[0]:,} instructions ({steps[0]} steps), {long[0]:,} ({steps[1]} "
            f"steps): {every:,.0f} per step, {main:,.0f} on the main thread",
            flush=True,
        )
    print(f"({len(runs)} callgrind runs in {time.monotonic() - t0:.0f} s)", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    parser.add_argument("--steps", default="6,12", help="counted steps of the two runs")
    parser.add_argument("--warmup", type=int, default=2, help="steps before the counted ones")
    parser.add_argument("--repeat", default="bare", help="a variant to run twice ('' for none)")
    parser.add_argument("--jobs", type=int, default=2, help="callgrind runs at a time")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        variant, warmup, steps, work_dir = args.child
        _child(variant, int(warmup), int(steps), Path(work_dir))
        return
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants must name some of {', '.join(VARIANTS)}, got {unknown}")
    short, long = (int(n) for n in args.steps.split(","))
    if not BLOCK_WARMUP_STEPS < short < long <= 100:
        parser.error(
            f"--steps must be two step counts, 5 < first < second <= 100, got {args.steps}"
        )
    print(f"load average at the start: {os.getloadavg()[0]:.2f} (counts do not depend on it)")
    runs = variants + ([args.repeat] if args.repeat else [])
    with tempfile.TemporaryDirectory() as tmp:
        counts = _per_step(runs, args.warmup, (short, long), Path(tmp), args.jobs)
    per_step = dict(zip(variants, counts, strict=False))
    if args.repeat in per_step:
        again = counts[-1]
        print(f"repeat of {args.repeat}: {_changes(again, per_step[args.repeat])} from the first")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    for variant, count in per_step.items():
        base = BASELINE.get(variant, "bare")
        if variant == base or base not in per_step:
            print(f"{variant}: {count[0]:,.0f} instructions per step ({count[1]:,.0f} main thread)")
            continue
        target = f" (target <= {TARGET_PCT[variant]:+.0f} %)" if variant in TARGET_PCT else ""
        print(f"{variant} vs {base}: {_changes(count, per_step[base])}{target}")


def _changes(count: tuple[float, float], base: tuple[float, float]) -> str:
    """Per-step counts and their change from ``base``: every thread's, then the main thread's."""
    return "; ".join(
        f"{label} {count[k]:,.0f} per step, {100 * (count[k] / base[k] - 1):+.2f} % "
        f"({count[k] - base[k]:+,.0f})"
        for k, label in ((0, "every thread"), (1, "main thread"))
    )


if __name__ == "__main__":
    main()
