"""Job discovery under the UI's roots: every kind of job is listed, nothing outside a root is."""

from __future__ import annotations

import gzip
import json
import os
import re
import time
from pathlib import Path

import pytest

from stepscope.testing import TINY_JOB, generate_job
from stepscope.ui.discovery import discover_jobs

from .conftest import write_job_folder

TRACE = {"schemaVersion": 1, "deviceProperties": [], "traceEvents": []}


def _trace(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(TRACE).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def _by_name(entries):
    return {e.name: e for e in entries}


def test_every_kind_of_job_is_listed_with_what_the_job_list_shows(jobs_root: Path):
    generate_job(jobs_root / "generated", gpus=1, cpus=2, minutes=1)
    write_job_folder(jobs_root, "still-training", status="Running")
    sagemaker = jobs_root / "team" / "sm-output"
    (sagemaker / "system" / "incremental" / "2020060305").mkdir(parents=True)
    (sagemaker / "system" / "incremental" / "2020060305" / "1591160640.algo-1.json").write_text("")
    (sagemaker / "system" / "incremental" / "2020060305" / "1591160700.algo-2.json").write_text("")
    (sagemaker / "training_job_end.ts").write_text("")
    _trace(jobs_root / "traces" / "ddp" / "rank-0.pt.trace.json.gz")
    _trace(jobs_root / "traces" / "ddp" / "rank-1.pt.trace.json.gz")
    _trace(jobs_root / "traces" / "single.json")
    (jobs_root / "traces" / "notes.json").write_text('{"not": "a trace"}')

    jobs = _by_name(discover_jobs([jobs_root]))

    assert set(jobs) == {"generated", "still-training", "sm-output", "ddp", "single"}
    assert jobs["generated"].kind == "stepscope"
    assert jobs["generated"].status == "completed"
    assert jobs["generated"].nodes == ("algo-1",)
    assert jobs["generated"].duration_s == pytest.approx(60.0, abs=1.0)
    assert jobs["still-training"].status == "running"
    assert jobs["still-training"].duration_s == pytest.approx(
        time.time() - jobs["still-training"].start_us / 1e6, abs=60
    )
    assert jobs["sm-output"].kind == "sagemaker"
    assert jobs["sm-output"].nodes == ("algo-1", "algo-2")
    assert jobs["sm-output"].start_us == 1591160640 * 1e6
    assert jobs["sm-output"].duration_s == 120.0
    assert jobs["ddp"].kind == "kineto"
    assert jobs["ddp"].path == (jobs_root / "traces" / "ddp").resolve()
    assert jobs["single"].kind == "kineto"


def test_profiler_output_without_its_end_marker_runs_while_its_files_are_written(
    jobs_root: Path,
):
    hour = jobs_root / "sm-output" / "system" / "incremental" / "2020060305"
    hour.mkdir(parents=True)
    older, newest = hour / "1591160640.algo-1.json", hour / "1591160700.algo-1.json"
    older.write_text("")
    newest.write_text("")  # the minute being written now
    an_hour_ago = time.time() - 3600
    os.utime(older, (an_hour_ago, an_hour_ago))
    assert _by_name(discover_jobs([jobs_root]))["sm-output"].status == "running"
    os.utime(newest, (an_hour_ago, an_hour_ago))  # nothing written for an hour: a recording
    assert _by_name(discover_jobs([jobs_root]))["sm-output"].status == "completed"


def test_profiler_output_with_only_framework_files_runs_while_they_are_written(
    jobs_root: Path,
):
    framework = jobs_root / "sm-output" / "framework"
    (framework / "pevents" / "2020060305").mkdir(parents=True)
    closed = framework / "pevents" / "2020060305" / "1591160700000000_1-algo-1_pythontimeline.json"
    closed.write_text("[]")
    assert _by_name(discover_jobs([jobs_root]))["sm-output"].status == "running"
    an_hour_ago = time.time() - 3600
    os.utime(closed, (an_hour_ago, an_hour_ago))
    assert _by_name(discover_jobs([jobs_root]))["sm-output"].status == "completed"
    (framework / "1-algo-1_pythontimeline.json.4242.tmp").write_text("[")  # the open file
    assert _by_name(discover_jobs([jobs_root]))["sm-output"].status == "running"


def test_ids_are_stable_opaque_and_distinct(jobs_root: Path):
    write_job_folder(jobs_root, "a")
    write_job_folder(jobs_root, "b")
    first = discover_jobs([jobs_root])
    second = discover_jobs([jobs_root])
    assert [e.id for e in first] == [e.id for e in second]
    assert len({e.id for e in first}) == 2
    for entry in first:
        assert re.fullmatch(r"[0-9a-f]{20}", entry.id)
        listed = entry.to_json()
        assert "path" not in listed and str(jobs_root) not in json.dumps(listed)


def test_a_root_may_be_a_job_or_a_single_trace_file(jobs_root: Path):
    job = write_job_folder(jobs_root, "job")
    trace = _trace(jobs_root / "one.pt.trace.json")
    assert [e.name for e in discover_jobs([job])] == ["job"]
    assert [(e.name, e.kind) for e in discover_jobs([trace])] == [("one", "kineto")]


def test_a_root_that_is_a_jobs_profiler_output_is_named_after_the_job(jobs_root: Path):
    # `stepscope ui a/profiler-output b/profiler-output` (SageMaker downloads) listed two jobs
    # named profiler-output, each at location "."
    roots = []
    for name in ("a", "b"):
        job = generate_job(jobs_root / name, **TINY_JOB)
        (job / "job.json").unlink()
        roots.append(job / "profiler-output")
    assert sorted((e.name, e.kind) for e in discover_jobs(roots)) == [
        ("a", "sagemaker"),
        ("b", "sagemaker"),
    ]


def test_missing_roots_and_hidden_folders_are_skipped(jobs_root: Path):
    write_job_folder(jobs_root / ".stepscope", "cached")
    write_job_folder(jobs_root, "visible")
    assert [e.name for e in discover_jobs([jobs_root, jobs_root / "absent"])] == ["visible"]


def test_symlinks_leaving_the_root_are_not_listed(tmp_path: Path, jobs_root: Path):
    outside = tmp_path / "outside"
    write_job_folder(outside, "secret-job")
    _trace(outside / "secret.json")
    os.symlink(outside / "secret-job", jobs_root / "linked-job")
    os.symlink(outside / "secret.json", jobs_root / "linked.json")
    os.symlink(outside, jobs_root / "linked-folder")
    write_job_folder(jobs_root, "inside")
    names = [e.name for e in discover_jobs([jobs_root])]
    assert names == ["inside"]


def test_recorded_fixture_folders_are_recognised(shared_fixtures: Path):
    kineto = _by_name(discover_jobs([shared_fixtures / "kineto"]))
    assert "a100_rank0of2_nccl" in kineto
    assert "two_ranks_one_job" in kineto  # the two ranks of one job are one entry
    smdebug = _by_name(discover_jobs([shared_fixtures / "smdebug"]))
    assert smdebug["test_traces"].kind == "sagemaker"


def test_a_job_under_two_roots_is_listed_once(jobs_root: Path):
    write_job_folder(jobs_root, "job")
    entries = discover_jobs([jobs_root, jobs_root.parent])
    assert [(e.name, e.root) for e in entries] == [("job", jobs_root.resolve())]


def test_a_job_whose_data_links_outside_the_root_is_not_listed(tmp_path: Path, jobs_root: Path):
    outside = tmp_path / "outside"
    generate_job(outside / "elsewhere", gpus=0, cpus=1, minutes=1)
    job = write_job_folder(jobs_root, "borrowing")
    os.symlink(outside / "elsewhere" / "profiler-output", job / "profiler-output")
    sagemaker = jobs_root / "sm"
    sagemaker.mkdir()
    os.symlink(outside / "elsewhere" / "profiler-output" / "system", sagemaker / "system")
    assert discover_jobs([jobs_root]) == []
