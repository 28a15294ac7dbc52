"""The SageMaker Debugger readers on recorded output and on damaged files we write ourselves."""

from __future__ import annotations

import io
import json
import logging
import math
import os
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from stepscope.errors import UnsupportedFormatError
from stepscope.store import open_job
from stepscope.store.horovod import read_horovod_timeline
from stepscope.store.sagemaker import (
    node_and_rank,
    parse_pevents_name,
    read_pevents_file,
)
from stepscope.store.sagemaker_scan import ScanFile, scan_pevents_files, scan_system_files
from stepscope.store.sagemaker_system import read_system_file
from stepscope.store.schema import EVENT_SCHEMA, SYSTEM_SCHEMA


def _system_table(path: Path, node: str = "algo-1") -> pa.Table:
    with open(path, "rb") as stream:
        batches = list(read_system_file(stream, path=str(path), node=node))
    return pa.Table.from_batches(batches, schema=SYSTEM_SCHEMA)


def _scanned_system_tables(paths: list[Path], node: str = "algo-1") -> list[pa.Table | None]:
    """The tables one DuckDB scan gives (None: the file needs the per-file reader)."""
    con = duckdb.connect()
    return scan_system_files(con, [ScanFile(str(path), node) for path in paths])


def _events_table(path: Path, **kwargs: object) -> pa.Table:
    name = parse_pevents_name(path.name)
    assert name is not None, path.name
    params = {"source": name.source, "node": name.node, "rank": name.rank, **kwargs}
    with open(path, "rb") as stream:
        batches = list(read_pevents_file(stream, path=str(path), **params))
    return pa.Table.from_batches(batches, schema=EVENT_SCHEMA)


def _plain_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _plain_array(path: Path) -> list[dict]:
    return json.loads(path.read_text())


# --------------------------------------------------------------------------- system records


@pytest.mark.parametrize("scan", [False, True], ids=["lines", "scan"])
def test_system_files_keep_every_record_with_values_and_microsecond_times(
    shared_fixtures: Path, scan: bool
) -> None:
    folder = shared_fixtures / "smdebug" / "test_traces" / "system" / "incremental"
    files = sorted(folder.glob("*.algo-1.json"))
    assert len(files) == 3
    scanned = _scanned_system_tables(files) if scan else [None] * len(files)
    for path, table in zip(files, scanned, strict=True):
        if not scan:
            table = _system_table(path)
        assert table is not None
        expected = _plain_lines(path)
        assert table.num_rows == len(expected)
        got = table.to_pylist()
        for row, record in zip(got, expected, strict=True):
            assert row["timestamp_us"] == math.floor(record["Timestamp"] * 1e6 + 0.5)
            assert row["value"] == pytest.approx(record["Value"])
            assert (row["type"], row["name"], row["dimension"], row["node"]) == (
                record["Type"],
                record["Name"],
                record["Dimension"],
                record["NodeId"],
            )


