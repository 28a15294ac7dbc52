"""Timeline windows: exact slices when few, bounded bins when many, counters, flows, details."""

from __future__ import annotations

import pytest
from tests.tables import SAMPLE_EVENTS, SAMPLE_SYSTEM, T0, event

from stepscope.analysis.timeline import TimelineIndex, TimelineTrack
from stepscope.testing import connect, events_table, system_table


@pytest.fixture
def index() -> TimelineIndex:
    return TimelineIndex(connect(events_table(SAMPLE_EVENTS), system_table(SAMPLE_SYSTEM)))


def _by_path(index: TimelineIndex) -> dict[str, TimelineTrack]:
    return {" / ".join(t.path): t for t in index.tracks}


def test_the_track_tree_puts_streams_under_their_gpu_and_counters_first(index) -> None:
    paths = list(_by_path(index))
    assert paths == [
        "algo-1 / CPU / CPU utilization",
        "algo-1 / CPU / Memory used",
        "algo-1 / CPU / cpu0 utilization",
        "algo-1 / CPU / cpu1 utilization",
        "algo-1 / CPU / rank 0 · Annotation",
        "algo-1 / CPU / rank 0 · thread 1",
        "algo-1 / GPUs / GPU utilization",
        "algo-1 / GPUs / GPU-0 / utilization",
        "algo-1 / GPUs / GPU-0 / rank 0 · stream 7",
    ]


def test_track_ids_are_stable_across_indexes(index) -> None:
    again = TimelineIndex(connect(events_table(SAMPLE_EVENTS), system_table(SAMPLE_SYSTEM)))
    assert [t.id for t in index.tracks] == [t.id for t in again.tracks]


def test_a_narrow_window_returns_slices_with_their_depth_and_the_launch_flow(index) -> None:
    window = index.window(index.tracks, T0, T0 + 1000)
    thread = _by_path(index)["algo-1 / CPU / rank 0 · thread 1"]
    slices = window["tracks"][thread.id]["slices"]
    depth = {row[3]: row[2] for row in slices}
    assert depth == {
        "ProfilerStep#3": 0,
        "aten::linear": 1,
        "aten::addmm": 2,
        "cudaLaunchKernel": 3,
        "aten::relu": 1,
    }
    stream = _by_path(index)["algo-1 / GPUs / GPU-0 / rank 0 · stream 7"]
    assert window["flows"] == [{"from": [thread.id, T0 + 50], "to": [stream.id, T0 + 300]}]


def test_a_wide_window_over_many_events_returns_bounded_bins() -> None:
    many = [event("cpu_op", f"op{i % 7}", i * 10.0, 5.0) for i in range(20_000)]
    index = TimelineIndex(connect(events_table(many)))
    window = index.window(index.tracks, T0, T0 + 200_000, bins=500, max_items=2000)
    bins = window["tracks"][index.tracks[0].id]["bins"]
    assert len(bins) <= 500
    assert sum(b[1] for b in bins) == 20_000
    assert sum(b[2] for b in bins) == pytest.approx(20_000 * 5.0)


def test_counters_are_averaged_into_bins(index) -> None:
    cpu = _by_path(index)["algo-1 / CPU / CPU utilization"]
    window = index.window([cpu], T0, T0 + 1_500_000, bins=3)
    assert [round(v, 6) for _, v in window["tracks"][cpu.id]["points"]] == [60.0, 61.0, 62.0]


def test_each_node_has_the_mean_utilization_of_its_gpus_above_its_gpus() -> None:
    rows = [
        {"timestamp_us": int(T0) + 500_000 * k, "node": node, "type": "gpu", "name": f"gpu{g}"}
        | {"dimension": "GPUUtilization", "value": value}
        for k in range(2)
        for node, g, value in [("algo-1", 0, 90.0), ("algo-1", 1, 30.0), ("algo-2", 0, 20.0)]
    ]
    index = TimelineIndex(connect(events_table([]), system_table(rows)))
    assert list(_by_path(index)) == [
        "algo-1 / GPUs / GPU utilization",
        "algo-1 / GPUs / GPU-0 / utilization",
        "algo-1 / GPUs / GPU-1 / utilization",
        "algo-2 / GPUs / GPU utilization",
        "algo-2 / GPUs / GPU-0 / utilization",
    ]
    paths = _by_path(index)
    tracks = [paths["algo-1 / GPUs / GPU utilization"], paths["algo-2 / GPUs / GPU utilization"]]
    window = index.window(tracks, T0, T0 + 1_000_000, bins=2)
    assert [v for _, v in window["tracks"][tracks[0].id]["points"]] == [60.0, 60.0]
    assert [v for _, v in window["tracks"][tracks[1].id]["points"]] == [20.0, 20.0]


