"""One DuckDB scan of many SageMaker files gives each file the rows its per-file reader gives,
and leaves to that reader every file it cannot convert exactly."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from stepscope.store import open_job
from stepscope.store.sagemaker import parse_pevents_name, read_pevents_file
from stepscope.store.sagemaker_scan import ScanFile, scan_pevents_files, scan_system_files
from stepscope.store.sagemaker_system import read_system_file
from stepscope.store.schema import EVENT_SCHEMA, SYSTEM_SCHEMA
from stepscope.testing import TINY_JOB, generate_job

START_US = 1_700_000_000_000_000


def _scan_file(path: Path) -> ScanFile:
    name = parse_pevents_name(path.name)
    assert name is not None, path.name
    return ScanFile(str(path), name.node, name.source, name.rank)


def _per_file(path: Path) -> pa.Table:
    scan = _scan_file(path)
    with open(path, "rb") as stream:
        batches = read_pevents_file(
            stream, path=str(path), source=scan.source, node=scan.node, rank=scan.rank
        )
        return pa.Table.from_batches(list(batches), schema=EVENT_SCHEMA)


def _scan(paths: list[Path]) -> list[pa.Table | None]:
    return scan_pevents_files(duckdb.connect(), [_scan_file(p) for p in paths])


def _write(path: Path, events: list[dict], start_us: int = START_US) -> Path:
    header = [
        {"name": "process_name", "ph": "M", "pid": 0,
         "args": {"start_time_since_epoch_in_micros": start_us}},
        {"name": "process_sort_index", "ph": "M", "pid": 0, "args": {"sort_index": 0}},
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "Step:ModeKeys.TRAIN"}},
        {"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "DataLoaderIter"}},
    ]  # fmt: skip
    path.write_text("[\n" + ",\n".join(json.dumps(e) for e in header + events) + "\n]\n")
    return path


def _span(ts: float, **fields: object) -> dict:
    return {"name": "DataLoaderIter::GetNext", "pid": 2, "ph": "X", "ts": ts, "dur": 3, **fields}


def test_recorded_and_generated_pevents_scan_to_the_per_file_rows(
    shared_fixtures: Path, tmp_path: Path
) -> None:
    files = sorted((shared_fixtures / "smdebug").glob("*/framework/pevents/*/*.json"))
    files = [f for f in files if "horovod" not in f.name]
    job = generate_job(tmp_path / "job", **TINY_JOB)
    files += sorted((job / "profiler-output").glob("framework/pevents/*/*.json"))
    scanned = _scan(files)
    assert sum(t is not None for t in scanned) == len(files)
    for path, table in zip(files, scanned, strict=True):
        assert table is not None
        assert table.equals(_per_file(path)), path.name


def test_args_left_over_or_not_integers_are_converted_as_the_per_file_reader_does(
    tmp_path: Path,
) -> None:
    events = [
        _span(1, args={"worker_id": 1, "pid": 78, "bytes": 512, "tid": 9}),
        _span(2, tid=4, args={"thread_id": "11", "bytes_fetched": 64, "device": 2}),
        _span(3, args={"device": "cpu", "step_num": 7, "tid": 5}),
        _span(4, pid=9, args={"step_num": "not a number", "layer_name": "fc"}),
        _span(5, args={"step_num": 1.5, "pid": True, "device": -1}),
        _span(6, args={"thread_id": 3, "tid": 8, "bytes": None, "bytes_fetched": 16}),
        _span(7, args={"nested": {"a": [1, 2.5, None]}, "text": 'é\n"q"'}),
        _span(8, tid="12", args={}),
        {"name": "no args", "pid": 1, "ph": "X", "ts": 6.5},
        {"name": "no dur", "pid": 5, "ph": "X", "ts": 7, "args": {"step_num": "3", "pid": "-4"}},
    ]
    plain = _write(tmp_path / "1_0-algo-1_model_timeline.json", [_span(0, args={"pid": 1})])
    mixed = _write(tmp_path / "2_0-algo-1_model_timeline.json", events)
    scanned = _scan([plain, mixed])
    for path, table in zip([plain, mixed], scanned, strict=True):
        assert table is not None
        assert table.to_pylist() == _per_file(path).to_pylist()
    rows = scanned[1].to_pylist()  # type: ignore[union-attr]
    assert [r["args"] for r in rows[:3]] == ['{"worker_id":1}', "", '{"device":"cpu"}']
    assert rows[-1]["category"] == "Unknown" and rows[-1]["step"] == 3 and rows[-1]["pid"] == -4


@pytest.mark.parametrize(
    "events",
    [
        [_span(1), {"name": "B", "pid": 1, "ph": "B", "ts": 2}, {"pid": 1, "ph": "E", "ts": 3}],
        [_span(1), {"name": "tick", "pid": 1, "ph": "i", "ts": 2, "s": "g"}],
        [_span(1), {"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "Other"}}],
        [_span(1, pid="main")],
        [_span(1, tid=2.5)],
        [{"pid": 2, "ph": "X", "ts": 1}],
        [_span(1), {"name": "no time", "pid": 2, "ph": "X", "dur": 1}],
        [{**_span(1), "ts": None}],
        # Python's json writes NaN, which is no JSON: the scan raised out of every reader
        [_span(1, args={"step_num": 1, "loss": float("nan")})],
    ],
    ids=[
        "begin-end",
        "instant",
        "renamed-pid",
        "text-pid",
        "float-tid",
        "no-name",
        "no-ts",
        "null-ts",
        "nan-arg",
    ],
)
def test_files_the_scan_cannot_convert_exactly_are_left_to_the_per_file_reader(
    tmp_path: Path, events: list[dict]
) -> None:
    good = _write(tmp_path / "1_0-algo-1_pythontimeline.json", [_span(0)])
    odd = _write(tmp_path / "2_0-algo-1_pythontimeline.json", events)
    good_table, odd_table = _scan([good, odd])
    assert odd_table is None
    assert good_table is not None and good_table.equals(_per_file(good))


def test_a_damaged_file_is_left_out_and_the_others_of_the_scan_kept(tmp_path: Path) -> None:
    first = _write(tmp_path / "1_0-algo-1_pythontimeline.json", [_span(0), _span(1)])
    text = _write(tmp_path / "2_0-algo-1_pythontimeline.json", [_span(2), _span(3)]).read_text()
    damaged = tmp_path / "2_0-algo-1_pythontimeline.json"
    damaged.write_text(text[: text.rindex('"ts"')])
    last = _write(tmp_path / "3_0-algo-1_pythontimeline.json", [_span(4)])
    tables = _scan([first, damaged, last])
    assert tables[1] is None
    assert [t.num_rows for t in tables if t is not None] == [2, 1]


def test_system_records_without_node_name_or_dimension_get_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "1700000040.algo-2.json"
    records = [
        {"Type": "cpu", "Name": "cpu0", "Dimension": "CPUUtilization", "Value": 5,
         "NodeId": "algo-9", "Timestamp": 1700000040.0000005},
        {"Type": "memory", "Value": 40.5, "NodeId": "", "Timestamp": 1700000041.25},
        {"Type": "gpu", "Name": "gpu0", "Value": "7.5", "Timestamp": 1700000042},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "\n")
    (table,) = scan_system_files(duckdb.connect(), [ScanFile(str(path), "algo-2")])
    with open(path, "rb") as stream:
        expected = pa.Table.from_batches(
            list(read_system_file(stream, path=str(path), node="algo-2")), schema=SYSTEM_SCHEMA
        )
    assert table is not None and table.equals(expected)
    assert table.column("node").to_pylist() == ["algo-9", "algo-2", "algo-2"]
    assert table.column("timestamp_us").to_pylist()[0] == 1700000040000001


def test_a_refresh_keeps_every_good_file_and_warns_about_the_damaged_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    job = generate_job(tmp_path / "job", **TINY_JOB)
    expected = open_job(job, cache_dir=tmp_path / "before").table("events").num_rows
    victim = sorted((job / "profiler-output").glob("framework/pevents/*/*_pythontimeline.json"))[1]
    lines = victim.read_text().splitlines()
    victim.write_text("\n".join([*lines[:6], "{not json,", *lines[6:]]) + "\n")
    with caplog.at_level(logging.WARNING, logger="stepscope.store"):
        rows = open_job(job, cache_dir=tmp_path / "after").table("events").num_rows
    assert rows == expected  # every complete event kept
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert victim.name in warning and "line 7 (byte " in warning


def test_a_backlog_scanned_in_many_batches_gives_the_rows_of_one_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A job read for the first time scans its next batch while one is written: the rows, their
    # order and the files they came from must be those of a single scan.
    from stepscope.store import raw_files

    job = generate_job(tmp_path / "job", **TINY_JOB)
    whole = open_job(job, cache_dir=tmp_path / "one-scan")
    scans: list[int] = []
    scan_batch = raw_files.RawReading._scan_batch

    def counted(self: raw_files.RawReading, batch: list[raw_files.RawFile]) -> object:
        scans.append(len(batch))
        return scan_batch(self, batch)

    monkeypatch.setattr(raw_files, "SCAN_BATCH_BYTES", 1)  # a batch per file
    monkeypatch.setattr(raw_files.RawReading, "_scan_batch", counted)
    batched = open_job(job, cache_dir=tmp_path / "many-scans")
    for view in ("system", "events"):
        assert batched.table(view).equals(whole.table(view)), view
    assert len(scans) > 10 and set(scans) == {1}


def test_each_file_of_a_scan_holds_only_its_own_rows_in_memory(tmp_path: Path) -> None:
    # A file's rows can wait in a segment being written for many scans; if they kept the whole
    # scan's buffers alive, converting a long job would hold every scan at once.
    job = generate_job(tmp_path / "job", **TINY_JOB)
    system = sorted((job / "profiler-output").glob("system/incremental/*/*.json"))
    pevents = sorted((job / "profiler-output").glob("framework/pevents/*/*.json"))
    assert len(system) >= 2 and len(pevents) >= 2
    tables = [
        *scan_system_files(duckdb.connect(), [ScanFile(str(p), "algo-1") for p in system]),
        *_scan(pevents),
    ]
    for table in tables:
        assert table is not None and table.num_rows > 0
        # a slice of the scan would count the whole scan's buffers
        assert table.get_total_buffer_size() < 1.5 * table.nbytes + 4096
