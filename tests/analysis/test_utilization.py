"""System-metric aggregates for the dashboard: active-time pies and utilization over time."""

from __future__ import annotations

import duckdb
import pytest

from stepscope.analysis import PandasFrame
from stepscope.analysis.utilization import system_active_time, system_utilization_timeline
from stepscope.errors import ConfigError
from stepscope.store import open_job
from stepscope.store.schema import SYSTEM_SCHEMA
from stepscope.testing import TINY_JOB, connect, generate_job, system_table

T0_US = 1_700_000_000_000_000


def _system(rows: list[tuple[int, str, str, str, str, float]]) -> duckdb.DuckDBPyConnection:
    table = system_table([dict(zip(SYSTEM_SCHEMA.names, row, strict=True)) for row in rows])
    return connect(system=table)


def _gpu(t_s: float, node: str, gpu: int, value: float):
    return (T0_US + int(t_s * 1e6), node, "gpu", f"gpu{gpu}", "GPUUtilization", value)


def _cpu(t_s: float, node: str, core: int, value: float):
    return (T0_US + int(t_s * 1e6), node, "cpu", f"cpu{core}", "CPUUtilization", value)


def test_active_time_counts_zero_samples_as_idle_per_node():
    rows = [
        _gpu(t, "algo-1", g, 0.0 if (t < 2 and g == 0) else 50.0) for t in range(10) for g in (0, 1)
    ]
    rows += [_gpu(t, "algo-2", 0, 0.0) for t in range(10)]
    # memory utilization of a GPU must not count as GPU activity
    rows += [(T0_US, "algo-2", "gpu", "gpu0", "GPUMemoryUtilization", 90.0)]
    df = system_active_time(_system(rows), kind="gpu")
    assert list(df["node"]) == ["algo-1", "algo-2"]
    one = df.iloc[0]
    assert (one["devices"], one["samples"], one["active_samples"], one["idle_samples"]) == (
        2,
        20,
        18,
        2,
    )
    assert one["active_pct"] == pytest.approx(90.0)
    assert one["span_s"] == pytest.approx(9.0)
    # 2 GPUs over 9 s = 18 device-seconds, 90 % of it active
    assert one["active_device_s"] == pytest.approx(16.2)
    assert one["idle_device_s"] == pytest.approx(1.8)
    assert df.iloc[1]["active_pct"] == 0.0


def test_cpu_active_time_reads_only_cpu_utilization():
    rows = [_cpu(t, "algo-1", c, 10.0 * c) for t in range(4) for c in range(4)]
    rows += [(T0_US, "algo-1", "cpu", "cpu0", "I/OWaitPercentage", 0.0)]
    df = system_active_time(_system(rows), kind="cpu")
    assert df.iloc[0]["samples"] == 16
    assert df.iloc[0]["idle_samples"] == 4  # core 0 is always at 0 %
    assert df.iloc[0]["active_pct"] == pytest.approx(75.0)


def test_active_time_of_a_job_without_gpus_is_empty():
    rows = [_cpu(t, "algo-1", 0, 5.0) for t in range(3)]
    assert system_active_time(_system(rows), kind="gpu").empty
    assert system_utilization_timeline(_system(rows), kind="gpu").empty


def test_timeline_averages_devices_and_bins_into_bounded_points():
    # 1000 s at 1 Hz, two GPUs at 20 % and 60 %: the node mean is 40 % everywhere
    rows = [_gpu(t, "algo-1", 0, 20.0) for t in range(1000)]
    rows += [_gpu(t, "algo-1", 1, 60.0) for t in range(1000)]
    rows += [_gpu(t, "algo-2", 0, 100.0 if t >= 500 else 0.0) for t in range(1000)]
    df = system_utilization_timeline(_system(rows), kind="gpu", max_points=50)
    one = df[df["node"] == "algo-1"]
    two = df[df["node"] == "algo-2"]
    assert 40 <= len(one) <= 50
    assert one["utilization_pct"].round(6).eq(40.0).all()
    assert one["samples"].sum() == 2000
    assert one["time_s"].is_monotonic_increasing
    assert one["time_s"].iloc[0] == 0.0
    assert one["timestamp_us"].iloc[0] == T0_US
    # algo-2 idles for the first half and is busy for the second
    assert two[two["time_s"] < 480]["utilization_pct"].max() == 0.0
    assert two[two["time_s"] > 520]["utilization_pct"].min() == 100.0


def test_timeline_keeps_every_sample_when_the_job_is_short():
    rows = [_cpu(t, "algo-1", 0, float(t)) for t in range(5)]
    df = system_utilization_timeline(_system(rows), kind="cpu", max_points=500)
    assert list(df["utilization_pct"]) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert list(df["time_s"]) == pytest.approx([0.0, 1.0, 2.0, 3.0, 4.0], abs=0.01)


@pytest.mark.parametrize("max_points", [0, -3, 2.5, True])
def test_bad_max_points_is_rejected(max_points):
    with pytest.raises(ConfigError, match="max_points"):
        system_utilization_timeline(_system([]), max_points=max_points)


def test_bad_kind_is_rejected():
    with pytest.raises(ConfigError, match="one of cpu, gpu"):
        system_active_time(_system([]), kind="tpu")


def test_a_path_and_a_pandas_frame_are_accepted_as_the_job(tmp_path):
    """Like every analysis of a job, these read a job folder's path and a PandasFrame too."""
    path = generate_job(tmp_path / "job", **TINY_JOB)
    expected_active = system_active_time(open_job(path), kind="cpu")
    expected_timeline = system_utilization_timeline(open_job(path), max_points=20)
    assert len(expected_active) == 1 and len(expected_timeline) > 1
    for job in (path, str(path), PandasFrame(path)):
        assert system_active_time(job, kind="cpu").equals(expected_active)
        assert system_utilization_timeline(job, max_points=20).equals(expected_timeline)
