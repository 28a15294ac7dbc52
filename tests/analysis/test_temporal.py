"""HTA's temporal breakdown, kernel-type breakdown and comm/compute overlap.

The two-rank job's figures are those Holistic Trace Analysis 0.5.0 prints for the same files.
"""

from __future__ import annotations

import pandas as pd
import pytest
from tests.analysis import _kineto_synthetic as synthetic

from stepscope.analysis import comm_compute_overlap, kernel_type_breakdown, temporal_breakdown


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return synthetic.open_synthetic_job(tmp_path_factory.mktemp("synthetic"))


@pytest.fixture(scope="module")
def two_ranks(shared_fixtures, tmp_path_factory):
    from stepscope.store import open_job

    job = open_job(
        shared_fixtures / "kineto" / "two_ranks_one_job", cache_dir=tmp_path_factory.mktemp("c")
    )
    job.refresh()
    return job


def test_synthetic_breakdown_drops_the_last_step_like_hta(job):
    # Kept: GPU work launched before step 2 starts: sgemm 20-50, nccl 40-80, memcpy 70-75.
    row = temporal_breakdown(job).iloc[0]
    assert (row["span_us"], row["idle_us"], row["compute_us"], row["non_compute_us"]) == (
        60,
        0,
        30,
        30,
    )


def test_synthetic_breakdown_with_the_last_step(job):
    # Adds memset 150-160 and kernels 170-180, 190-220: window 20-220, busy 60+10+10+30,
    # compute 30+10+30, non-compute 50-80 plus the memset.
    row = temporal_breakdown(job, include_last_step=True).iloc[0]
    assert (row["span_us"], row["idle_us"], row["compute_us"], row["non_compute_us"]) == (
        200,
        90,
        70,
        40,
    )
    assert row["idle_pct"] + row["compute_pct"] + row["non_compute_pct"] == pytest.approx(100)


def test_synthetic_overlap(job):
    # Communication busy 40-80; compute busy over it 40-50.
    row = comm_compute_overlap(job).iloc[0]
    assert (row["comm_us"], row["overlap_us"], row["overlap_pct"]) == (40, 10, 25)


def test_two_ranks_temporal_breakdown_matches_hta(two_ranks):
    rows = temporal_breakdown(two_ranks).set_index("rank")
    expected = {
        0: (321_378, 106_252, 172_428, 600_058),
        1: (328_671, 135_548, 136_455, 600_674),
    }
    for rank, (idle, compute, non_compute, span) in expected.items():
        got = rows.loc[rank]
        assert got["idle_us"] == pytest.approx(idle, rel=0.01)
        assert got["compute_us"] == pytest.approx(compute, rel=0.01)
        assert got["non_compute_us"] == pytest.approx(non_compute, rel=0.01)
        assert got["span_us"] == pytest.approx(span, rel=0.01)


def test_two_ranks_kernel_types_and_overlap_match_hta(two_ranks):
    types = kernel_type_breakdown(two_ranks).set_index("kernel_type")["total_us"]
    assert types["COMMUNICATION"] == pytest.approx(305_584, rel=0.01)
    assert types["COMPUTATION"] == pytest.approx(185_023, rel=0.01)
    assert types["COMPUTATION overlapping COMMUNICATION"] == pytest.approx(56_747, rel=0.01)
    assert types["MEMORY"] == pytest.approx(2_288, rel=0.01)
    overlap = comm_compute_overlap(two_ranks).set_index("rank")["overlap_pct"]
    assert overlap[0] == pytest.approx(11.81, abs=0.1)
    assert overlap[1] == pytest.approx(20.05, abs=0.1)


def test_one_rank_of_two_is_that_ranks_row(two_ranks):
    # The kernel analyses take rank= (the docs say so of all of them); these two refused it
    for analysis in (temporal_breakdown, comm_compute_overlap):
        every = analysis(two_ranks)
        one = analysis(two_ranks, rank=1)
        assert set(one["rank"]) == {1}
        pd.testing.assert_frame_equal(
            one.reset_index(drop=True), every[every["rank"] == 1].reset_index(drop=True)
        )


def test_a_trace_of_one_step_is_warned_about_when_that_step_is_left_out(
    shared_fixtures, tmp_path, caplog
):
    # The trace's only step is its last: HTA's filter leaves nothing, and the three analyses
    # were empty without a word
    from stepscope.store import open_job

    trace = shared_fixtures / "kineto" / "legacy_2021_gpu_metrics_input.json"
    job = open_job(trace, cache_dir=tmp_path)
    job.refresh()
    caplog.clear()
    with caplog.at_level("WARNING", logger="stepscope.analysis"):
        assert temporal_breakdown(job).empty
        assert kernel_type_breakdown(job).empty
        assert comm_compute_overlap(job).empty
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3
    assert all(m.startswith("Rank 0 has no GPU work launched before its last") for m in messages)
    assert all("include_last_step=True" in m for m in messages)
    caplog.clear()
    with caplog.at_level("WARNING", logger="stepscope.analysis"):
        assert temporal_breakdown(job, include_last_step=True)["rank"].tolist() == [0]
    assert not caplog.records
