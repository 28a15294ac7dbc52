"""Timeline windows: exact slices when few, bounded bins when many, counters, flows, details."""

from __future__ import annotations

import duckdb
import pytest
from tests.tables import SAMPLE_EVENTS, SAMPLE_SYSTEM, T0, connection, event

from stepscope.analysis.timeline import (
    slice_connections,
    slice_details,
    timeline_bounds,
    timeline_tracks,
    timeline_window,
    window_statistics,
)


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    return connection(SAMPLE_EVENTS, SAMPLE_SYSTEM)


def _by_path(tracks):
    return {" / ".join(t.path): t for t in tracks}


def test_the_track_tree_puts_streams_under_their_gpu(con) -> None:
    paths = list(_by_path(timeline_tracks(con)))
    assert "algo-1 / GPUs / GPU-0 / rank 0 · stream 7" in paths
    assert "algo-1 / CPU / rank 0 · thread 1" in paths
    assert "algo-1 / CPU / CPU utilization" in paths
    assert "algo-1 / GPUs / GPU-0 / utilization" in paths
    assert paths.index("algo-1 / CPU / CPU utilization") < paths.index(
        "algo-1 / GPUs / GPU-0 / utilization"
    )


def test_track_ids_are_stable_across_calls(con) -> None:
    assert [t.id for t in timeline_tracks(con)] == [t.id for t in timeline_tracks(con)]


def test_a_narrow_window_returns_slices_with_their_depth_and_the_launch_flow(con) -> None:
    tracks = timeline_tracks(con)
    window = timeline_window(con, tracks, T0, T0 + 1000)
    thread = _by_path(tracks)["algo-1 / CPU / rank 0 · thread 1"]
    slices = window["tracks"][thread.id]["slices"]
    depth = {row[3]: row[2] for row in slices}
    assert depth["ProfilerStep#3"] == 0
    assert depth["aten::linear"] == 1
    assert depth["aten::addmm"] == 2
    assert depth["cudaLaunchKernel"] == 3
    stream = _by_path(tracks)["algo-1 / GPUs / GPU-0 / rank 0 · stream 7"]
    assert window["flows"] == [{"from": [thread.id, T0 + 50], "to": [stream.id, T0 + 300]}]


def test_a_wide_window_over_many_events_returns_bounded_bins() -> None:
    many = [event("cpu_op", f"op{i % 7}", i * 10.0, 5.0) for i in range(20_000)]
    con = connection(many, [])
    tracks = timeline_tracks(con)
    window = timeline_window(con, tracks, T0, T0 + 200_000, bins=500, max_items=2000)
    bins = window["tracks"][tracks[0].id]["bins"]
    assert len(bins) <= 500
    assert sum(b[1] for b in bins) == 20_000
    assert sum(b[2] for b in bins) == pytest.approx(20_000 * 5.0)


def test_counters_are_averaged_into_bins(con) -> None:
    tracks = _by_path(timeline_tracks(con))
    cpu = tracks["algo-1 / CPU / CPU utilization"]
    points = timeline_window(con, [cpu], T0, T0 + 1_500_000, bins=3)["tracks"][cpu.id]["points"]
    assert [round(v, 6) for _, v in points] == [60.0, 61.0, 62.0]


def test_details_and_connections_of_a_kernel(con) -> None:
    tracks = timeline_tracks(con)
    stream = _by_path(tracks)["algo-1 / GPUs / GPU-0 / rank 0 · stream 7"]
    details = slice_details(con, stream, T0 + 300, "volta_sgemm_128x64_nn")
    assert details is not None
    assert details["correlation"] == 77 and details["stream"] == 7
    assert details["args"] == {"grid": [1, 2, 1]}
    (launch,) = slice_connections(con, tracks, details)
    assert launch["relation"] == "launch"
    assert launch["name"] == "cudaLaunchKernel"
    assert launch["track"] == _by_path(tracks)["algo-1 / CPU / rank 0 · thread 1"].id


def test_area_statistics_clip_to_the_window(con) -> None:
    tracks = timeline_tracks(con)
    stats = window_statistics(con, tracks, T0 + 900, T0 + 1200)
    totals = {s["name"]: s["total_us"] for s in stats}
    assert totals == {"ProfilerStep#3": 100.0, "ProfilerStep#4": 200.0, "aten::mul": 30.0}


def test_bounds_cover_events_and_samples(con) -> None:
    assert timeline_bounds(con) == (T0, T0 + 1_000_000)
    assert timeline_bounds(connection([], [])) is None
