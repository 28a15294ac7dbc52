"""Step time breakdown: precedence on a hand-computed trace, and consistency on real traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest
from tests.analysis import _kineto_synthetic as synthetic

from stepscope.analysis import step_time_breakdown
from stepscope.analysis.step_breakdown import STEP_CATEGORIES


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return synthetic.open_synthetic_job(tmp_path_factory.mktemp("synthetic"))


def test_each_instant_counts_once_in_the_highest_category(job):
    rows = step_time_breakdown(job).set_index("step")
    # Step 1 (window 0-100): kernel 20-50; memcpy 70-75; collective kernel 40-80 and the
    # nccl:all_reduce range 40-60 minus the two above = 50-70 and 75-80; runtime 15-20 (its
    # other calls lie under GPU work); data loader 0-10; aten::mm 10-40 minus everything
    # above = 10-15; nothing recorded 80-100.
    assert rows.loc[1, list(STEP_CATEGORIES)].tolist() == [30, 5, 0, 25, 5, 10, 5, 20]
    assert rows.loc[1, "duration_us"] == 100
    # Step 2 ends when its last kernel ends (220), after the host range (200): kernels
    # 170-180 and 190-220; memset 150-160; runtime 110-115, 121-125, 131-134 (cuLaunchKernel);
    # CPU ops 105-110, 115-120, 130-131, 134-135; the rest is other.
    assert rows.loc[2, "duration_us"] == 120
    assert rows.loc[2, list(STEP_CATEGORIES)].tolist() == [40, 0, 10, 0, 12, 0, 12, 46]


def test_path_input_gives_the_same_rows(job, tmp_path):
    path = synthetic.write_trace(tmp_path)
    from_path = step_time_breakdown(path)
    assert from_path[list(STEP_CATEGORIES)].equals(step_time_breakdown(job)[list(STEP_CATEGORIES)])


def test_two_profiling_sessions_of_one_rank_keep_their_own_steps(job, tmp_path):
    # The same rank profiled twice (two profilers, or a relaunch) into one folder: both traces
    # number their steps 1 and 2, the second one starts 10 ms later.
    from stepscope.store import open_job

    synthetic.write_trace(tmp_path, "first_rank-0.pt.trace.json.gz")
    synthetic.write_trace(tmp_path, "second_rank-0.pt.trace.json.gz", shift_us=10_000)
    rows = step_time_breakdown(open_job(tmp_path, cache_dir=tmp_path / "cache"))
    single = step_time_breakdown(job)
    assert rows["step"].tolist() == [1, 2, 1, 2]
    assert rows["duration_us"].tolist() == single["duration_us"].tolist() * 2
    columns = list(STEP_CATEGORIES)
    assert rows[columns].values.tolist() == single[columns].values.tolist() * 2


def test_real_trace_parts_sum_to_each_step(shared_fixtures, tmp_path):
    from stepscope.store import open_job

    job = open_job(shared_fixtures / "kineto" / "a100_rank0of2_nccl.json.gz", cache_dir=tmp_path)
    rows = step_time_breakdown(job)
    assert rows["step"].tolist() == [4, 5, 6]
    parts = rows[list(STEP_CATEGORIES)]
    assert (parts >= 0).all().all()
    assert (parts.sum(axis=1) - rows["duration_us"]).abs().max() < 1e-6
    # An NCCL job: every step spends time in kernels and in collectives.
    assert (rows["kernel"] > 0).all() and (rows["communication"] > 0).all()


def _plugin_step_windows(trace: Path) -> list[tuple[float, float]]:
    """The TensorBoard plugin's step windows, from the raw events: a step ends when the host
    range or the last GPU work launched inside it ends, whichever is later, and the next step
    starts at that end or at its own host start, whichever is later."""
    with gzip.open(trace, "rt") as handle:
        events = [e for e in json.load(handle)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e["name"].startswith("ProfilerStep#") and e["cat"] == "user_annotation"
    )
    launched = {e["args"]["correlation"]: e["ts"] for e in events if e["cat"] == "cuda_runtime"}
    gpu_end = [0.0] * len(steps)
    for e in events:
        launch = launched.get(e.get("args", {}).get("correlation"))
        if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset") and launch is not None:
            for i, (host_start, host_end) in enumerate(steps):
                if host_start <= launch <= host_end:
                    gpu_end[i] = max(gpu_end[i], e["ts"] + e["dur"])
    windows, previous_end = [], steps[0][0]
    for (host_start, host_end), end in zip(steps, gpu_end, strict=True):
        start = max(previous_end, host_start)
        previous_end = max(host_end, end, start)
        windows.append((start, previous_end))
    return windows


def test_gpu_bound_steps_end_with_their_gpu_work_as_in_the_plugin(shared_fixtures, tmp_path):
    # On this V100 trace the GPU runs a step behind the CPU: every step's kernels end about
    # 90 ms after its host range. Cut at the next host step, step 101 looked 35 ms long and the
    # last step 185 ms, twice the others.
    from stepscope.store import open_job

    trace = shared_fixtures / "kineto" / "v100_single_ns_resolution.pt.trace.json.gz"
    rows = step_time_breakdown(open_job(trace, cache_dir=tmp_path))
    expected = _plugin_step_windows(trace)
    assert rows["duration_us"].tolist() == pytest.approx([e - s for s, e in expected], abs=1.0)
    parts = rows[list(STEP_CATEGORIES)]
    assert (parts.sum(axis=1) - rows["duration_us"]).abs().max() < 1e-6


def test_trace_without_profiler_steps_gives_no_rows(shared_fixtures, tmp_path):
    from stepscope.store import open_job

    job = open_job(
        shared_fixtures / "kineto" / "a100_alexnet_cuda_sync.json.gz", cache_dir=tmp_path
    )
    rows = step_time_breakdown(job)
    assert rows.empty
    assert list(rows.columns) == ["rank", "step", "start_us", "duration_us", *STEP_CATEGORIES]


def test_one_rank_of_two_is_that_ranks_rows(shared_fixtures, tmp_path):
    from stepscope.store import open_job

    job = open_job(shared_fixtures / "kineto" / "two_ranks_one_job", cache_dir=tmp_path)
    every = step_time_breakdown(job)
    one = step_time_breakdown(job, rank=1)
    assert set(one["rank"]) == {1}
    pd.testing.assert_frame_equal(one, every[every["rank"] == 1].reset_index(drop=True))
