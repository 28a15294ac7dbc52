"""Dashboard panels on recorded GPU traces: kernel pies, k, precision, activity, custom histograms."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stepscope.store import open_job
from stepscope.testing import TableJob, event_row
from stepscope.ui.panels import PANELS, PanelQuery, compute_panel

from .conftest import system_rows

TRACE = "kineto/a100_rank0of2_nccl.json.gz"


@pytest.fixture(scope="module")
def gpu_job(shared_fixtures: Path, tmp_path_factory):
    job = open_job(shared_fixtures / TRACE, cache_dir=tmp_path_factory.mktemp("cache"))
    job.refresh()
    return job


def _pie(payload):
    assert payload["empty"] is False, payload
    (pie,) = payload["pies"]
    return pie


def test_all_kernels_pie_has_k_slices_plus_others(gpu_job):
    for k in (3, 15):
        pie = _pie(compute_panel("kernel_time_all", gpu_job, PanelQuery(k=k)))
        assert len(pie["labels"]) == k + 1
        assert pie["labels"][-1] == "others"
        assert pie["values"] == sorted(pie["values"][:-1], reverse=True) + [pie["values"][-1]]


def test_top_kernels_pie_shows_only_the_top_15_with_shares_of_all_kernel_time(gpu_job):
    everything = _pie(compute_panel("kernel_time_all", gpu_job, PanelQuery(k=100)))
    top = _pie(compute_panel("kernel_time_top", gpu_job, PanelQuery()))
    assert len(top["labels"]) == 15 and "others" not in top["labels"]
    total_s = sum(everything["values"])
    first_pct = 100 * top["values"][0] / total_s
    assert f"({first_pct:.2f} % of all kernel time)" in top["hover"][0]
    assert "NCCL" in top["hover"][0] or "nccl" in top["hover"][0]
    # each measure once: the time with its share, then the launches
    name, time_line, launches_line = top["hover"][0].split("\n")
    seconds, _, share = time_line.partition(" s (")
    assert float(seconds) == pytest.approx(top["values"][0], rel=1e-3) and share
    assert launches_line.endswith(" launches") and " s" not in launches_line


@pytest.mark.parametrize("panel", ["kernel_time_all", "kernel_launches_all"])
def test_kernels_whose_shortened_names_match_keep_slices_of_their_own(gpu_job, panel: str):
    # plotly draws the slices of one label as one: cutlass and cuDNN kernels that differ only
    # after the first 80 characters were summed into one slice, hovered as the first of them
    pie = _pie(compute_panel(panel, gpu_job, PanelQuery(k=100)))
    full_names = [hover.split("\n")[0] for hover in pie["hover"]]
    assert len(set(full_names)) == len(full_names) > 60
    assert len(set(pie["labels"])) == len(pie["labels"])
    repeated = [label for label in pie["labels"] if label.endswith(")") and "… (" in label]
    assert repeated and all(len(label) <= 90 for label in pie["labels"]), repeated


def test_launch_count_pies_count_launches(gpu_job):
    top = _pie(compute_panel("kernel_launches_top", gpu_job, PanelQuery()))
    everything = _pie(compute_panel("kernel_launches_all", gpu_job, PanelQuery(k=5)))
    assert all(isinstance(v, int) for v in top["values"])
    _, launches_line, time_line = top["hover"][0].split("\n")
    assert launches_line.startswith(f"{top['values'][0]:,} launches (")
    assert time_line.endswith(" s") and "launches" not in time_line
    assert top["values"] == sorted(top["values"], reverse=True)
    assert everything["values"][:5] == top["values"][:5]
    # the trace holds 2,700 kernels (fixture README): every launch is in some slice
    assert sum(everything["values"]) == pytest.approx(2700, rel=0.05)


def test_gpu_share_pies_have_data(gpu_job):
    precision = _pie(compute_panel("kernel_precision", gpu_job, PanelQuery()))
    assert "fp32" in precision["labels"]
    activity = _pie(compute_panel("gpu_activity", gpu_job, PanelQuery()))
    assert {"kernel", "memcpy"} <= set(activity["labels"])
    memory = _pie(compute_panel("memory_operations", gpu_job, PanelQuery()))
    assert memory["labels"]


def test_without_sampled_gpu_utilization_the_trace_kernels_are_used(gpu_job):
    active = compute_panel("gpu_active_time", gpu_job, PanelQuery())
    assert active["note"].startswith("From GPU kernel activity")
    (pie,) = active["pies"]
    assert pie["title"] == "rank 0" and 0 < pie["values"][0] < sum(pie["values"])
    timeline = compute_panel("gpu_utilization", gpu_job, PanelQuery())
    assert timeline["kind"] == "lines" and len(timeline["series"][0]["x"]) <= 600
    assert max(timeline["series"][0]["y"]) <= 100.0
    cpu = compute_panel("cpu_active_time", gpu_job, PanelQuery())
    assert cpu["empty"] is True and "No CPU utilization" in cpu["message"]


def test_steps_breakdown_and_annotation_histogram(gpu_job):
    steps = compute_panel("step_time", gpu_job, PanelQuery())
    # a bare trace's steps are its ProfilerStep ranges, TRAIN steps as the rules count them
    assert [s["name"] for s in steps["series"]] == ["TRAIN"]
    assert steps["series"][0]["stats"]["count"] == 3  # ProfilerStep#4-6
    breakdown = compute_panel("step_breakdown", gpu_job, PanelQuery())
    assert breakdown["categories"] == ["rank 0"]
    assert "kernel" in {s["name"] for s in breakdown["series"]}
    histogram = compute_panel(
        "annotation_histogram", gpu_job, PanelQuery(annotation="## forward ##")
    )
    assert histogram["kind"] == "histogram" and sum(histogram["series"][0]["counts"]) == 3


def test_a_failing_panel_says_so_and_the_others_go_on():
    class Broken:
        def connect(self):
            raise OSError("disk went away")

    payload = compute_panel("step_time", Broken(), PanelQuery())
    assert payload["empty"] is True and "could not be computed" in payload["message"]
    assert set(PANELS) >= {"step_time", "gpu_active_time"}


def test_pie_shares_are_of_the_whole_even_on_the_top_15_pie(gpu_job):
    everything = _pie(compute_panel("kernel_time_all", gpu_job, PanelQuery(k=100)))
    top = _pie(compute_panel("kernel_time_top", gpu_job, PanelQuery()))
    assert sum(everything["pct"]) == pytest.approx(100.0, abs=0.01)
    assert sum(top["pct"]) < 100.0
    assert top["pct"][0] == pytest.approx(
        100 * top["values"][0] / sum(everything["values"]), abs=0.01
    )


def test_nodes_come_in_numeric_order(tmp_path: Path):
    nodes = ["algo-10", "algo-2", "algo-1"]
    rows = [row for node in nodes for row in system_rows(seconds=5, cpus=1, gpus=1, node=node)]
    job = TableJob(tmp_path / "job", rows)
    expected = ["algo-1", "algo-2", "algo-10"]
    for kind in ("gpu", "cpu"):
        pies = compute_panel(f"{kind}_active_time", job, PanelQuery())["pies"]
        assert [pie["title"] for pie in pies] == expected
        series = compute_panel(f"{kind}_utilization", job, PanelQuery())["series"]
        assert [line["name"] for line in series] == expected


_UNITS_S = {"s": 1.0, "ms": 1e-3, "µs": 1e-6}


@pytest.mark.parametrize("panel", ["kernel_time_all", "gpu_activity", "gpu_active_time"])
def test_hover_times_of_a_short_trace_read_as_its_slices_measure(
    panel: str, shared_fixtures: Path, tmp_path: Path
):
    # an AMD trace of a few milliseconds: each kernel runs for microseconds
    job = open_job(shared_fixtures / "kineto/mi250_rocm.json.gz", cache_dir=tmp_path / "cache")
    job.refresh()
    pie = _pie(compute_panel(panel, job, PanelQuery()))
    assert pie["values"]
    for value_s, hover in zip(pie["values"], pie["hover"], strict=True):
        match = re.search(r"([\d.,]+) (s|ms|µs|GPU-seconds)\b", hover)
        assert match is not None, hover
        number, unit = float(match[1].replace(",", "")), match[2]
        shown_s = number * _UNITS_S.get(unit, 1.0)
        assert shown_s == pytest.approx(value_s, rel=0.01), hover


def test_a_kernel_launched_once_reads_as_one_launch(tmp_path: Path):
    kernels = [
        event_row(category="kernel", name=name, start_us=1e6 + i * 100.0, dur_us=50.0, device=0)
        for i, name in enumerate(["gemm", "gemm", "gemm", "rare_kernel"])
    ]
    job = TableJob(tmp_path / "job", events=kernels)
    for panel in ("kernel_time_all", "kernel_launches_all"):
        pie = _pie(compute_panel(panel, job, PanelQuery()))
        hovers = dict(zip(pie["labels"], pie["hover"], strict=True))
        assert "\n1 launch" in hovers["rare_kernel"] and "1 launches" not in hovers["rare_kernel"]
        assert "\n3 launches" in hovers["gemm"]


def test_the_cpu_and_gpu_charts_of_a_job_share_its_time_origin(tmp_path: Path):
    """GPU sampling that starts 200 s after CPU sampling is drawn 200 s to the right."""
    t0_us, gpu_delay_s = 1_700_000_000_000_000, 200
    cpu = [
        {
            "timestamp_us": t0_us + s * 1_000_000,
            "type": "cpu",
            "name": "cpu0",
            "dimension": "CPUUtilization",
            "value": 50.0,
        }
        for s in range(300)
    ]
    gpu = [
        {
            "timestamp_us": t0_us + (gpu_delay_s + s) * 1_000_000,
            "type": "gpu",
            "name": "gpu0",
            "dimension": "GPUUtilization",
            "value": 80.0,
        }
        for s in range(100)
    ]
    job = TableJob(tmp_path / "job", cpu + gpu)
    cpu_chart = compute_panel("cpu_utilization", job, PanelQuery())
    gpu_chart = compute_panel("gpu_utilization", job, PanelQuery())
    assert cpu_chart["start_us"] == gpu_chart["start_us"] == t0_us
    assert cpu_chart["series"][0]["x"][0] == 0.0
    assert gpu_chart["series"][0]["x"][0] == pytest.approx(gpu_delay_s, abs=1.0)


def test_the_gpu_kernel_chart_is_measured_from_the_jobs_start(tmp_path: Path):
    """A job started 30 s before its first kernel: the kernel line starts at 30 s, not 0."""
    start_us, first_kernel_s = 1_700_000_000_000_000, 30
    kernels = [
        event_row(
            category="kernel",
            name="gemm",
            device=0,
            dur_us=500_000.0,
            start_us=start_us + (first_kernel_s + s) * 1_000_000.0,
        )
        for s in range(10)
    ]
    job = TableJob(tmp_path / "job", events=kernels, metadata={"start_time_us": start_us})
    chart = compute_panel("gpu_utilization", job, PanelQuery())
    assert chart["start_us"] == start_us
    assert chart["series"][0]["x"][0] == pytest.approx(first_kernel_s, abs=0.5)


def test_a_trace_on_its_own_clock_does_not_move_the_jobs_time_origin(tmp_path: Path):
    """A job whose trace was cut short (its events on the trace's own clock, no date): the CPU
    chart still starts at its first sample, not billions of seconds after the trace's zero."""
    start_us = 1_700_000_000_000_000
    cpu = [
        {"timestamp_us": start_us + s * 1_000_000, "type": "cpu", "name": "cpu0",
         "dimension": "CPUUtilization", "value": 50.0}
        for s in range(60)
    ]  # fmt: skip
    undated = [event_row(category="cpu_op", name="aten::mm", start_us=5e6, dur_us=100.0)]
    job = TableJob(tmp_path / "job", cpu, undated)  # no job.json: a SageMaker folder, say
    chart = compute_panel("cpu_utilization", job, PanelQuery())
    assert chart["start_us"] == start_us
    assert chart["series"][0]["x"][0] == 0.0


def test_a_gap_in_the_samples_breaks_the_utilization_line(tmp_path: Path):
    """Two stretches of sampling an hour apart (a job resumed later): no line across the hour."""
    t0_us = 1_700_000_000_000_000
    rows = [
        {
            "timestamp_us": t0_us + s * 1_000_000,
            "type": "cpu",
            "name": "cpu0",
            "dimension": "CPUUtilization",
            "value": 90.0 if s < 60 else 10.0,
        }
        for s in [*range(60), *range(3660, 3720)]
    ]
    chart = compute_panel("cpu_utilization", TableJob(tmp_path / "job", rows), PanelQuery())
    (series,) = chart["series"]
    assert series["y"].count(None) == 1
    gap = series["y"].index(None)
    assert series["x"][gap - 1] < 60 < series["x"][gap] < 3600 < series["x"][gap + 1]
    assert series["x"] == sorted(series["x"])
    assert {y for y in series["y"] if y is not None} == {90.0, 10.0}
