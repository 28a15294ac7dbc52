"""User annotation names and per-occurrence durations."""

from __future__ import annotations

import pytest
from tests.analysis import _kineto_synthetic as synthetic

from stepscope.analysis import annotation_durations, annotation_names


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return synthetic.open_synthetic_job(tmp_path_factory.mktemp("synthetic"))


def test_names_exclude_profiler_steps(job):
    names = annotation_names(job)
    assert names["name"].tolist() == [
        "nccl:all_reduce",
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
    ]
    assert names["total_us"].tolist() == [20, 10]


def test_durations_of_one_name_on_a_real_trace(shared_fixtures, tmp_path):
    from stepscope.store import open_job

    job = open_job(shared_fixtures / "kineto" / "v100_rank1of2_memory.json.gz", cache_dir=tmp_path)
    names = annotation_names(job).set_index("name")
    assert names.loc["nccl:all_reduce", "count"] == 2020
    steps = annotation_durations(job, "Optimizer.step#SGD.step")
    # One optimizer step per profiled step, each inside its ProfilerStep.
    assert steps["step"].tolist() == [2, 3, 4, 5, 6]
    assert (steps["dur_us"] > 0).all()
    assert annotation_durations(job, "no such annotation").empty
