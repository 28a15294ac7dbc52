"""GPU active time, the TensorBoard plugin's GPU utilization / SM efficiency, and their timelines.

The 2021 fixture pairs a trace with the counter events the TensorBoard plugin wrote for it. Its
own test says those values were scaled for display ("real data values are 1/100" for
utilization and "1/10" for SM efficiency), so the test divides them back.
"""

from __future__ import annotations

import json

import pytest
from tests.analysis import _kineto_synthetic as synthetic

from stepscope.analysis import (
    gpu_active_time,
    gpu_utilization,
    gpu_utilization_timeline,
    sm_efficiency_timeline,
)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return synthetic.open_synthetic_job(tmp_path_factory.mktemp("synthetic"))


@pytest.fixture(scope="module")
def legacy(shared_fixtures, tmp_path_factory):
    from stepscope.store import open_job

    folder = shared_fixtures / "kineto"
    job = open_job(
        folder / "legacy_2021_gpu_metrics_input.json", cache_dir=tmp_path_factory.mktemp("c")
    )
    expected = json.loads((folder / "legacy_2021_gpu_metrics_expected.json").read_text())
    return job, expected["traceEvents"]


def test_active_time_is_the_union_of_busy_intervals(job):
    row = gpu_active_time(job).iloc[0]
    # 20-80 (sgemm, nccl and memcpy overlap), 150-160, 170-180, 190-220 over 20-220.
    assert (row["device"], row["span_us"], row["active_us"], row["idle_us"]) == (0, 200, 110, 90)
    assert row["active_pct"] == pytest.approx(55)


def test_utilization_counts_kernels_inside_the_steps(job):
    row = gpu_utilization(job).iloc[0]
    # Steps window 0-220: step 2's host range ends at 200, the kernel it launched at 110 runs
    # 190-220, and the plugin ends the step with it (as step_time_breakdown does; the window
    # stopped at 200 and cut that kernel's last 20 µs). Kernels (not copies) busy 20-80,
    # 170-180, 190-220.
    assert row["window_us"] == 220
    assert row["busy_us"] == 100
    assert row["utilization_pct"] == pytest.approx(100 * 100 / 220)


def test_legacy_utilization_timeline_matches_the_plugin(legacy):
    job, expected = legacy
    counters = [e for e in expected if e.get("ph") == "C" and e["name"] == "GPU 0 Utilization"]
    # The plugin writes a 1 and a 0 first (to fix the chart's scale) and a final 0 at the end.
    buckets = counters[2:-1]
    ours = gpu_utilization_timeline(job)
    assert ours["start_us"].tolist() == [float(e["ts"]) for e in buckets]
    assert ours["end_us"].iloc[-1] == counters[-1]["ts"]
    scaled = [e["args"]["GPU Utilization"] / 100 for e in buckets]
    assert ours["utilization"].tolist() == pytest.approx(scaled)


def test_legacy_sm_efficiency_timeline_matches_the_plugin(legacy):
    job, expected = legacy
    counters = [
        e for e in expected if e.get("ph") == "C" and e["name"] == "GPU 0 Est. SM Efficiency"
    ][2:]
    starts, ends = counters[0::2], counters[1::2]
    ours = sm_efficiency_timeline(job)
    assert ours["start_us"].tolist() == [float(e["ts"]) for e in starts]
    assert ours["end_us"].tolist() == [float(e["ts"]) for e in ends]
    assert all(e["args"]["Est. SM Efficiency"] == 0 for e in ends)
    scaled = [e["args"]["Est. SM Efficiency"] / 10 for e in starts]
    assert ours["sm_efficiency"].tolist() == pytest.approx(scaled)


def test_legacy_overall_sm_efficiency(legacy):
    job, _ = legacy
    row = gpu_utilization(job).iloc[0]
    timeline = sm_efficiency_timeline(job)
    weighted = ((timeline["end_us"] - timeline["start_us"]) * timeline["sm_efficiency"]).sum()
    # All the 2021 kernels run inside ProfilerStep#2 (13,410 µs).
    assert row["window_us"] == 13_410
    assert row["sm_efficiency_pct"] == pytest.approx(100 * weighted / 13_410)
