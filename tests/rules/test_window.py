"""Scan windows: the shared snapshot tables, and events bounded by the raw files' time spans."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from stepscope.rules import RuleSession
from stepscope.rules.window import ScanWindow, earliest_event_start
from stepscope.store import open_job
from stepscope.testing import TableJob, generate_job
from tests.rules.tablejob import T0_US, add_metric
from tests.rules.test_live import files_by_close_time, publish

_COUNT_SQL = "SELECT count(*) AS n, coalesce(sum(dur_us), 0) AS dur_us FROM {events}"


def test_snapshot_tables_group_records_by_node_and_gap(tmp_path):
    job = TableJob(tmp_path / "job")
    # algo-2 written first: the tables are sorted by node all the same
    add_metric(job, "algo-2", [T0_US + 7], "cpu", "cpu0", "CPUUtilization", [10.0])
    # algo-1, snapshot 1: records 0..30 ms apart, each within 20 ms of the previous one
    add_metric(job, "algo-1", [T0_US, T0_US + 15_000], "cpu", "cpu0", "CPUUtilization", [20, 40])
    add_metric(job, "algo-1", [T0_US + 30_000], "cpu", "cpu1", "CPUUtilization", [90.0])
    add_metric(job, "algo-1", [T0_US + 5], "cpu", "cpu0", "I/OWaitPercentage", [4.0])
    add_metric(job, "algo-1", [T0_US + 9], "gpu", "gpu1", "GPUUtilization", [50.0])
    add_metric(job, "algo-1", [T0_US + 8], "gpu", "gpu0", "GPUUtilization", [70.0])
    add_metric(job, "algo-1", [T0_US + 8], "gpu", "gpu0", "GPUMemoryUtilization", [33.0])
    add_metric(job, "algo-1", [T0_US + 11], "memory", "MemoryUsedPercent", "", [61.0])
    add_metric(job, "algo-1", [T0_US + 12], "network", "eth0", "RX", [1000.0])
    add_metric(job, "algo-1", [T0_US + 12], "network", "eth0", "Platform", [5.0])  # not traffic
    add_metric(job, "algo-1", [T0_US + 13], "cpu", "cpu0", "CPUFrequency", [3.1])  # not used
    # algo-1, snapshot 2: 500 ms later, GPU 1 and the CPU only
    later = T0_US + 500_000
    add_metric(job, "algo-1", [later, later + 2], "cpu", "cpu0", "CPUUtilization", [60, 80])
    add_metric(job, "algo-1", [later + 25_000], "gpu", "gpu1", "GPUUtilization", [10.0])
    window = ScanWindow(job.connect(), T0_US, T0_US + 1_000_000)
    snapshots, gpus = window.snapshots(), window.gpu_samples()
    nan = float("nan")
    assert snapshots["node"].tolist() == ["algo-1", "algo-1", "algo-1", "algo-2"]
    # the GPU record 25 ms after the second snapshot's CPU records starts a third snapshot
    assert snapshots["snapshot_us"].tolist() == [T0_US, later, later + 25_000, T0_US + 7]
    expected = {
        "cores": [3, 2, 0, 1],
        "cpu_mean_pct": [50.0, 70.0, nan, 10.0],
        "cpu_max_pct": [90.0, 80.0, nan, 10.0],
        "iowait_mean_pct": [4.0, nan, nan, nan],
        "gpus": [2, 0, 1, 0],
        "gpu_mean_pct": [60.0, nan, 10.0, nan],
        "gpu_min_pct": [50.0, nan, 10.0, nan],
        "gpu_memory_mean_pct": [33.0, nan, nan, nan],
        "memory_pct": [61.0, nan, nan, nan],
        "network_bytes_per_s": [1000.0, nan, nan, nan],
    }
    for column, values in expected.items():
        np.testing.assert_allclose(snapshots[column], values, err_msg=column)
    assert list(zip(gpus["node"], gpus["gpu"], gpus["snapshot_us"], strict=True)) == [
        ("algo-1", "gpu0", T0_US),
        ("algo-1", "gpu1", T0_US),
        ("algo-1", "gpu1", later + 25_000),
    ]
    np.testing.assert_allclose(gpus["util_pct"], [70.0, 50.0, 10.0])
    np.testing.assert_allclose(gpus["memory_pct"], [33.0, nan, nan])
    np.testing.assert_allclose(gpus["cpu_mean_pct"], [50.0, 50.0, nan])
    window.close()


def test_the_bound_is_the_first_start_of_the_files_that_can_hold_the_window():
    spans = [("a", 0.0, 100.0), ("a", 50.0, 300.0), ("b", 200.0, 250.0), ("b", 400.0, 500.0)]
    # ends at or after 150 and starts before 260: the second and third files
    assert earliest_event_start(spans, 150, 260) == 50.0
    # ends at or after 260: the second file (its long event) and the fourth, which starts later
    assert earliest_event_start(spans, 260, 450) == 50.0
    assert earliest_event_start(spans, 301, 450) == 400.0
    # no file ends in or after the window, or starts before it ends: nothing to read
    assert earliest_event_start(spans, 600, 700) == 700.0
    assert earliest_event_start(spans, 320, 380) == 380.0
    assert earliest_event_start(None, 0, 10) is None


@pytest.fixture(scope="module")
def stored_job(tmp_path_factory):
    root = generate_job(tmp_path_factory.mktemp("window") / "job", minutes=4, gpus=1, cpus=2)
    job = open_job(root)
    job.refresh()
    return job


def window_totals(con, start_us, end_us, bound):
    window = ScanWindow(con, start_us, end_us, events_from_us=bound)
    try:
        row = window.query_row(_COUNT_SQL)
    finally:
        window.close()
    return int(row[0]), float(row[1])


def test_windows_with_the_bound_count_every_event_once(stored_job):
    con = stored_job.connect()
    spans = stored_job.time_spans("events")
    first, last, total, total_dur = con.execute(
        "SELECT min(start_us + dur_us), max(start_us + dur_us), count(*), sum(dur_us) FROM events"
    ).fetchone()
    # 37-second windows: their edges cut through steps and the data-loader spans
    edges = list(range(int(first), int(last) + 37_000_000, 37_000_000))
    counted, counted_dur, pruning = 0, 0.0, 0
    straddling = 0
    for start, end in zip(edges[:-1], edges[1:], strict=True):
        bound = earliest_event_start(spans, start, end)
        assert bound is not None
        pruning += bound > first - 60_000_000
        n, dur = window_totals(con, start, end, bound)
        assert (n, dur) == window_totals(con, start, end, None)
        counted += n
        counted_dur += dur
        straddling += con.execute(
            f"SELECT count(*) FROM events WHERE start_us < {start} AND start_us + dur_us >= {start}"
        ).fetchone()[0]
    assert straddling > 0  # events do cross the window edges ...
    assert counted == total  # ... and each is counted in exactly one window
    assert counted_dur == pytest.approx(total_dur)
    assert pruning > 0  # the bound did skip older data in some windows


def test_spans_bound_every_stored_event(stored_job):
    con = stored_job.connect()
    spans = np.array([span[1:] for span in stored_job.time_spans("events")])
    start, end = con.execute("SELECT min(start_us), max(start_us + dur_us) FROM events").fetchone()
    assert spans[:, 0].min() == start and spans[:, 1].max() == end
    assert (spans[:, 0] <= spans[:, 1]).all()


def test_a_session_keeps_its_connection_and_sees_new_segments(stored_job, tmp_path):
    recorded = stored_job.path / "profiler-output"
    live = tmp_path / "live"
    (live / "profiler-output").mkdir(parents=True)
    shutil.copyfile(stored_job.path / "job.json", live / "job.json")
    files = files_by_close_time(recorded)
    cut = len(files) * 3 // 4
    for path in files[:cut]:
        publish(recorded, live / "profiler-output", path)
    session = RuleSession(open_job(live), ["StepOutlier"])
    assert session.advance()
    con, before = session._con, session.watermark_us
    for path in files[cut:]:
        publish(recorded, live / "profiler-output", path)
    (live / "profiler-output" / "training_job_end.ts").touch()
    assert session.advance(final=True)
    assert session._con is con  # the same connection, its views renewed over the new segments
    assert session.watermark_us > before
    offline = RuleSession(stored_job, ["StepOutlier"])
    offline.advance(final=True)
    live_result = session.results()["StepOutlier"]
    offline_result = offline.results()["StepOutlier"]
    assert live_result.datapoints == offline_result.datapoints > 0
    assert live_result.details == offline_result.details


def test_a_session_scans_the_data_another_reader_converted(stored_job, tmp_path):
    """The UI refreshes a running job's cache more often than the live engine scans: the rows
    it converted are new to the engine all the same."""
    recorded = stored_job.path / "profiler-output"
    live = tmp_path / "live"
    (live / "profiler-output").mkdir(parents=True)
    shutil.copyfile(stored_job.path / "job.json", live / "job.json")
    files = files_by_close_time(recorded)
    cut = len(files) // 2
    for path in files[:cut]:
        publish(recorded, live / "profiler-output", path)
    session = RuleSession(open_job(live), ["StepOutlier"])
    session.advance()
    before = session.watermark_us
    for path in files[cut:]:
        publish(recorded, live / "profiler-output", path)
    open_job(live).refresh()  # another reader of the running job converts the new files
    assert session.advance()
    assert session.watermark_us > before


def test_the_manifest_finds_the_same_scan_end_as_a_query(stored_job, tmp_path):
    """The live engine reads each stream's newest record from the manifest; a query over the
    segments gives the same end of what is safely complete at every step of a running job."""
    recorded = stored_job.path / "profiler-output"
    live = tmp_path / "live"
    (live / "profiler-output").mkdir(parents=True)
    shutil.copyfile(stored_job.path / "job.json", live / "job.json")
    session = RuleSession(open_job(live), ["StepOutlier"])
    ends = []
    for path in files_by_close_time(recorded):
        publish(recorded, live / "profiler-output", path)
        session.job.refresh()
        con = session.job.connect()
        spans = session.job.time_spans("events")
        for final in (False, True):
            ends.append(session._end_us(con, final, spans))
            assert ends[-1] == session._end_us(con, final, None)
        con.close()
        session.advance()  # the watermark moves: the streams are looked for since then
    assert len(set(ends)) > 3
