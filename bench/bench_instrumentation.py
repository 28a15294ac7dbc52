"""Cost of the PyTorch instrumentation per training step, and of one annotation.

Side by side in one run, each variant in a fresh process, variants interleaved over ``--reps``
rounds; each process times its own steps with ``perf_counter`` and reports its median:

* ``bare``: the training loop, no profiling;
* ``default``: a session with ``FrameworkProfile()`` (SageMaker's defaults: steps, forward and
  backward always; data loader at step 7, detailed at 5, Python at 9-11; the median ignores those
  few steps) - target: at most 1 % slower than bare;
* ``submodules``: the same plus every sub-module's forward and backward - target: at most 3 %;
* ``torch_profiler``: a plain ``torch.profiler.profile(activities=[CPU])`` around every step;
* ``detailed``: stepscope's detailed window (the same activity) around every step - target: no
  slower than ``torch_profiler``.

Then the cost of ``stepscope.annotate`` (enter + exit): outside a session; in a session with a
writer that discards events (what the caller pays); in a session with the real writer (the
caller plus the writer thread's serialisation, which shares the GIL); inside a detailed window
(where it also opens a ``record_function``). An empty Python call is printed as the machine's
reference. Target: well under 2 µs outside a detailed window.

    python bench/bench_instrumentation.py [--reps 5] [--steps 300]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = ("bare", "default", "submodules", "torch_profiler", "detailed")
WARMUP_STEPS = 20


def _config(variant: str) -> object:
    from stepscope.config import DetailedProfilingConfig, FrameworkProfile, ProfilerConfig

    if variant == "detailed":
        detailed = DetailedProfilingConfig(start_step=0, num_steps=100_000)
        return ProfilerConfig(
            framework_profile_params=FrameworkProfile(detailed_profiling_config=detailed)
        )
    return ProfilerConfig(framework_profile_params=FrameworkProfile())


def _train(variant: str, steps: int, out: Path, work_dir: Path) -> None:
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    session = None
    if variant not in ("bare", "torch_profiler"):
        from stepscope.collect.session import Session
        from stepscope.collect.torch import instrument

        session = Session(_config(variant), work_dir / "profiler-output").start()
        instrument(session, submodules=True if variant == "submodules" else None)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(512, 3, 32, 32), torch.randint(0, 10, (512,)))
    loader = torch.utils.data.DataLoader(data, batch_size=32, shuffle=True)
    profiler = None
    if variant == "torch_profiler":
        profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        profiler.start()
    times: list[float] = []
    step = 0
    iterator = iter(loader)
    while step < steps:
        t0 = time.perf_counter()
        try:
            x, y = next(iterator)
        except StopIteration:
            iterator = iter(loader)
            x, y = next(iterator)
        if profiler is not None:
            step_range = torch.profiler.record_function(f"ProfilerStep#{step}")
            step_range.__enter__()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if profiler is not None:
            step_range.__exit__(None, None, None)
        times.append(time.perf_counter() - t0)
        step += 1
    if profiler is not None:
        profiler.stop()
    if session is not None:
        session.stop()
    out.write_text(json.dumps(statistics.median(times[WARMUP_STEPS:])))


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
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--annotations", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        _train(args.variant, args.steps, args.out, args.work_dir)
        return
    if args.annotations:
        args.out.write_text(json.dumps(_annotation_cost_ns(args.work_dir)))
        return
    medians: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "median.json"
        for rep in range(args.reps):
            for variant in VARIANTS:
                command = [sys.executable, __file__, "--variant", variant, "--steps"]
                command += [
                    str(args.steps),
                    "--out",
                    str(out),
                    "--work-dir",
                    f"{tmp}/{rep}-{variant}",
                ]
                subprocess.run(command, check=True)
                medians[variant].append(json.loads(out.read_text()))
            line = ", ".join(f"{v} {medians[v][-1] * 1e3:.2f} ms" for v in VARIANTS)
            print(f"rep {rep + 1}: {line}", flush=True)
        command = [sys.executable, __file__, "--annotations", "--out", str(out)]
        subprocess.run(command + ["--work-dir", tmp], check=True)
        annotation = json.loads(out.read_text())
    step = {v: statistics.median(m) for v, m in medians.items()}
    print("median step time: " + ", ".join(f"{v} {t * 1e3:.3f} ms" for v, t in step.items()))
    for variant, base, target in (
        ("default", "bare", "<= +1 %"),
        ("submodules", "bare", "<= +3 %"),
        ("detailed", "torch_profiler", "<= +0 %"),
    ):
        print(
            f"{variant} vs {base}: {100 * (step[variant] / step[base] - 1):+.2f} % (target {target})"
        )
    for where, ns in annotation.items():
        print(f"annotate() enter+exit, {where}: {ns / 1000:.3f} µs")


if __name__ == "__main__":
    main()
