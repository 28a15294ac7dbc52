"""open_job on every layout it recognises, JobData.metadata, and the errors for everything else."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest

import stepscope
from stepscope.errors import CorruptFileError, JobNotFoundError, UnsupportedFormatError
from stepscope.store import JobData, open_job
from stepscope.testing import TINY_JOB, generate_job


def _count(data: JobData, table: str, where: str = "true") -> int:
    return data.connect().execute(f"SELECT count(*) FROM {table} WHERE {where}").fetchone()[0]


def test_open_job_is_public() -> None:
    assert stepscope.open_job is open_job


def test_a_stepscope_job_folder(tmp_path: Path) -> None:
    job = generate_job(tmp_path / "run-7", **{**TINY_JOB, "nodes": 2})
    data = open_job(job)
    assert (data.kind, data.name, data.path) == ("stepscope", "run-7", job.resolve())
    meta = data.metadata
    job_json = json.loads((job / "job.json").read_text())
    assert meta["job"] == job_json
    for key in ("command", "start_time_us", "end_time_us", "hardware", "hosts", "exit_code"):
        assert meta[key] == job_json[key]
    assert meta["status"] == "Completed" and meta["ended"] is True
    assert meta["nodes"] == ["algo-1", "algo-2"]
    assert sorted(meta["ranks"]) == [0, 1]
    rank_file = json.loads((job / "profiler-output/framework/ranks/1-algo-2.json").read_text())
    assert meta["ranks"][1]["node_id"] == rank_file["node_id"] == "1-algo-2"
    assert meta["ranks"][1]["clock_offset_us"] == 0.0
    per_node = data.connect().execute(
        "SELECT node, rank, count(*) FROM events GROUP BY ALL ORDER BY 1"
    )
    assert [row[:2] for row in per_node.fetchall()] == [("algo-1", 0), ("algo-2", 1)]
    assert meta["first_timestamp_us"] is None  # metadata reads no data before a refresh
    data.refresh()
    meta = data.metadata
    first, last = (
        data.connect().execute("SELECT min(timestamp_us), max(timestamp_us) FROM system").fetchone()
    )
    assert meta["first_timestamp_us"] <= first and meta["last_timestamp_us"] >= last


def test_sagemaker_output_folder_directly_or_under_a_parent(tmp_path: Path) -> None:
    job = generate_job(tmp_path / "job", **TINY_JOB)
    output = job / "profiler-output"
    (output / "training_job_end.ts").unlink()
    (output / "system" / "training_job_end.ts").unlink()
    (job / "job.json").unlink()
    direct = open_job(output, cache_dir=tmp_path / "c1")
    parent = open_job(job, cache_dir=tmp_path / "c2")
    assert direct.kind == parent.kind == "sagemaker"
    assert parent.name == "job"
    assert direct.metadata["status"] == "Running" and direct.metadata["ended"] is False
    assert _count(direct, "events") == _count(parent, "events") > 0
    (output / "system" / "training_job_end.ts").touch()
    assert direct.metadata["status"] == "Completed" and direct.metadata["ended"] is True


def test_output_without_job_json_names_each_nodes_host_from_its_ranks(tmp_path: Path) -> None:
    # a stepscope.profile() job on two nodes: the Information page said "—" for every host
    from stepscope.ui.discovery import discover_jobs
    from stepscope.ui.info import job_information

    job = generate_job(tmp_path / "jobs" / "job", **{**TINY_JOB, "nodes": 2})
    (job / "job.json").unlink()
    data = open_job(job, cache_dir=tmp_path / "cache")
    assert data.metadata["hosts"] == {"algo-1": "host-1", "algo-2": "host-2"}
    (entry,) = discover_jobs([tmp_path / "jobs"])
    sections = job_information(entry, data.metadata, {})
    (nodes,) = (s for s in sections if s["title"] == "Nodes and hardware")
    assert [row[:2] for row in nodes["table"]] == [["algo-1", "host-1"], ["algo-2", "host-2"]]


def test_a_job_folder_whose_profiler_output_is_not_there_yet(tmp_path: Path) -> None:
    (tmp_path / "starting").mkdir()
    (tmp_path / "starting" / "job.json").write_text('{"name": "starting", "status": "Running"}')
    data = open_job(tmp_path / "starting")
    assert (data.kind, data.name) == ("stepscope", "starting")
    assert data.refresh() is False
    assert data.metadata["status"] == "Running" and data.metadata["nodes"] == []
    assert _count(data, "events") == 0


def test_missing_paths_and_unknown_folders_raise_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(JobNotFoundError, match="nowhere"):
        open_job(tmp_path / "nowhere")
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "cat.jpg").write_bytes(b"\xff\xd8")
    with pytest.raises(UnsupportedFormatError, match="job.json and profiler-output") as info:
        open_job(tmp_path / "photos")
    assert "Kineto" in str(info.value) and "s3://" in str(info.value)
    with pytest.raises(UnsupportedFormatError):
        open_job(tmp_path / "photos" / "cat.jpg")


def test_recorded_sagemaker_folders_load_with_their_event_counts(
    shared_fixtures: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path))
    smdebug = shared_fixtures / "smdebug"
    for name in ("test_traces", "merge_traces", "model_timeline_traces"):
        folder = smdebug / name
        spans = sum(
            sum(1 for e in json.loads(p.read_text()) if e.get("ph") == "X")
            for p in folder.glob("framework/pevents/*/*.json")
        )
        records = sum(len(p.read_text().splitlines()) for p in folder.glob("system/**/*.json"))
        data = open_job(folder)
        assert data.kind == "sagemaker"
        assert (_count(data, "events"), _count(data, "system")) == (spans, records), name
    tf = open_job(smdebug / "tfprofiler_timeline_traces")
    assert _count(tf, "events", "source = 'tfprofiler'") == 798


def test_python_stats_of_a_sagemaker_folder(shared_fixtures: Path, tmp_path: Path) -> None:
    data = open_job(shared_fixtures / "smdebug" / "cprofile_layout", cache_dir=tmp_path)
    folders = list((shared_fixtures / "smdebug" / "cprofile_layout").rglob("python_stats"))
    records = data.python_stats()
    assert len(records) == len(folders) == 3
    assert {r.node_id for r in records} == {"151-algo-1"}


def test_a_detailed_trace_still_being_written_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The profiler writes a trace under a hidden name and publishes it by a rename: a refresh
    while it is written must neither read the half-written file nor warn about it."""
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    job = generate_job(tmp_path / "job", **TINY_JOB)
    step_dir = job / "profiler-output/framework/pytorch/detailed_profiling/2023112222/000000005"
    step_dir.mkdir(parents=True)
    name = "0-algo-1_1700000100000000_1700000101000000.pt.trace.json.gz"
    (step_dir / f".{name}.partial.json").write_text('{"traceEvents": [{"ph": "X", "name": "a"')
    (step_dir / f".{name}.partial.json.gz").write_bytes(b"\x1f\x8b\x08")
    data = open_job(job)
    assert _count(data, "events", "source = 'kineto'") == 0
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_kineto_traces_as_file_folder_and_inside_a_job(
    shared_fixtures: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    two_ranks = shared_fixtures / "kineto" / "two_ranks_one_job"
    folder = open_job(two_ranks)
    assert folder.kind == "kineto"
    assert sorted(folder.metadata["ranks"]) == []  # nothing read yet
    per_rank = dict(
        folder.connect().execute("SELECT rank, count(*) FROM events GROUP BY rank").fetchall()
    )
    assert sorted(per_rank) == [0, 1]
    assert sorted(folder.metadata["ranks"]) == [0, 1]
    assert folder.metadata["ranks"][1]["kineto"]["rank"] == 1
    single = open_job(two_ranks / "sampled_rank-1.json.gz")
    assert single.kind == "kineto" and single.metadata["ended"] is True
    assert _count(single, "events") == per_rank[1]
    assert not (two_ranks / ".stepscope").exists()
    # inside a job, the detailed-profiling trace is read with the node and rank of its name
    job = generate_job(tmp_path / "job", **TINY_JOB)
    step_dir = job / "profiler-output/framework/pytorch/detailed_profiling/2023112222/000000005"
    step_dir.mkdir(parents=True)
    shutil.copy(
        two_ranks / "sampled_rank-1.json.gz",
        step_dir / "1-algo-1_1700000100000000_1700000101000000.pt.trace.json.gz",
    )
    data = open_job(job)
    rows = data.connect().execute(
        "SELECT node, rank, count(*) FROM events WHERE source = 'kineto' GROUP BY ALL"
    )
    assert rows.fetchall() == [("algo-1", 1, per_rank[1])]


def test_a_rank_cut_before_its_events_is_skipped_with_a_warning_naming_it(
    shared_fixtures: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # It was passed over as if it were some other JSON file: the job had one rank fewer and
    # nothing said so.
    two_ranks = shared_fixtures / "kineto" / "two_ranks_one_job"
    folder = tmp_path / "traces"
    folder.mkdir()
    shutil.copy(two_ranks / "sampled_rank-0.json.gz", folder / "rank-0.json.gz")
    text = gzip.decompress((two_ranks / "sampled_rank-1.json.gz").read_bytes())
    cut = folder / "rank-1.json"
    cut.write_bytes(text[: text.index(b'"traceEvents"')])
    (folder / "notes.json").write_text('{"learning_rate": 0.1}')
    data = open_job(folder, cache_dir=tmp_path / "cache")
    with caplog.at_level("WARNING"):
        ranks = data.connect().execute("SELECT DISTINCT rank FROM events").fetchall()
    assert ranks == [(0,)]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert str(cut) in warning and "ends before its traceEvents array" in warning


def _folder_with_rank_0(shared_fixtures: Path, tmp_path: Path) -> Path:
    """A new folder of traces holding a readable rank 0, beside which a test puts a bad rank."""
    folder = tmp_path / "traces"
    folder.mkdir()
    shutil.copy(shared_fixtures / "kineto" / "rank_not_found.json.gz", folder / "rank-0.json.gz")
    return folder


def test_a_file_found_unreadable_before_is_named_again_by_each_new_reader(
    shared_fixtures: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Only the refresh that first read it said so: the next command on the job (a report after
    # an export) left the rank out without a word.
    folder = _folder_with_rank_0(shared_fixtures, tmp_path)
    cut = folder / "rank-1.json"
    cut.write_text('{"schemaVersion": 1, "distributedInfo": {"rank": 1, ')

    def warnings(data: JobData) -> list[str]:
        caplog.clear()
        with caplog.at_level("WARNING", logger="stepscope.store.job"):
            data.refresh()
        return [r.getMessage() for r in caplog.records if r.name == "stepscope.store.job"]

    first = open_job(folder, cache_dir=tmp_path / "cache")
    (warning,) = warnings(first)
    assert str(cut) in warning and "ends before its traceEvents array" in warning
    assert warnings(first) == []  # polling the same job says it once
    later = open_job(folder, cache_dir=tmp_path / "cache")
    (again,) = warnings(later)
    assert str(cut) in again and "ends before its traceEvents array" in again
    assert later.last_refresh_files == []  # remembered: not read again
    assert warnings(later) == []


def test_an_empty_trace_file_is_said_to_be_empty_alone_or_in_a_folder(
    shared_fixtures: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Alone it was "not a format stepscope reads"; in a folder of ranks it was passed over
    # without a word.
    folder = _folder_with_rank_0(shared_fixtures, tmp_path)
    empty = folder / "rank-1.json"
    empty.touch()
    with pytest.raises(CorruptFileError, match=f"{re.escape(str(empty))}: .*the file is empty"):
        open_job(empty)
    data = open_job(folder, cache_dir=tmp_path / "cache")
    with caplog.at_level("WARNING", logger="stepscope.store.job"):
        assert data.connect().execute("SELECT DISTINCT rank FROM events").fetchall() == [(0,)]
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "stepscope.store.job"]
    assert str(empty) in warning and "the file is empty" in warning
