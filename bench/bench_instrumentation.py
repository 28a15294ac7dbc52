"""Cost of the PyTorch instrumentation per training step, and of one annotation.

Side by side in one run and one process: the variants take turns in blocks of ``--block``
steps (in a new random order every round, ``--rounds`` rounds), so a busy machine slows them all
alike; each block starts with a few untimed steps, and set-up and tear-down (starting a session,
writing a trace) are outside the timing. The machine drifts over a run (the same loop's step
moves by 10 %), so each comparison is also given as the median over rounds of that round's ratio
(both medians taken within the same round, seconds apart). Reported for each variant: the median
step in wall time, in CPU time of the training thread (``time.thread_time``: what the hooks cost
the step, steadier than wall time on a busy machine) and in CPU time of the whole process per
step (each block's ``time.process_time`` over its timed steps, median over the blocks: the writer
thread's serialisation and the trace export count there).

* ``bare``: the training loop, no profiling;
* ``bare_again``: the same loop, timed as a variant of its own: the A/A comparison, how far
  apart two identical variants come out in this run (the resolution of the others' figures);
* ``default``: every option of ``FrameworkProfile`` configured but outside its range (the steady
  state of a job: SageMaker's default windows are a few early steps) - target: at most 1 % slower
  than bare;
* ``submodules``: the same plus every sub-module's forward and backward - target: at most 3 %;
* ``torch_profiler``: a plain ``torch.profiler.profile(activities=[CPU])`` with a
  ``ProfilerStep#`` range per step, its trace saved as plain JSON when it stops (as
  ``tensorboard_trace_handler`` saves it by default); ``torch_profiler_gz`` (instruction counts
  only) saves it gzipped, by ``export_chrome_trace`` to a ``.json.gz`` name;
* ``detailed``: stepscope's detailed window (the same activity and ranges, plus the step, forward
  and backward events; sub-module events off, ``submodules`` prices them) - target: no slower
  than ``torch_profiler``;
* ``detailed_submodules``: the same window as a job gets it by default, with sub-module events
  (on inside detailed windows unless configured otherwise).

First, micro-benchmarks in process CPU time (robust to a busy machine), printed as multiples of
an empty Python call measured in the same process: ``stepscope.annotate`` (enter + exit) outside a
session; in a session with a writer that discards events (what the caller pays, the burst
conversion included); in a session with the real writer (plus the writer thread's serialisation,
which shares the GIL); inside a detailed window (where it also opens a ``record_function``). Then
the forward pre- and post-hooks per module call of a model of 33 modules (torch's hook dispatch
included), default config and with sub-module events; and a whole training step of a 3-module
model (forward, loss, backward, optimizer step), bare, default config and with sub-module events:
so small a step makes the instrumentation's fixed cost per step (hooks, step bookkeeping, events
and the writer thread) measurable, to compare with the step time of a real model. Target: an
annotation well under 2 µs outside a detailed window.

The step loop runs with glibc's heap thresholds fixed (``--malloc fixed``, the default: the script
starts itself again with ``GLIBC_TUNABLES`` set). With glibc's own dynamic thresholds, a block's
steps either reuse the heap or trim it and fault it in again at every step (hundreds of page
faults, up to a fifth of the step), as the process's allocation history has it, whatever the
variant. Each variant's page faults per step are printed, so a variant that made the heap work
harder would still show; ``--malloc system`` keeps glibc's defaults.

    python bench/bench_instrumentation.py [--rounds 8] [--block 25] [--batch 32] [--micro-only]
        [--malloc fixed|system]
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cnn_training import Loop, Times

VARIANTS = (
    "bare",
    "bare_again",
    "default",
    "submodules",
    "torch_profiler",
    "detailed",
    "detailed_submodules",
)
#: glibc's heap kept once grown (trimmed above 1 GiB of free top) and large blocks taken from the
#: heap up to 32 MiB: the thresholds glibc's dynamic ones reach, without their swings
FIXED_MALLOC_TUNABLES = (
    "glibc.malloc.trim_threshold=1073741824",
    "glibc.malloc.mmap_threshold=33554432",
)
#: untimed steps at the start of every block (allocator and cache warm-up after a switch)
BLOCK_WARMUP_STEPS = 5


def _config(variant: str) -> Any:
    from stepscope.config import DetailedProfilingConfig, FrameworkProfile, ProfilerConfig

    if variant.startswith("detailed"):
        detailed = DetailedProfilingConfig(start_step=0, num_steps=100)
        return ProfilerConfig(
            framework_profile_params=FrameworkProfile(detailed_profiling_config=detailed)
        )
    # every option on, its range far away: the hooks of the default config, outside its windows
    return ProfilerConfig(framework_profile_params=FrameworkProfile(start_step=10**9, num_steps=1))


def run_block(variant: str, loop: Loop, steps: int, work_dir: Path) -> Times:
    """One block of ``variant``: set up, time ``steps`` steps, tear down."""
    if variant in ("bare", "bare_again"):
        return loop.block(steps, step_ranges=False, warmup_steps=BLOCK_WARMUP_STEPS)
    if variant.startswith("torch_profiler"):
        torch = loop.torch
        profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        profiler.start()
        times = loop.block(steps, step_ranges=True, warmup_steps=BLOCK_WARMUP_STEPS)
        profiler.stop()
        # saved as users save it (untimed here; counted by bench_instructions.py), like
        # stepscope's window, which writes its trace when it closes
        work_dir.mkdir(parents=True, exist_ok=True)
        suffix = ".json.gz" if variant == "torch_profiler_gz" else ".json"
        profiler.export_chrome_trace(str(work_dir / f"plain.pt.trace{suffix}"))
        return times
    from stepscope.collect.session import Session
    from stepscope.collect.torch import instrument

    session = Session(_config(variant), work_dir / "profiler-output").start()
    try:
        # like for like: the ``detailed`` window without its sub-module events (``submodules``
        # measures those on their own); ``detailed_submodules`` keeps the default (on in the window)
        submodules = {"submodules": True, "detailed_submodules": None}.get(variant, False)
        instrument(session, submodules=submodules)
        return loop.block(steps, step_ranges=False, warmup_steps=BLOCK_WARMUP_STEPS)
    finally:
        _stop(session)


def _stop(session: Any) -> None:
    """Stop ``session`` and end its post-hook-close cProfile window at once: left open (to the
    end of the interpreter, as SageMaker's), it would profile the blocks and micro-benchmarks that
    follow, which run no session (``bare``, ``torch_profiler``) or start with a bare reference."""
    from stepscope.collect.torch.python_profiling import end_post_hook_close_window

    session.stop()
    end_post_hook_close_window()


class _NullWriter:
    """Accepts and forgets events: isolates what an annotation costs its caller."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def write_events(self, events: list[object]) -> int:
        return len(events)

    def close(self) -> None:
        pass


def _cpu_ns_per_call(function: Callable[[], object], n: int = 20_000, repeats: int = 9) -> float:
    """Median CPU time (every thread of the process) of one ``function()`` call, in ns."""
    for _ in range(2_000):  # warm up: the writer opens, the store is imported
        function()
    samples = []
    for _ in range(repeats):
        t0 = time.process_time_ns()
        for _ in range(n):
            function()
        samples.append((time.process_time_ns() - t0) / n)
    return statistics.median(samples)


def _annotation_cost_ns(work_dir: Path) -> dict[str, float]:
    """CPU ns of one ``with stepscope.annotate(...)``, by where it runs."""
    import stepscope
    from stepscope.collect.session import Session

    def annotation() -> None:
        with stepscope.annotate("a"):
            pass

    result = {"outside a session": _cpu_ns_per_call(annotation)}
    for label, factory in (("in a session, caller only", _NullWriter), ("in a session", None)):
        session = Session(
            _config("default"), work_dir / label / "profiler-output", writer_factory=factory
        ).start()
        try:
            result[label] = _cpu_ns_per_call(annotation)
            if factory is None:
                from torch.profiler import ProfilerActivity, profile, record_function

                with profile(activities=[ProfilerActivity.CPU]):
                    session.record_function = record_function
                    result["in a detailed window"] = _cpu_ns_per_call(annotation, n=2_000)
                    session.record_function = None
        finally:
            _stop(session)
    return result


#: sub-modules of the model that prices the forward hooks
HOOKED_SUBMODULES = 32


def _module_hook_cost_ns(work_dir: Path) -> dict[str, float]:
    """CPU ns the forward pre- and post-hooks add to one sub-module call (the model's own
    step bookkeeping spread over its sub-modules), default config and with sub-module events."""
    import torch

    from stepscope.collect.session import Session
    from stepscope.collect.torch import instrument

    model = torch.nn.Sequential(
        torch.nn.Linear(1, 1), *(torch.nn.Identity() for _ in range(HOOKED_SUBMODULES))
    ).eval()
    x = torch.zeros(1, 1)

    def forward() -> None:
        with torch.no_grad():
            model(x)

    bare_ns = _cpu_ns_per_call(forward, n=2_000)
    result = {}
    for label, submodules in (("default", False), ("with sub-module events", True)):
        session = Session(
            _config("default"), work_dir / label / "profiler-output", writer_factory=_NullWriter
        ).start()
        try:
            instrument(session, submodules=submodules)
            result[label] = (_cpu_ns_per_call(forward, n=2_000) - bare_ns) / (HOOKED_SUBMODULES + 1)
        finally:
            _stop(session)
    return result


def _train_step_cost_ns(work_dir: Path) -> dict[str, float]:
    """CPU ns one whole training step of a tiny model costs (forward, loss, backward, optimizer
    step), bare and in a session: with a model that small, what the instrumentation adds per
    step (hooks, step bookkeeping, events, the writer thread) stands out of the noise."""
    import torch

    from stepscope.collect.session import Session
    from stepscope.collect.torch import instrument

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(4, 8), torch.randn(4, 1)

    def step() -> None:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        optimizer.step()

    result = {}
    for label, submodules in (("bare", None), ("default", False), ("with sub-module events", True)):
        if submodules is None:
            result[label] = _cpu_ns_per_call(step, n=2_000)
            continue
        session = Session(_config("default"), work_dir / f"step-{label}" / "profiler-output")
        session.start()
        try:
            instrument(session, submodules=submodules)
            result[label] = _cpu_ns_per_call(step, n=2_000)
        finally:
            _stop(session)
    return result


def _python_calls_per_step(work_dir: Path, steps: int = 50) -> dict[str, float]:
    """Python-level calls (``sys.setprofile`` call and c_call events) one training step of the
    step-time benchmark's CNN makes on the training thread: deterministic, whatever the load
    (the writer thread's work is not counted)."""
    import sys

    from stepscope.collect.session import Session
    from stepscope.collect.torch import instrument

    loop = Loop()
    x, y = next(iter(loop.loader))
    torch = loop.torch

    def step() -> None:
        loss = torch.nn.functional.cross_entropy(loop.model(x), y)
        loop.optimizer.zero_grad()
        loss.backward()
        loop.optimizer.step()

    def count() -> float:
        calls = 0

        def on_event(frame: object, event: str, arg: object) -> None:
            nonlocal calls
            if event in ("call", "c_call"):
                calls += 1

        for _ in range(BLOCK_WARMUP_STEPS):
            step()
        sys.setprofile(on_event)
        try:
            for _ in range(steps):
                step()
        finally:
            sys.setprofile(None)
        return calls / steps

    result = {"bare": count()}
    for label, submodules in (("default", False), ("with sub-module events", True)):
        session = Session(_config("default"), work_dir / f"calls-{label}" / "profiler-output")
        session.start()
        try:
            instrument(session, submodules=submodules)
            result[label] = count()
        finally:
            _stop(session)
    return result


def _micro(work_dir: Path) -> None:
    """Print the micro-benchmarks as multiples of an empty Python call's CPU time."""
    empty_ns = _cpu_ns_per_call(lambda: None)
    print(f"an empty Python call: {empty_ns:.1f} ns CPU (the unit below)")
    for where, ns in _annotation_cost_ns(work_dir).items():
        print(f"annotate() enter+exit, {where}: {ns / empty_ns:.1f} empty calls ({ns:.0f} ns)")
    for label, ns in _module_hook_cost_ns(work_dir).items():
        print(
            f"forward hooks per sub-module call, {label}: {ns / empty_ns:.1f} empty calls "
            f"({ns:.0f} ns)"
        )
    calls = _python_calls_per_step(work_dir)
    for label, per_step in calls.items():
        added = "" if label == "bare" else f", {per_step - calls['bare']:+.0f} added"
        print(f"Python calls per CNN training step, {label}: {per_step:.0f}{added}")
    steps = _train_step_cost_ns(work_dir)
    for label, ns in steps.items():
        added = "" if label == "bare" else f", {(ns - steps['bare']) / 1e3:+.1f} µs added"
        print(
            f"a training step of a 3-module model, {label}: {ns / empty_ns:.0f} empty calls "
            f"({ns / 1e3:.1f} µs{added})"
        )


def _paired(
    rounds: list[dict[str, dict[str, float]]], variant: str, base: str, metric: str
) -> float:
    """The median over rounds of ``variant``'s ``metric`` over ``base``'s in the same round."""
    return statistics.median(r[variant][metric] / r[base][metric] for r in rounds)


def _restart_with_fixed_malloc() -> None:
    """Start this script again with :data:`FIXED_MALLOC_TUNABLES` (glibc only; once)."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if platform.libc_ver()[0] != "glibc" or FIXED_MALLOC_TUNABLES[0] in tunables:
        return
    tunables = ":".join(filter(None, (tunables, *FIXED_MALLOC_TUNABLES)))
    sys.stdout.flush()
    os.execve(
        sys.executable, [sys.executable, *sys.argv], {**os.environ, "GLIBC_TUNABLES": tunables}
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--block", type=int, default=25, help="steps per block")
    parser.add_argument(
        "--batch",
        type=int,
        default=32,
        help="the step loop's batch size (a larger one makes a longer step; default 32)",
    )
    parser.add_argument(
        "--micro-only", action="store_true", help="only the annotation and hook micro-benchmarks"
    )
    parser.add_argument(
        "--malloc",
        choices=("fixed", "system"),
        default="fixed",
        help="glibc's heap thresholds: fixed (default) or the system's dynamic ones",
    )
    args = parser.parse_args()
    if args.malloc == "fixed":
        _restart_with_fixed_malloc()
    print(f"GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '')}")
    # first, while no thread of the training loop runs: CPU time counts every thread
    with tempfile.TemporaryDirectory() as tmp:
        _micro(Path(tmp))
    if args.micro_only:
        return
    loop = Loop(batch_size=args.batch)
    times = {v: Times() for v in VARIANTS}
    #: per round: variant -> that round's medians (ms), for drift-free paired ratios
    rounds: list[dict[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        loop.block(10, step_ranges=False, warmup_steps=0)
        for round_ in range(args.rounds):
            # a fresh random order each round: what a variant leaves behind (a stopped profiler's
            # memory, a trace being freed) must not always land on the same successor
            order = list(VARIANTS)
            random.Random(round_).shuffle(order)
            this_round = {}
            for variant in order:
                gc.collect()
                work_dir = Path(tmp) / f"{round_}-{variant}"
                block = run_block(variant, loop, args.block, work_dir)
                times[variant].extend(block)
                this_round[variant] = block.medians_ms()
            rounds.append(this_round)
            medians = ", ".join(f"{v} {times[v].medians_ms()['thread CPU']:.2f}" for v in VARIANTS)
            print(f"round {round_ + 1}: running thread-CPU medians (ms) {medians}", flush=True)
    print(
        f"load average {os.getloadavg()[0]:.2f} at the end; timed steps per variant: "
        f"{len(times['bare'].wall_s)}"
    )
    step = {v: t.medians_ms() for v, t in times.items()}
    for metric in ("wall", "thread CPU", "process CPU"):
        print(
            f"median step, {metric}: "
            + ", ".join(f"{v} {step[v][metric]:.3f} ms" for v in VARIANTS)
        )
    print(
        "minor page faults per step, training thread: "
        + ", ".join(f"{v} {times[v].mean_faults():.1f}" for v in VARIANTS)
    )
    comparisons: list[tuple[str, str, str]] = [
        ("bare_again", "bare", "none: identical loops, the resolution of this run"),
        ("default", "bare", "<= +1 %"),
        ("submodules", "bare", "<= +3 %"),
        ("detailed", "torch_profiler", "<= +0 %"),
        ("detailed_submodules", "torch_profiler", "none: the default sub-module setting"),
    ]
    print("change (of the medians over all rounds; median of the per-round ratios):")
    for variant, base, target in comparisons:
        changes = ", ".join(
            f"{metric} {100 * (step[variant][metric] / step[base][metric] - 1):+.2f} %; "
            + f"{100 * (_paired(rounds, variant, base, metric) - 1):+.2f} %"
            for metric in ("wall", "thread CPU", "process CPU")
        )
        print(f"  {variant} vs {base}: {changes} (target {target})")


if __name__ == "__main__":
    main()
