"""TensorFlow profiler traces: start time from the .metadata marker, or a warned fallback."""

from __future__ import annotations

import calendar
import gzip
import json
import logging
import time
from pathlib import Path

import pyarrow as pa
import pytest

from stepscope.errors import CorruptFileError, UnsupportedFormatError
from stepscope.store.tfprofiler import parse_tf_metadata_name, read_tf_profiler_trace


def _read(path: Path, marker_folder: Path | None) -> pa.Table:
    marker = None
    if marker_folder is not None:
        (metadata,) = marker_folder.glob("*.metadata")
        marker = parse_tf_metadata_name(metadata.name)
    return pa.Table.from_batches(
        list(read_tf_profiler_trace(path.read_bytes(), path=str(path), marker=marker))
    )


def _plain_spans(path: Path) -> list[dict]:
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return [e for e in events if e.get("ph") == "X"]


def test_trace_with_marker_is_placed_at_the_marker_start(shared_fixtures: Path) -> None:
    step = (
        shared_fixtures
        / "smdebug/tfprofiler_timeline_traces/framework/tensorflow/detailed_profiling/2020080513/000000000"
    )
    (trace,) = step.rglob("*.trace.json.gz")
    table = _read(trace, step)
    spans = _plain_spans(trace)
    (metadata,) = step.glob("*.metadata")
    start_us = int(metadata.name.split("_")[1])
    assert table.num_rows == len(spans) == 798
    assert table.column("start_us").to_pylist() == [e["ts"] + start_us for e in spans]
    assert table.column("tid").to_pylist() == [e["tid"] for e in spans]
    assert set(table.column("category").to_pylist()) == {"/host:CPU"}
    assert set(table.column("node").to_pylist()) == {"8c859046be41.ant.amazon.com"}


def test_trace_without_marker_warns_and_uses_the_profile_folder_time(
    shared_fixtures: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = shared_fixtures / "smdebug/tfprofiler_local_missing_metadata"
    (trace,) = root.rglob("*.trace.json.gz")
    assert not list(root.rglob("*.metadata"))
    with caplog.at_level(logging.WARNING, logger="stepscope.store"):
        table = _read(trace, None)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert str(trace) in warning and ".metadata" in warning
    folder_s = calendar.timegm(time.strptime(trace.parent.name, "%Y_%m_%d_%H_%M_%S"))
    spans = _plain_spans(trace)
    assert table.num_rows == len(spans)
    assert table.column("start_us").to_pylist() == pytest.approx(
        [e["ts"] + folder_s * 1e6 for e in spans]
    )
    assert set(table.column("node").to_pylist()) == {"ip-172-31-19-241"}


def test_gpu_device_events_carry_the_device_index() -> None:
    trace = {
        "traceEvents": [
            {
                "ph": "M",
                "pid": 3,
                "name": "process_name",
                "args": {"name": "/device:GPU:3 (Tesla)"},
            },
            {"ph": "M", "pid": 9, "name": "process_name", "args": {"name": "/host:CPU"}},
            {"ph": "X", "pid": 3, "tid": 1, "ts": 10, "dur": 5, "name": "MatMul"},
            {"ph": "X", "pid": 9, "tid": 2, "ts": 11, "dur": 1, "name": "Send"},
        ]
    }
    marker = parse_tf_metadata_name("7-algo-2_1000_2000.metadata")
    data = gzip.compress(json.dumps(trace).encode())
    (batch,) = read_tf_profiler_trace(data, path="t.trace.json.gz", marker=marker)
    rows = batch.to_pylist()
    assert [(r["name"], r["device"], r["start_us"]) for r in rows] == [
        ("MatMul", 3, 1010.0),
        ("Send", -1, 1011.0),
    ]
    assert {(r["node"], r["rank"], r["source"]) for r in rows} == {("algo-2", 7, "tfprofiler")}


def test_files_that_are_not_tf_profiler_traces_raise_clear_errors() -> None:
    for content in (
        gzip.compress(b"[1, 2]"),
        gzip.compress(b'{"displayTimeUnit": "ns"}'),
        gzip.compress(b"hello"),
        b"hello, not gzip",
    ):
        with pytest.raises(UnsupportedFormatError, match="x.trace.json.gz.*traceEvents"):
            list(read_tf_profiler_trace(content, path="x.trace.json.gz", marker=None))


def test_an_empty_trace_is_said_to_be_empty() -> None:
    with pytest.raises(CorruptFileError, match="x.trace.json.gz: .*byte 0: the file is empty"):
        list(read_tf_profiler_trace(b"", path="x.trace.json.gz", marker=None))


def _marker_events(n: int) -> list[dict]:
    metadata = {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}}
    spans = [
        {"ph": "X", "pid": 1, "tid": 2, "ts": 10 * i, "dur": 5, "name": f"op{i}"} for i in range(n)
    ]
    return [metadata, *spans]


def test_damaged_events_are_skipped_one_by_one_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events = _marker_events(4)
    events[2] = {"ph": "X", "pid": 1, "tid": 2, "dur": 5, "name": "no ts"}
    events.insert(4, {"ph": "X", "pid": 1, "tid": 2, "ts": "soon", "dur": 5, "name": "text ts"})
    events.insert(5, 7)
    data = gzip.compress(json.dumps({"traceEvents": events}).encode())
    with caplog.at_level(logging.WARNING, logger="stepscope.store"):
        batches = list(read_tf_profiler_trace(data, path="d.trace.json.gz", marker=None))
    names = pa.Table.from_batches(batches).column("name").to_pylist()
    assert names == ["op0", "op2", "op3"]
    damage = [r.getMessage() for r in caplog.records if "corrupt data" in r.getMessage()]
    assert len(damage) == 1
    assert "d.trace.json.gz" in damage[0] and "event 2" in damage[0] and "3 damaged" in damage[0]


def test_truncated_trace_keeps_the_events_before_the_cut(
    shared_fixtures: Path, caplog: pytest.LogCaptureFixture
) -> None:
    step = (
        shared_fixtures
        / "smdebug/tfprofiler_timeline_traces/framework/tensorflow/detailed_profiling/2020080513/000000000"
    )
    (trace,) = step.rglob("*.trace.json.gz")
    data = trace.read_bytes()
    spans = _plain_spans(trace)
    with caplog.at_level(logging.WARNING, logger="stepscope.store"):
        batches = list(read_tf_profiler_trace(data[: len(data) * 2 // 3], path="t", marker=None))
    names = pa.Table.from_batches(batches).column("name").to_pylist()
    assert 0 < len(names) < len(spans)
    assert names == [e["name"] for e in spans[: len(names)]]
    (warning,) = [r.getMessage() for r in caplog.records if "ends early" in r.getMessage()]
    assert warning.startswith("t: ") and "compressed byte" in warning
    # cut before its first event: a damaged trace, not some other kind of file
    with pytest.raises(CorruptFileError, match="t: corrupt data at compressed byte .* early"):
        list(read_tf_profiler_trace(data[:60], path="t", marker=None))
