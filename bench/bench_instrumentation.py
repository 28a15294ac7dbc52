"""Cost of the PyTorch instrumentation per training step, and of one annotation.

Side by side in one run and one process: the variants take turns in blocks of ``--block`` steps
(in a new random order every round, ``--rounds`` rounds), so a busy machine slows them all alike; each
block starts with a few untimed steps, and set-up and tear-down (starting a session, writing a
trace) are outside the timing. Reported: the median step time of each variant.

* ``bare``: the training loop, no profiling;
* ``default``: every option of ``FrameworkProfile`` configured but outside its range (the steady
  state of a job: SageMaker's default windows are a few early steps) - target: at most 1 % slower
  than bare;
* ``submodules``: the same plus every sub-module's forward and backward - target: at most 3 %;
* ``torch_profiler``: a plain ``torch.profiler.profile(activities=[CPU])`` with a
  ``ProfilerStep#`` range per step;
* ``detailed``: stepscope's detailed window (the same activity and ranges, plus the step, forward
  and backward events; sub-module events off, ``submodules`` prices them) - target: no slower
  than ``torch_profiler``.

Then the cost of ``stepscope.annotate`` (enter + exit): outside a session; in a session with a
writer that discards events (what the caller pays); in a session with the real writer (the
caller plus the writer thread's serialisation, which shares the GIL); inside a detailed window
(where it also opens a ``record_function``). An empty Python call is printed as the machine's
reference. Target: well under 2 µs outside a detailed window.

    python bench/bench_instrumentation.py [--rounds 8] [--block 25]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

VARIANTS = ("bare", "default", "submodules", "torch_profiler", "detailed")
#: untimed steps at the start of every block (allocator and cache warm-up after a switch)
BLOCK_WARMUP_STEPS = 5


def _config(variant: str) -> Any:
    from stepscope.config import DetailedProfilingConfig, FrameworkProfile, ProfilerConfig

    if variant == "detailed":
        detailed = DetailedProfilingConfig(start_step=0, num_steps=100)
        return ProfilerConfig(
            framework_profile_params=FrameworkProfile(detailed_profiling_config=detailed)
        )
    # every option on, its range far away: the hooks of the default config, outside its windows
    return ProfilerConfig(framework_profile_params=FrameworkProfile(start_step=10**9, num_steps=1))


class _Loop:
    """The training loop the variants share (a small CNN on in-memory data, one thread)."""

    def __init__(self) -> None:
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
            torch.randn(512, 3, 32, 32), torch.randint(0, 10, (512,))
        )
        self.loader = torch.utils.data.DataLoader(data, batch_size=32, shuffle=True)

    def block(self, steps: int, step_ranges: bool) -> list[float]:
        torch = self.torch
        times = []
        iterator = iter(self.loader)
        for step in range(steps):
            t0 = time.perf_counter()
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
            times.append(time.perf_counter() - t0)
        return times[BLOCK_WARMUP_STEPS:]


def _run_block(variant: str, loop: _Loop, steps: int, work_dir: Path) -> list[float]:
    """One block of ``variant``: set up, time ``steps`` steps, tear down."""
    if variant == "bare":
        return loop.block(steps, step_ranges=False)
    if variant == "torch_profiler":
        torch = loop.torch
        profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        profiler.start()
        times = loop.block(steps, step_ranges=True)
        profiler.stop()
        return times
    from stepscope.collect.session import Session
    from stepscope.collect.torch import instrument

    session = Session(_config(variant), work_dir / "profiler-output").start()
    try:
        # like for like: the detailed window without its sub-module events (``submodules``
        # measures those on their own)
        instrument(session, submodules=variant == "submodules")
        return loop.block(steps, step_ranges=False)
    finally:
        session.stop()


class _NullWriter:
    """Accepts and forgets events: isolates what an annotation costs its caller."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def write_event(self, *args: object, **kwargs: object) -> bool:
        return True

    def close(self) -> None:
        pass


def _annotation_cost_ns(work_dir: Path, n: int = 100_000) -> dict[str, float]:
    import stepscope
    from stepscope.collect.session import Session

    def per_call_ns(function: object) -> float:
        for _ in range(2_000):  # warm up: the writer opens, the store is imported
            function()  # type: ignore[operator]
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter_ns()
            for _ in range(n // 5):
                function()  # type: ignore[operator]
            best = min(best, (time.perf_counter_ns() - t0) / (n // 5))
        return best

    def annotation() -> None:
        with stepscope.annotate("a"):
            pass

    result = {
        "an empty Python call (reference)": per_call_ns(lambda: None),
        "outside a session": per_call_ns(annotation),
    }
    for label, factory in (("in a session, caller only", _NullWriter), ("in a session", None)):
        session = Session(
            _config("default"), work_dir / label / "profiler-output", writer_factory=factory
        ).start()
        try:
            result[label] = per_call_ns(annotation)
            if factory is None:
                from torch.profiler import ProfilerActivity, profile, record_function

                with profile(activities=[ProfilerActivity.CPU]):
                    session.record_function = record_function
                    result["in a detailed window"] = per_call_ns(annotation)
                    session.record_function = None
        finally:
            session.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--block", type=int, default=25, help="steps per block")
    args = parser.parse_args()
    loop = _Loop()
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        loop.block(10, step_ranges=False)
        for round_ in range(args.rounds):
            # a fresh random order each round: what a variant leaves behind (a stopped profiler's
            # memory, a trace being freed) must not always land on the same successor
            order = list(VARIANTS)
            random.Random(round_).shuffle(order)
            for variant in order:
                gc.collect()
                work_dir = Path(tmp) / f"{round_}-{variant}"
                times[variant] += _run_block(variant, loop, args.block, work_dir)
            medians = ", ".join(f"{v} {statistics.median(times[v]) * 1e3:.2f}" for v in VARIANTS)
            print(f"round {round_ + 1}: running medians (ms) {medians}", flush=True)
        annotation = _annotation_cost_ns(Path(tmp))
    step = {v: statistics.median(t) for v, t in times.items()}
    print(f"timed steps per variant: {len(times['bare'])}")
    print("median step time: " + ", ".join(f"{v} {t * 1e3:.3f} ms" for v, t in step.items()))
    comparisons: list[tuple[str, str, str]] = [
        ("default", "bare", "<= +1 %"),
        ("submodules", "bare", "<= +3 %"),
        ("detailed", "torch_profiler", "<= +0 %"),
    ]
    for variant, base, target in comparisons:
        print(
            f"{variant} vs {base}: {100 * (step[variant] / step[base] - 1):+.2f} % (target {target})"
        )
    for where, ns in annotation.items():
        print(f"annotate() enter+exit, {where}: {ns / 1000:.3f} µs")


if __name__ == "__main__":
    main()