def test_truncated_system_file_keeps_complete_records_and_warns_once_with_position(
    shared_fixtures: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = shared_fixtures / "smdebug" / "1591160699.algo-1.json.corrupt"
    lines = path.read_text().splitlines()
    complete = [json.loads(line) for line in lines[:-1]]
    with pytest.raises(json.JSONDecodeError):
        json.loads(lines[-1])
    # a scan never keeps part of a damaged file: the per-file reader does, and warns
    good = shared_fixtures / "smdebug" / "test_traces" / "system" / "incremental"
    good_file = sorted(good.glob("*.algo-1.json"))[0]
    scanned = _scanned_system_tables([good_file, path])
    assert scanned[0] is not None and scanned[0].num_rows == len(_plain_lines(good_file))
    assert scanned[1] is None
    with caplog.at_level(logging.WARNING, logger="stepscope.store"):
        table = _system_table(path)
    assert table.column("value").to_pylist() == [r["Value"] for r in complete]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    offset = sum(len(line) + 1 for line in lines[:-1])
    assert str(path) in warnings[0].getMessage()
    assert f"line {len(lines)} (byte {offset})" in warnings[0].getMessage()


def test_damaged_system_lines_in_the_middle_are_skipped_not_fatal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "1700000040.algo-2.json"
    good = {"Type": "cpu", "Name": "cpu0", "Dimension": "CPUUtilization", "Value": 5}
    path.write_text(
        json.dumps({**good, "Timestamp": 1700000040.5})
        + "\n{not json\n"
        + json.dumps({"Type": "memory", "Value": 40.5, "Timestamp": 1700000041.25})
        + "\n"
        + json.dumps({**good, "Value": 7.0})  # no Timestamp: damaged
        + "\n"
    )
    with caplog.at_level(logging.WARNING, logger="stepscope.store"):
        rows = _system_table(path, node="algo-2").to_pylist()
    assert rows == [
        {
            "timestamp_us": 1700000040500000,
            "node": "algo-2",
            "type": "cpu",
            "name": "cpu0",
            "dimension": "CPUUtilization",
            "value": 5.0,
        },
        {
            "timestamp_us": 1700000041250000,
            "node": "algo-2",
            "type": "memory",
            "name": "",
            "dimension": "",
            "value": 40.5,
        },
    ]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "line 2 (byte " in warning and "skipped 2 damaged record(s)" in warning


@pytest.mark.parametrize("timestamp", ["inf", 1e300, -1e300])
def test_a_system_timestamp_out_of_range_is_a_damaged_record(
    tmp_path: Path, timestamp: object, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "1700000040.algo-1.json"
    good = {"Type": "cpu", "Name": "cpu0", "Dimension": "CPUUtilization", "Value": 5}
    lines = [{**good, "Timestamp": 1700000040.0}, {**good, "Timestamp": timestamp}]
    lines.append({**good, "Timestamp": 1700000041.0})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with caplog.at_level(logging.WARNING, logger="stepscope.store"):
        (scanned,) = _scanned_system_tables([path])
        tables = [_system_table(path)] if scanned is None else [_system_table(path), scanned]
    for table in tables:
        assert table.column("timestamp_us").to_pylist() == [1700000040000000, 1700000041000000]
    assert f"{path}: corrupt data at line 2" in caplog.text


@pytest.mark.parametrize(
    ("name", "dimension", "value"),
    [
        ("gpu0", "GPUUtilization", 1e308),
        ("cpu0", "CPUUtilization", 100.5),
        ("cpu0", "I/OWaitPercentage", -5.0),
        ("gpu0", "GPUMemoryUtilization", math.inf),
        ("MemoryUsedPercent", "", math.nan),
        ("ReceiveBytesPerSecond", "Algorithm", 1e308),
        ("IOPS", "", -1.0),
    ],
)
def test_a_metric_value_out_of_its_range_is_a_damaged_record(
    tmp_path: Path, name: str, dimension: str, value: float, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "1700000040.algo-1.json"
    metric = {"Type": "any", "Name": name, "Dimension": dimension}
    # the limits themselves are values a metric takes: 0 and 100 %, a 400 Gb/s network
    good = [0.0, 5e10] if name in ("ReceiveBytesPerSecond", "IOPS") else [0.0, 100.0]
    records = [
        {**metric, "Value": good[0]},
        {**metric, "Value": value},
        {**metric, "Value": good[1]},
    ]
    lines = [json.dumps({**r, "Timestamp": 1700000040.0 + i}) for i, r in enumerate(records)]
    path.write_text("\n".join(lines) + "\n{not json\n")
    with caplog.at_level(logging.WARNING, logger="stepscope.store"):
        (scanned,) = _scanned_system_tables([path])
        table = _system_table(path)
    assert scanned is None  # the per-file reader keeps the other records and warns
    assert table.column("value").to_pylist() == good
    # the first damaged record in the file, though values are checked after the lines are read
    # (JSON has no inf and NaN: those lines are no JSON to the per-file reader)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"{path}: corrupt data at line 2" in warning
    assert ("out of range" in warning) == math.isfinite(value)
    assert "skipped 2 damaged record(s)" in warning


# --------------------------------------------------------------------------- framework events


def test_node_ids_of_every_era_split_into_node_and_rank() -> None:
    assert node_and_rank("0-algo-1") == ("algo-1", 0)
    assert node_and_rank("12-algo-3") == ("algo-3", 12)
    assert node_and_rank("905-b88ab1bb8259") == ("b88ab1bb8259", -1)
    assert node_and_rank("4487_0000") == ("0000", -1)
    assert node_and_rank("0001") == ("0001", -1)
    name = parse_pevents_name("1594662624718694_905-b88ab1bb8259_pythontimeline.json")
    assert name is not None
    assert (name.end_us, name.source, name.node, name.rank) == (
        1594662624718694,
        "pythontimeline",
        "b88ab1bb8259",
        -1,
    )
    assert parse_pevents_name("0-algo-1_pythontimeline.json.tmp") is None


def _expected_spans(events: list[dict]) -> list[tuple[str, str, float, float]]:
    """(phase, name, absolute start, dur) of the X events, computed with plain json."""
    start = 0
    phases = {}
    spans = []
    for event in events:
        if event.get("ph") == "M" and event["name"] == "process_name":
            start = event["args"].get("start_time_since_epoch_in_micros", start)
            if "name" in event["args"]:
                phases[event["pid"]] = event["args"]["name"]
        elif event.get("ph") == "X":
            spans.append((phases[event["pid"]], event["name"], event["ts"] + start, event["dur"]))
    return spans


def test_pevents_fixtures_give_every_span_with_phase_and_absolute_time(
    shared_fixtures: Path,
) -> None:
    files = sorted((shared_fixtures / "smdebug").glob("*/framework/pevents/*/*.json"))
    files = [f for f in files if "horovod" not in f.name]
    files.append(
        shared_fixtures / "smdebug" / "1589314018481947000_1234-testhost_model_timeline.json"
    )
    assert len(files) == 11
    for path in files:
        table = _events_table(path)
        expected = _expected_spans(_plain_array(path))
        got = list(
            zip(
                table.column("category").to_pylist(),
                table.column("name").to_pylist(),
                table.column("start_us").to_pylist(),
                table.column("dur_us").to_pylist(),
                strict=True,
            )
        )
        assert got == expected, path.name


def test_merge_traces_steps_and_dataset_events(shared_fixtures: Path) -> None:
    folder = shared_fixtures / "smdebug" / "merge_traces" / "framework" / "pevents" / "2020071317"
    timeline = folder / "1594662624718694_905-b88ab1bb8259_pythontimeline.json"
    steps = _events_table(timeline)
    plain = [e for e in _plain_array(timeline) if e.get("ph") == "X"]
    assert steps.column("category").to_pylist().count("Step:ModeKeys.TRAIN") == 30
    assert steps.column("category").to_pylist().count("Step:ModeKeys.EVAL") == 10
    assert steps.column("step").to_pylist() == [int(e["args"]["step_num"]) for e in plain]
    assert set(steps.column("pid").to_pylist()) == {905}
    assert steps.column("args").to_pylist() == [""] * len(plain)
    model_file = folder / "1594662624558411_905-b88ab1bb8259_model_timeline.json"
    model = _events_table(model_file)
    plain_names = [e["name"] for e in _plain_array(model_file) if e.get("ph") == "X"]
    assert model.num_rows == len(plain_names) == 661
    assert model.column("name").to_pylist().count("dataset::GetNext") == plain_names.count(
        "dataset::GetNext"
    )


def _pevents_text(events: list[dict], start_us: int = 1_700_000_000_000_000) -> str:
    header = [
        {
            "name": "process_name",
            "ph": "M",
            "pid": 0,
            "args": {"start_time_since_epoch_in_micros": start_us},
        },  # fmt: skip
        {"name": "process_sort_index", "ph": "M", "pid": 0, "args": {"sort_index": 0}},
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "Step:ModeKeys.TRAIN"}},
        {"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "DataLoaderIter"}},
    ]
    return "[\n" + ",\n".join(json.dumps(e) for e in header + events) + "\n]"


def _step(i: int) -> dict:
    return {
        "name": "Step:ModeKeys.TRAIN",
        "pid": 1,
        "ph": "X",
        "ts": 1000 * i,
        "dur": 900,
        "args": {"pid": 77, "step_num": str(i)},
    }


def test_truncated_pevents_file_keeps_each_complete_event_and_names_the_position(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text = _pevents_text([_step(i) for i in range(6)])
    cut = text.index('"step_num": "5"')  # inside the last event
    path = tmp_path / "1700000000010000_0-algo-1_pythontimeline.json"
    path.write_text(text[:cut])
    with caplog.at_level(logging.WARNING, logger="stepscope.store"):
        table = _events_table(path)
    assert table.column("step").to_pylist() == [0, 1, 2, 3, 4]
    assert table.column("start_us").to_pylist() == [1_700_000_000_000_000 + 1000 * i for i in range(5)]  # fmt: skip
    assert set(table.column("node").to_pylist()) == {"algo-1"}
    assert set(table.column("rank").to_pylist()) == {0}
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    line_no = text[:cut].count("\n") + 1
    byte = len(text[: text.rfind("\n", 0, cut) + 1].encode())
    assert str(path) in warning and f"line {line_no} (byte {byte})" in warning


def test_whole_file_and_line_by_line_paths_give_the_same_rows(tmp_path: Path) -> None:
    events = [_step(i) for i in range(3)]
    loader = {"name": "DataLoaderIter::GetNext", "pid": 2, "ph": "X", "ts": 5, "dur": 3}
    events += [
        {**loader, "args": {"worker_id": 1, "pid": 78, "bytes": 512, "tid": 9}},
        {**loader, "tid": 4, "args": {"thread_id": "11", "bytes_fetched": 64, "device": 2}},
        {**loader, "args": {"device": "cpu", "step_num": 7, "tid": 5}},
        {**loader, "pid": 9, "args": {"step_num": "not a number", "layer_name": "fc"}},
        {"name": "no args", "pid": 1, "ph": "X", "ts": 6.5},
    ]
    text = _pevents_text(events)
    whole = tmp_path / "1_0-algo-1_model_timeline.json"
    whole.write_text(text)
    unclosed = tmp_path / "2_0-algo-1_model_timeline.json"
    unclosed.write_text(text.removesuffix("\n]") + ",\n")  # as an unfinished writer leaves it
    a, b = _events_table(whole).to_pylist(), _events_table(unclosed).to_pylist()
    assert a == b
    got = [(r["pid"], r["tid"], r["bytes"], r["device"], r["step"], r["args"]) for r in a[3:]]
    assert got == [
        (78, 9, 512, -1, -1, '{"worker_id":1}'),
        (-1, 11, 64, 2, -1, ""),
        (-1, 5, -1, -1, 7, '{"device":"cpu"}'),
        (-1, -1, -1, -1, -1, '{"layer_name":"fc"}'),
        (-1, -1, -1, -1, -1, ""),
    ]
    assert [r["category"] for r in a[5:]] == ["DataLoaderIter", "Unknown", "Step:ModeKeys.TRAIN"]
    assert a[-1]["dur_us"] == 0.0 and a[-1]["start_us"] == 1_700_000_000_000_006.5


def _every_reader(tmp_path: Path, events: list[dict]) -> list[pa.Table]:
    """The rows of the same events read by each reader: whole file, line by line, the DuckDB
    scan (when it takes the file) and the Horovod timeline reader."""
    text = _pevents_text(events)
    whole = tmp_path / "1_0-algo-1_model_timeline.json"
    whole.write_text(text)
    unclosed = tmp_path / "2_0-algo-1_model_timeline.json"
    unclosed.write_text(text.removesuffix("\n]") + ",\n")
    (scanned,) = scan_pevents_files(duckdb.connect(), [ScanFile(str(whole), "algo-1", "x", 0)])
    horovod = read_horovod_timeline(io.BytesIO(text.encode()), path="h.json", node="algo-1", rank=0)
    tables = [_events_table(whole), _events_table(unclosed), pa.Table.from_batches(list(horovod))]
    return tables if scanned is None else [*tables, scanned]


def test_args_that_are_not_an_object_are_ignored_by_every_reader(tmp_path: Path) -> None:
    # "rapid" holds "pid": read as an object it crashed the per-file reader
    events = [{**_step(i), "args": args} for i, args in enumerate(["rapid", ["pid", 1], 7])]
    events.insert(1, {"name": "process_name", "ph": "M", "pid": 1, "args": "name"})
    tables = _every_reader(tmp_path, events)
    assert len(tables) == 4  # the scan takes such files too
    for table in tables:
        rows = table.to_pylist()
        got = [(r["start_us"], r["pid"], r["step"], r["args"]) for r in rows]
        assert got == [(1_700_000_000_000_000 + 1000 * i, -1, -1, "") for i in range(3)]


@pytest.mark.parametrize("start", ["soon", None, [1]])
def test_a_damaged_metadata_record_is_skipped_with_a_warning(
    tmp_path: Path, start: object, caplog: pytest.LogCaptureFixture
) -> None:
    damaged = {
        "name": "process_name",
        "ph": "M",
        "pid": 0,
        "args": {"start_time_since_epoch_in_micros": start},
    }
    events = [_step(0), damaged, _step(1)]
    with caplog.at_level(logging.WARNING, logger="stepscope.store"):
        tables = _every_reader(tmp_path, events)
    for table in tables:
        got = [(r["start_us"], r["step"]) for r in table.to_pylist()]
        assert got == [(1_700_000_000_000_000, 0), (1_700_000_000_001_000, 1)]
    assert "corrupt data at line 7" in caplog.text


@pytest.mark.parametrize(
    "bad", [{"ts": 1e300}, {"ts": "nan"}, {"ts": "-inf"}, {"dur": 1e300}, {"dur": "nan"}]
)
def test_an_event_time_no_timestamp_holds_is_a_damaged_record(
    tmp_path: Path, bad: dict, caplog: pytest.LogCaptureFixture
) -> None:
    # such a time broke every query that shows times as text (PandasFrame's frames)
    events = [_step(0), {**_step(1), **bad}, _step(2)]
    with caplog.at_level(logging.WARNING, logger="stepscope.store"):
        tables = _every_reader(tmp_path, events)
    for table in tables:
        assert table.column("step").to_pylist() == [0, 2]
    assert "corrupt data at line 7" in caplog.text


@pytest.mark.parametrize("dur", [-50, -0.25])
def test_a_span_with_a_negative_duration_is_a_damaged_record(
    tmp_path: Path, dur: float, caplog: pytest.LogCaptureFixture
) -> None:
    # it was kept: a span that ends before it starts took time off every sum of durations
    events = [_step(0), {**_step(1), "dur": dur}, _step(2)]
    with caplog.at_level(logging.WARNING, logger="stepscope.store"):
        tables = _every_reader(tmp_path, events)
    for table in tables:
        assert table.column("step").to_pylist() == [0, 2]
    assert "corrupt data at line 7" in caplog.text and "negative" in caplog.text


def test_integers_beyond_64_bits_read_as_missing(tmp_path: Path) -> None:
    huge = 10**22
    events = [
        {**_step(0), "args": {"step_num": str(huge), "pid": huge, "worker_id": 1}},
        {**_step(1), "args": {"bytes": -huge}},
    ]
    for table in _every_reader(tmp_path, events):
        rows = table.to_pylist()
        assert [(r["step"], r["pid"], r["bytes"]) for r in rows] == [(-1, -1, -1), (-1, -1, -1)]
        assert rows[0]["args"] == '{"worker_id":1}'


def test_files_too_large_to_parse_whole_are_read_line_by_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stepscope.store import sagemaker

    path = tmp_path / "1_0-algo-1_pythontimeline.json"
    path.write_text(_pevents_text([_step(i) for i in range(40)]))
    whole = _events_table(path)
    monkeypatch.setattr(sagemaker, "_WHOLE_FILE_MAX_BYTES", 333)  # cuts a line in two
    assert _events_table(path).to_pylist() == whole.to_pylist()
    assert whole.num_rows == 40


def test_a_json_object_is_not_a_framework_trace(tmp_path: Path) -> None:
    path = tmp_path / "1_0-algo-1_pythontimeline.json"
    path.write_text('{"Type": "cpu"}\n')
    with pytest.raises(UnsupportedFormatError, match="Chrome trace-event JSON array"):
        _events_table(path)


# --------------------------------------------------------------------------- horovod


def _expected_horovod(events: list[dict]) -> tuple[int, int, int]:
    """(X spans, B/E pairs, instants) counted with plain json, pairing per pid."""
    spans = sum(1 for e in events if e.get("ph") == "X")
    instants = sum(1 for e in events if e.get("ph") == "i")
    open_b: dict[int, int] = {}
    pairs = 0
    for e in events:
        if e.get("ph") == "B":
            open_b[e["pid"]] = open_b.get(e["pid"], 0) + 1
        elif e.get("ph") == "E" and open_b.get(e["pid"]):
            open_b[e["pid"]] -= 1
            pairs += 1
    return spans, pairs, instants


def test_horovod_timelines_pair_begin_and_end_and_keep_instants(shared_fixtures: Path) -> None:
    small = shared_fixtures / "smdebug" / "horovod_timeline_small.json"
    with open(small, "rb") as stream:
        table = pa.Table.from_batches(
            list(read_horovod_timeline(stream, path=str(small), node="algo-1", rank=0))
        )
    spans, pairs, instants = _expected_horovod(_plain_array(small))
    assert pairs > 0 and instants > 0
    assert table.num_rows == spans + pairs + instants
    assert table.column("ph").to_pylist().count("i") == instants
    negotiations = [row for row in table.to_pylist() if row["name"] == "NEGOTIATE_ALLREDUCE"]
    assert len(negotiations) == pairs
    assert all(row["dur_us"] > 0 and row["ph"] == "X" for row in negotiations)
    assert set(table.column("source").to_pylist()) == {"horovod"}
    for path in sorted((shared_fixtures / "smdebug" / "horovod_timeline_traces").rglob("*.json")):
        spans, pairs, instants = _expected_horovod(_plain_array(path))
        assert _events_table(path).num_rows == spans + pairs + instants


def test_a_raw_horovod_timeline_is_placed_at_the_time_it_was_written(
    shared_fixtures: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Horovod's ts count from its own clock (the machine's uptime here: about 21 hours).
    small = shared_fixtures / "smdebug" / "horovod_timeline_small.json"
    timeline = tmp_path / "job" / "framework" / "horovod_timeline.json"
    timeline.parent.mkdir(parents=True)
    timeline.write_bytes(small.read_bytes())
    written_s = 1_700_000_000
    os.utime(timeline, (written_s, written_s))
    raw = pa.Table.from_batches(
        list(read_horovod_timeline(io.BytesIO(small.read_bytes()), path="h"))
    )
    raw_ends = pc.add(raw.column("start_us"), raw.column("dur_us"))
    with caplog.at_level(logging.WARNING, logger="stepscope.store"):
        job = open_job(tmp_path / "job", cache_dir=tmp_path / "cache")
        events = job.table("events")
    ends = pc.add(events.column("start_us"), events.column("dur_us"))
    # the last event ends when the file was last written; the spacing is Horovod's
    assert pc.max(ends).as_py() == written_s * 1_000_000
    shift = written_s * 1_000_000 - pc.max(raw_ends).as_py()
    assert sorted(events.column("start_us").to_pylist()) == sorted(
        t + shift for t in raw.column("start_us").to_pylist()
    )
    assert "horovod_timeline.json" in caplog.text and "modification time" in caplog.text


def test_instants_and_begin_end_pairs_in_a_pevents_file(tmp_path: Path) -> None:
    path = tmp_path / "9_3-algo-2_horovod_timeline.json"
    events = [
        {"name": "ALLREDUCE", "pid": 1, "ph": "B", "ts": 10, "args": {"bytes": 64}},
        {"name": "CYCLE_START", "pid": 1, "ph": "i", "ts": 12, "s": "g"},
        {"name": "", "pid": 1, "ph": "E", "ts": 30},
        {"name": "", "pid": 2, "ph": "E", "ts": 31},  # no begin: left out
    ]
    path.write_text(_pevents_text(events, start_us=1000))
    rows = _events_table(path).to_pylist()
    assert [(r["name"], r["ph"], r["start_us"], r["dur_us"]) for r in rows] == [
        ("CYCLE_START", "i", 1012.0, 0.0),
        ("ALLREDUCE", "X", 1010.0, 20.0),
    ]
    assert rows[1]["bytes"] == 64 and rows[1]["category"] == "Step:ModeKeys.TRAIN"
    assert {(r["node"], r["rank"], r["source"]) for r in rows} == {("algo-2", 3, "horovod")}


def test_reading_from_an_in_memory_stream_works_like_a_file() -> None:
    stream = io.BytesIO(_pevents_text([_step(0)]).encode())
    (batch,) = read_pevents_file(
        stream, path="<memory>", source="pythontimeline", node="n", rank=-1
    )
    assert batch.num_rows == 1