def test_details_and_connections_of_a_kernel(index) -> None:
    stream = _by_path(index)["algo-1 / GPUs / GPU-0 / rank 0 · stream 7"]
    details = index.details(stream, T0 + 300, "volta_sgemm_128x64_nn")
    assert details is not None
    assert details["correlation"] == 77 and details["stream"] == 7
    assert details["args"] == {"grid": [1, 2, 1]}
    (launch,) = index.connections(details)
    assert launch["relation"] == "launch"
    assert launch["name"] == "cudaLaunchKernel"
    assert launch["track"] == _by_path(index)["algo-1 / CPU / rank 0 · thread 1"].id
    assert index.details(stream, T0 + 301, "volta_sgemm_128x64_nn") is None


def test_area_statistics_clip_to_the_window(index) -> None:
    stats = index.statistics(index.tracks, T0 + 900, T0 + 1200)
    totals = {s["name"]: s["total_us"] for s in stats}
    assert totals == {"ProfilerStep#3": 100.0, "ProfilerStep#4": 200.0, "aten::mul": 30.0}


def test_area_statistics_and_bins_keep_the_recorded_durations_of_slices_in_the_window() -> None:
    # a float of µs since the epoch resolves 0.25 µs: end minus start is off by as much, 10 %
    # of a 2.4 µs kernel
    durations = [2.4, 35.167, 13.536] * 10
    rows = [event("kernel", "k", 100.0 * i + 0.3, dur) for i, dur in enumerate(durations)]
    index = TimelineIndex(connect(events_table(rows)))
    (stats,) = index.statistics(index.tracks, T0, T0 + 3000)
    assert stats["total_us"] == pytest.approx(sum(durations), abs=1e-9)
    window = index.window(index.tracks, T0, T0 + 3000, bins=20)  # more slices than bins
    bins = window["tracks"][index.tracks[0].id]["bins"]
    assert sum(b[2] for b in bins) == pytest.approx(sum(durations), abs=1e-9)


def test_bounds_cover_events_and_samples(index) -> None:
    assert index.bounds == (T0, T0 + 1_000_000)
    assert TimelineIndex(connect()).bounds is None


def test_events_without_a_node_sit_under_a_named_host() -> None:
    index = TimelineIndex(connect(events_table([event("cpu_op", "aten::add", 0, 5, node="")])))
    assert index.tracks[0].path[0] == "host"


def test_profiler_spans_of_no_thread_get_a_track_named_after_them() -> None:
    # Kineto's own "PyTorch Profiler" span of the whole trace has no thread
    index = TimelineIndex(
        connect(events_table([event("Trace", "PyTorch Profiler (0)", 0, 900, tid=-1)]))
    )
    assert [" / ".join(t.path) for t in index.tracks] == ["algo-1 / CPU / rank 0 · Trace"]


def test_every_answer_is_bounded_whatever_the_number_of_dense_tracks() -> None:
    many = [event("cpu_op", f"op{i % 5}", i * 10.0, 5.0, tid=i % 12) for i in range(24_000)]
    index = TimelineIndex(connect(events_table(many)))
    assert len(index.tracks) == 12
    window = index.window(index.tracks, T0, T0 + 240_000, bins=800, max_items=1200)
    items = sum(
        len(t.get("bins", [])) + len(t.get("slices", [])) for t in window["tracks"].values()
    )
    assert items <= 1200
    assert sum(b[1] for t in window["tracks"].values() for b in t["bins"]) == 24_000


def test_find_gives_the_next_slice_whose_name_holds_the_text_and_goes_round(index) -> None:
    thread = _by_path(index)["algo-1 / CPU / rank 0 · thread 1"]
    first = index.find("ADDMM", T0 - 1)
    assert first["count"] == 1
    assert first["match"] == {
        "track": thread.id,
        "start_us": T0 + 20,
        "dur_us": 190.4,
        "name": "aten::addmm",
    }
    steps = [index.find("ProfilerStep#", T0 - 1), index.find("ProfilerStep#", T0)]
    assert [s["match"]["name"] for s in steps] == ["ProfilerStep#3", "ProfilerStep#4"]
    # past the last match, the search starts again from the first
    assert index.find("addmm", T0 + 20)["match"]["start_us"] == T0 + 20
    # % and _ are searched for, not wildcards
    assert index.find("aten_%", T0 - 1) == {"count": 0, "match": None}
