"""Kernel summary (Nsight's cuda_gpu_kern_sum) on a hand-made trace and a real one."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest
from tests.analysis import _kineto_synthetic as synthetic

from stepscope.analysis import (
    PandasFrame,
    job_statistics,
    kernel_summary,
    memory_timeline,
    step_time_breakdown,
)
from stepscope.errors import ConfigError


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return synthetic.open_synthetic_job(tmp_path_factory.mktemp("synthetic"))


def test_top_kernel_and_others_row(job):
    table = kernel_summary(job, top_k=1)
    assert table["name"].tolist()[-1] == "others"
    first = table.iloc[0]
    assert first["name"].startswith("ncclKernel_AllReduce")
    assert (first["count"], first["total_us"], first["pct"]) == (1, 40, pytest.approx(400 / 11))
    others = table.iloc[1]
    # sgemm 30, FillFunctor 30, triton 10.
    assert (others["count"], others["total_us"], others["min_us"], others["max_us"]) == (
        3,
        70,
        10,
        30,
    )
    assert others["med_us"] == 30
    assert table["pct"].sum() == pytest.approx(100)


def test_order_by_count_and_validation(job):
    table = kernel_summary(job, top_k=10, order_by="count")
    assert "others" not in table["name"].tolist()
    assert len(table) == 4
    with pytest.raises(ConfigError):
        kernel_summary(job, top_k=0)
    with pytest.raises(ConfigError):
        kernel_summary(job, order_by="time")


def test_real_trace_totals_match_the_raw_json(shared_fixtures, tmp_path):
    from stepscope.store import open_job

    path = shared_fixtures / "kineto" / "v100_single_ns_resolution.pt.trace.json.gz"
    with gzip.open(path, "rt") as handle:
        raw = json.load(handle)["traceEvents"]
    durations = defaultdict(list)
    for event in raw:
        if event.get("cat") == "kernel":
            durations[event["name"]].append(event["dur"])
    top = max(durations, key=lambda name: sum(durations[name]))

    table = kernel_summary(open_job(path, cache_dir=tmp_path), top_k=5)
    assert table.iloc[0]["name"] == top
    assert table.iloc[0]["total_us"] == pytest.approx(sum(durations[top]))
    assert table["count"].sum() == sum(len(v) for v in durations.values())
    assert table["total_us"].sum() == pytest.approx(sum(sum(v) for v in durations.values()))


def test_a_pandas_frame_is_accepted_as_the_job(shared_fixtures, tmp_path):
    """docs/analysis.md: functions that take a job accept a path, a JobData or a PandasFrame."""
    from stepscope.store import open_job

    job = open_job(shared_fixtures / "kineto" / "a100_rank0of2_nccl.json.gz", cache_dir=tmp_path)
    frame = PandasFrame(job)
    # the same tables; float sums may differ in their last bits (DuckDB adds in parallel)
    pd.testing.assert_frame_equal(kernel_summary(frame), kernel_summary(job), rtol=1e-12)
    pd.testing.assert_frame_equal(step_time_breakdown(frame), step_time_breakdown(job), rtol=1e-12)
    assert len(step_time_breakdown(frame)) == 3
    assert job_statistics(frame)["job_duration"] == job_statistics(job)["job_duration"]


def test_rank_filter(job):
    assert kernel_summary(job, rank=0)["count"].sum() == 4
    assert kernel_summary(job, rank=1).empty
    with pytest.raises(ConfigError):
        kernel_summary(job, rank=-1)


def test_a_rank_the_job_does_not_have_is_warned_about(job, caplog):
    # rank=3 of a one-rank trace gave empty tables without a word, as a quiet rank would
    with caplog.at_level("WARNING"):
        assert kernel_summary(job, rank=0)["count"].sum() == 4
        assert not caplog.records
        assert kernel_summary(job, rank=3).empty
        assert step_time_breakdown(job, rank=3).empty
    assert [r.getMessage() for r in caplog.records] == [
        "Rank 3 has no events in this job, so the analysis of it is empty; the job's ranks: 0."
    ] * 2


def test_a_rank_read_off_a_result_selects_that_rank(job):
    # a frame's cell is numpy's integer, which was refused as "not an integer"
    rank = step_time_breakdown(job).loc[0, "rank"]
    assert isinstance(rank, np.integer)
    assert kernel_summary(job, rank=rank).equals(kernel_summary(job, rank=0))
    with pytest.raises(ConfigError, match="rank must be an integer >= 0"):
        kernel_summary(job, rank=np.float64(0.5))


def test_counts_read_off_a_result_are_taken_as_counts(job):
    # numpy's integers were refused as "not an integer", as the rank was
    assert kernel_summary(job, top_k=np.int64(1)).equals(kernel_summary(job, top_k=1))
    assert memory_timeline(job, max_points=np.int64(1)).equals(memory_timeline(job, max_points=1))
    with pytest.raises(ConfigError, match="kernel_summary.top_k must be an integer >= 1"):
        kernel_summary(job, top_k=np.float64(1.5))
