"""User annotation names and per-occurrence durations."""

from __future__ import annotations

import logging

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


def test_a_name_that_matches_nothing_is_warned_about_with_the_names_there_are(job, caplog):
    # A misspelt name (names match exactly) gave an empty table without a word, as if the
    # annotation had never run.
    with caplog.at_level(logging.WARNING, logger="stepscope.analysis.annotations"):
        assert annotation_durations(job, "nccl:allreduce").empty
    assert "No annotation is named 'nccl:allreduce'; the names there are: " in caplog.text
    assert "'nccl:all_reduce'" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="stepscope.analysis.annotations"):
        assert len(annotation_durations(job, "nccl:all_reduce")) == 1
    assert not caplog.text


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


def test_stepscope_annotations_count_once_inside_and_outside_detailed_windows(tmp_path):
    # stepscope.annotate() writes its spans to the job's timeline (category "Annotation"), and
    # inside a detailed window also to the window's trace (a record_function range). Only the
    # trace's ranges were annotations here, so the UI's custom histogram could not find a name
    # annotated outside a window, and would count one inside it twice.
    import time

    import stepscope
    from stepscope.config import DetailedProfilingConfig, FrameworkProfile, ProfilerConfig
    from stepscope.store import open_job

    detailed = DetailedProfilingConfig(start_step=2, num_steps=2)
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(detailed_profiling_config=detailed)
    )
    with stepscope.profile(config, job_dir=tmp_path / "job"):
        for _ in range(6):
            with stepscope.annotate("load batch"):
                time.sleep(0.002)
            stepscope.step()
    job = open_job(tmp_path / "job", cache_dir=tmp_path / "cache")
    traced = job.connect().execute(
        "SELECT count(*) FROM events WHERE category = 'user_annotation' AND name = 'load batch'"
    )
    assert traced.fetchone()[0] == 2  # the window's two steps, in its trace too
    names = annotation_names(job).set_index("name")
    assert names.loc["load batch", "count"] == 6
    durations = annotation_durations(job, "load batch")
    assert len(durations) == 6 and (durations["dur_us"] >= 2_000).all()


ANNOTATED_SCRIPT = """
import torch
import stepscope

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(6):
    with stepscope.annotate("forward"):
        with stepscope.annotate("前向 🚀"):
            loss = model(torch.randn(2, 4)).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_every_stepscope_annotation_counts_once_whatever_its_name(tmp_path):
    # Only the PyTorch profiler's ranges were read: an annotation counted the steps of the
    # detailed window (1 of 6), and one whose name is not ASCII was there as "unknown".
    pytest.importorskip("torch")
    from tests.collect.torch.torchjob import run_script

    from stepscope.config import DetailedProfilingConfig, FrameworkProfile, ProfilerConfig
    from stepscope.store import open_job

    window = DetailedProfilingConfig(start_step=2, num_steps=1)
    config = ProfilerConfig(
        framework_profile_params=FrameworkProfile(detailed_profiling_config=window)
    )
    job_dir, _ = run_script(tmp_path, ANNOTATED_SCRIPT, config)
    job = open_job(job_dir, cache_dir=tmp_path / "cache")
    assert (
        job.connect().execute("SELECT count(*) FROM events WHERE source = 'kineto'").fetchone()[0]
    )
    counts = annotation_names(job).set_index("name")["count"]
    assert counts["forward"] == 6 and counts["前向 🚀"] == 6
    durations = annotation_durations(job, "前向 🚀")
    assert len(durations) == 6 and (durations["dur_us"] > 0).all()
