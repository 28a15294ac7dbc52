"""The Kineto reader on every recorded trace, checked against the raw JSON read independently."""

from __future__ import annotations

import codecs
import gzip
import json
import logging
import re
import tempfile
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from tests.analysis import _kineto_synthetic as synthetic

from stepscope.analysis import PandasFrame
from stepscope.errors import CorruptFileError, UnsupportedFormatError
from stepscope.store import (
    EVENT_SCHEMA,
    _kineto_columns,
    _kineto_json,
    is_kineto_trace,
    open_job,
    read_kineto_trace,
    read_trace_head,
)
from stepscope.store._kineto_json import extract_event_array

TRACES = [
    "a100_alexnet_cuda_sync.json.gz",
    "a100_cupti_counters.json.gz",
    "a100_rank0of2_nccl.json.gz",
    "a100_triton.json.gz",
    "cpu_only_gloo_rank34of300.json.gz",
    "distributed_info_not_found.json.gz",
    "mi250_rocm.json.gz",
    "rank_not_found.json.gz",
    "v100_rank1of2_memory.json.gz",
    "v100_single_ns_resolution.pt.trace.json.gz",
    "two_ranks_one_job/sampled_rank-0.json.gz",
    "two_ranks_one_job/sampled_rank-1.json.gz",
    "legacy_2021_gpu_metrics_input.json",
]
KERNEL_CATEGORIES = {"kernel", "Kernel"}


def _raw(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        return json.load(handle)


def _table(path: Path, **kwargs) -> tuple[pa.Table, dict]:
    trace = read_kineto_trace(path, **kwargs)
    batches = list(trace.batches())
    assert all(batch.schema.equals(EVENT_SCHEMA) for batch in batches)
    table = pa.Table.from_batches(batches, schema=EVENT_SCHEMA)
    return table, trace.metadata


@pytest.mark.parametrize("name", TRACES)
def test_every_trace_loads_with_its_events(shared_fixtures, name, caplog):
    path = shared_fixtures / "kineto" / name
    raw = _raw(path)["traceEvents"]
    assert is_kineto_trace(path)
    with caplog.at_level(logging.WARNING):
        table, metadata = _table(path)
    phases = Counter(event.get("ph") for event in raw)
    assert table.num_rows == phases["X"] + phases["i"] + phases["C"]
    assert metadata["flow_events"] == phases["s"] + phases["f"]
    assert metadata["metadata_events"] == phases["M"]
    categories = Counter(table["category"].to_pylist())
    assert categories["kernel"] == sum(e.get("cat") in KERNEL_CATEGORIES for e in raw)
    assert set(table["source"].to_pylist()) == {"kineto"}
    assert not set(categories) & {"Operator", "Runtime", "Kernel", "Memcpy", "Memset"}
    durations = sorted(float(e.get("dur", 0)) for e in raw if e.get("ph") == "X")
    assert sorted(table.filter(pc.equal(table["ph"], "X"))["dur_us"].to_pylist()) == (
        pytest.approx(durations)
    )


def test_legacy_names_and_string_streams(shared_fixtures):
    path = shared_fixtures / "kineto" / "legacy_2021_gpu_metrics_input.json"
    raw = _raw(path)["traceEvents"]
    table, metadata = _table(path)
    categories = Counter(table["category"].to_pylist())
    assert categories["cpu_op"] == sum(e.get("cat") == "Operator" for e in raw)
    assert categories["cuda_runtime"] == sum(e.get("cat") == "Runtime" for e in raw)
    assert categories["gpu_memcpy"] == 2
    kernels = table.filter(pc.equal(table["category"], "kernel")).to_pylist()
    # tid "stream 7" and the 2021 "external id" key.
    assert {k["stream"] for k in kernels} == {7}
    assert {k["device"] for k in kernels} == {0}
    assert min(k["external_id"] for k in kernels) == 41
    assert metadata["device_properties"][0]["name"] == "Tesla V100-DGXS-32GB"


def test_ns_resolution_and_base_time(shared_fixtures):
    folder = shared_fixtures / "kineto"
    ns_path = folder / "v100_single_ns_resolution.pt.trace.json.gz"
    first = next(e for e in _raw(ns_path)["traceEvents"] if e.get("cat") == "kernel")
    table, metadata = _table(ns_path)
    assert metadata["display_time_unit"] == "ns"
    assert metadata["base_time_ns"] is None
    kernel = table.filter(pc.equal(table["correlation"], first["args"]["correlation"]))
    # µs floats with ns fractions stay µs: no scaling by the display unit.
    assert kernel["start_us"][0].as_py() == pytest.approx(first["ts"], abs=0.25)
    assert kernel["dur_us"][0].as_py() == pytest.approx(first["dur"])
    assert metadata["steps"] == [101, 102, 103, 104, 105]

    base_path = folder / "a100_rank0of2_nccl.json.gz"
    raw = _raw(base_path)
    first = next(e for e in raw["traceEvents"] if e.get("cat") == "kernel")
    table, metadata = _table(base_path)
    assert metadata["base_time_ns"] == raw["baseTimeNanoseconds"]
    kernel = table.filter(pc.equal(table["correlation"], first["args"]["correlation"]))
    expected = raw["baseTimeNanoseconds"] / 1000 + first["ts"]
    assert kernel["start_us"][0].as_py() == pytest.approx(expected, abs=0.5)


@pytest.fixture(scope="module")
def v100_memory(shared_fixtures):
    path = shared_fixtures / "kineto" / "v100_rank1of2_memory.json.gz"
    return _raw(path)["traceEvents"], _table(path)[0]


def test_steps_by_containment_and_by_launch(v100_memory):
    raw, table = v100_memory
    steps = [
        (int(e["name"].split("#")[1]), e["ts"], e["ts"] + e["dur"])
        for e in raw
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    ]

    def step_at(ts: float) -> int:
        return next((n for n, lo, hi in steps if lo <= ts < hi), -1)

    launch_step = {
        e["args"]["correlation"]: step_at(e["ts"]) for e in raw if e.get("cat") == "cuda_runtime"
    }
    expected_ops = Counter(step_at(e["ts"]) for e in raw if e.get("cat") == "cpu_op")
    expected_kernels = Counter(
        launch_step.get(e["args"]["correlation"], step_at(e["ts"]))
        for e in raw
        if e.get("cat") == "kernel"
    )
    rows = table.select(["category", "step"]).to_pylist()
    assert Counter(r["step"] for r in rows if r["category"] == "cpu_op") == expected_ops
    assert Counter(r["step"] for r in rows if r["category"] == "kernel") == expected_kernels


def test_memory_events(v100_memory):
    raw_events, table = v100_memory
    raw = [e for e in raw_events if e.get("name") == "[memory]"]
    memory = table.filter(pc.equal(table["name"], "[memory]")).to_pylist()
    assert len(memory) == len(raw) == 28_010
    assert {m["category"] for m in memory} == {"cpu_instant_event"}
    assert {m["ph"] for m in memory} == {"i"}
    assert sum(m["bytes"] for m in memory) == sum(e["args"]["Bytes"] for e in raw)
    cuda = [m for m in memory if m["device"] >= 0]
    assert len(cuda) == sum(e["args"]["Device Type"] == 1 for e in raw)
    assert "Total Allocated" in json.loads(cuda[0]["args"])


def test_triton_and_rocm_launches(shared_fixtures):
    folder = shared_fixtures / "kineto"
    table, _ = _table(folder / "a100_triton.json.gz")
    rows = table.to_pylist()
    driver = next(r for r in rows if r["category"] == "cuda_driver")
    kernel = next(r for r in rows if r["category"] == "kernel")
    assert driver["name"] == "cuLaunchKernel"
    assert kernel["correlation"] == driver["correlation"]
    op = next(
        r
        for r in rows
        if r["name"] == "triton_poi_fused_add_cos_sin_0" and r["category"] == "cpu_op"
    )
    assert json.loads(op["args"])["Input type"] == ["float", "float", "float", "Scalar"]

    table, _ = _table(folder / "mi250_rocm.json.gz")
    rows = table.to_pylist()
    assert any(r["name"] == "hipLaunchKernel" for r in rows)
    kernels = [r for r in rows if r["category"] == "kernel"]
    assert kernels and all(r["device"] == r["pid"] for r in kernels)
    launched = {r["correlation"] for r in rows if r["category"] == "cuda_runtime"}
    assert all(r["correlation"] in launched for r in kernels)


def test_rank_from_distributed_info_hint_file_name_or_zero(shared_fixtures, tmp_path, caplog):
    folder = shared_fixtures / "kineto"
    assert read_kineto_trace(folder / "cpu_only_gloo_rank34of300.json.gz").metadata["rank"] == 34
    with caplog.at_level(logging.WARNING, logger="stepscope.store.kineto"):
        missing = read_kineto_trace(folder / "rank_not_found.json.gz").metadata
    assert missing["rank"] == 0
    assert "no distributedInfo.rank" in missing["warnings"][0]
    assert "assuming rank 0" in caplog.text
    assert read_kineto_trace(folder / "rank_not_found.json.gz", rank_hint=5).metadata["rank"] == 5

    data = (folder / "distributed_info_not_found.json.gz").read_bytes()
    for name, rank in [("worker_rank-3.json.gz", 3), ("2-algo-1_100_200.pt.trace.json.gz", 2)]:
        (tmp_path / name).write_bytes(data)
        metadata = read_kineto_trace(tmp_path / name).metadata
        assert metadata["rank"] == rank
        assert "taken from the file name" in metadata["warnings"][0]
    plain = read_kineto_trace(folder / "distributed_info_not_found.json.gz").metadata
    assert plain["rank"] == 0 and "has no distributedInfo" in plain["warnings"][0]


def _truncated(data: bytes) -> bytes:
    return data[: len(data) * 6 // 10]


def _corrupted(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + b"\xff" * 256 + data[middle + 256 :]


@pytest.mark.parametrize(
    ("damage", "reason"), [(_truncated, "truncated"), (_corrupted, "gzip data is corrupt")]
)
def test_damaged_gzip_keeps_what_was_read_before_the_damage(
    shared_fixtures, tmp_path, caplog, damage, reason
):
    full = shared_fixtures / "kineto" / "a100_rank0of2_nccl.json.gz"
    damaged = tmp_path / "damaged.json.gz"
    damaged.write_bytes(damage(full.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="stepscope.store.kineto"):
        trace = read_kineto_trace(damaged)
    complete = read_kineto_trace(full).metadata["event_count"]
    assert 0 < trace.metadata["event_count"] < complete
    warning = " ".join(trace.metadata["warnings"])
    assert str(damaged) in warning and reason in warning and "compressed byte" in warning
    assert str(damaged) in caplog.text


def test_json_cut_mid_event_keeps_every_whole_event(shared_fixtures, tmp_path):
    path = shared_fixtures / "kineto" / "legacy_2021_gpu_metrics_input.json"
    text = path.read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[: len(text) // 2])
    events = json.loads(text)["traceEvents"]
    trace = read_kineto_trace(cut)
    assert trace.metadata["event_count"] > 0
    assert "ends early" in " ".join(trace.metadata["warnings"])
    assert trace.metadata["event_count"] + trace.metadata["flow_events"] < len(events)


def test_a_trace_cut_before_its_base_time_says_its_times_are_relative(tmp_path, caplog):
    base_ns = 1_700_000_000_000_000_000  # written after the events, as Kineto does
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": 1,
            "ts": 1000 + 10 * i,
            "dur": 5,
        }
        for i in range(2000)
    ]
    text = json.dumps({"schemaVersion": 1, "traceEvents": events, "baseTimeNanoseconds": base_ns})
    whole, cut = tmp_path / "whole.json", tmp_path / "cut.json"
    whole.write_text(text)
    cut.write_text(text[: len(text) * 6 // 10])
    complete = read_kineto_trace(whole)
    assert complete.table()["start_us"][0].as_py() == base_ns / 1000 + 1000
    assert not [w for w in complete.metadata["warnings"] if "baseTimeNanoseconds" in w]
    with caplog.at_level(logging.WARNING, logger="stepscope.store.kineto"):
        partial = read_kineto_trace(cut)
    assert partial.table()["start_us"][0].as_py() == 1000  # the trace's own clock
    warning = next(w for w in partial.metadata["warnings"] if "baseTimeNanoseconds" in w)
    assert str(cut) in warning and "cut short" in warning and "not Unix times" in warning
    assert "not Unix times" in caplog.text


def test_not_a_trace(shared_fixtures, tmp_path):
    other = tmp_path / "other.json"
    other.write_text('{"foo": 1}')
    garbage = tmp_path / "garbage.json.gz"
    garbage.write_bytes(b"not json at all")
    for path in (other, garbage):
        assert not is_kineto_trace(path)
        with pytest.raises(UnsupportedFormatError):
            read_kineto_trace(path)
    smdebug = shared_fixtures / "smdebug"
    assert not is_kineto_trace(next(smdebug.rglob("*pythontimeline.json")))
    assert not is_kineto_trace(next(smdebug.rglob("*.trace.json.gz")))


@pytest.mark.parametrize("compressed", [False, True])
def test_a_trace_cut_before_its_events_is_a_damaged_trace(shared_fixtures, tmp_path, compressed):
    # It was taken for some other JSON file: a folder of ranks passed over that rank silently.
    text = gzip.decompress(
        (shared_fixtures / "kineto" / "two_ranks_one_job" / "sampled_rank-1.json.gz").read_bytes()
    )
    cut_text = text[: text.index(b'"traceEvents"') - 10]
    cut = tmp_path / ("rank-1.json.gz" if compressed else "rank-1.json")
    if compressed:  # the gzip stream itself is cut, short of the key
        cut.write_bytes(gzip.compress(text)[:150])
        cut_text = zlib.decompressobj(wbits=31).decompress(cut.read_bytes())
        assert b'"traceEvents"' not in cut_text
    else:
        cut.write_bytes(cut_text)
    assert is_kineto_trace(cut)
    with pytest.raises(CorruptFileError) as raised:
        read_kineto_trace(cut)
    assert raised.value.path == str(cut)
    assert "ends before its traceEvents array" in str(raised.value)
    assert raised.value.position.endswith(f"byte {len(cut_text)}")
    # a whole JSON document with Kineto's header keys but no events is no trace
    whole = tmp_path / "settings.json"
    whole.write_bytes(b'{"schemaVersion": 1}')
    assert not is_kineto_trace(whole)


def test_a_trace_whose_header_outgrows_the_sniff_is_a_trace(tmp_path):
    # The distributedInfo of a job of 40,000 ranks lists them all, past the 256 KB sniffed:
    # the trace was no trace, alone or in a folder of ranks (left out without a word).
    ranks = 40_000
    group = {"pg_name": "0", "pg_desc": "default_pg", "pg_size": ranks, "ranks": list(range(ranks))}
    info = {"backend": "nccl", "rank": 5, "world_size": ranks, "pg_config": [group]}
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "dur": 5}
    events = [{**op, "ts": 1_700_000_000_000_000 + 10 * i} for i in range(10)]
    text = json.dumps({"schemaVersion": 1, "distributedInfo": info, "traceEvents": events})
    assert text.index('"traceEvents"') > 256 << 10
    folder = tmp_path / "traces"
    folder.mkdir()
    path = folder / "worker.json"
    path.write_text(text)
    assert is_kineto_trace(path)
    data = open_job(folder, cache_dir=tmp_path / "cache")
    assert data.connect().execute("SELECT rank, count(*) FROM events GROUP BY rank").fetchall() == [
        (5, 10)
    ]
    # a big JSON document of some other kind is still none
    other = tmp_path / "dataset.json"
    other.write_text(json.dumps({"files": [f"shard-{i}" for i in range(40_000)]}))
    assert not is_kineto_trace(other)


def test_an_empty_file_is_said_to_be_empty(tmp_path):
    # It was "not a format stepscope reads", as if it held something else.
    for name, content, reason in (
        ("rank-0.json", b"", "the file is empty"),
        ("rank-0.json.gz", gzip.compress(b""), "the file holds no text once gunzipped"),
    ):
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(CorruptFileError, match=f"{re.escape(str(path))}: .*byte 0: {reason}"):
            read_kineto_trace(path)


def test_python_function_tree_ids_stay_in_args(tmp_path):
    from tests.analysis import _kineto_synthetic as synthetic

    table, metadata = _table(synthetic.write_trace(tmp_path))
    frame = table.filter(pc.equal(table["category"], "python_function")).to_pylist()[0]
    assert json.loads(frame["args"]) == {"Python id": 7, "Python parent id": 3}
    assert metadata["flow_events"] == 2
    assert metadata["steps"] == [1, 2]


@pytest.mark.parametrize("name", ["a100_rank0of2_nccl.json.gz", "mi250_rocm.json.gz"])
def test_chunked_path_reads_the_same_events(shared_fixtures, tmp_path, monkeypatch, name):
    # Without room for the temporary copy the reader parses chunk by chunk instead.
    path = shared_fixtures / "kineto" / name
    fast = read_kineto_trace(path, rank_hint=0)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    chunked = read_kineto_trace(path, rank_hint=0)
    a, b = fast.table(), chunked.table()
    assert a.drop_columns(["args"]).equals(b.drop_columns(["args"]))
    assert [json.loads(x or "{}") for x in a["args"].to_pylist()] == [
        json.loads(x or "{}") for x in b["args"].to_pylist()
    ]
    assert fast.metadata["flow_events"] == chunked.metadata["flow_events"]


def test_a_copy_cut_into_many_parts_reads_the_same_events(tmp_path, monkeypatch):
    # The profiler's layout: one top-level event per indented block, "},\n  {" between two.
    events = synthetic.events() * 20
    text = '{"schemaVersion": 1, "traceEvents": [\n  '
    text += ",\n  ".join(json.dumps(event) for event in events)
    text += '\n  ], "traceName": "cut"}'
    path = tmp_path / "cut.json"
    path.write_text(text)
    whole = read_kineto_trace(path, rank_hint=0)

    part_counts: list[int] = []

    def counted(*args, **kwargs):
        parts = extract_event_array(*args, **kwargs)
        part_counts.append(len(parts or []))
        return parts

    monkeypatch.setattr(_kineto_json, "PART_BYTES", 2048)
    monkeypatch.setattr(_kineto_columns, "extract_event_array", counted)
    cut = read_kineto_trace(path, rank_hint=0)
    assert part_counts[0] > 5  # the copy was really cut
    assert cut.table().equals(whole.table())
    assert cut.metadata["trace_name"] == "cut"
    assert cut.metadata["flow_events"] == whole.metadata["flow_events"] > 0


def test_chunked_path_takes_odd_values_as_the_fast_path_does(tmp_path, monkeypatch):
    # A damaged trace is read chunk by chunk: a null or stray value in one event must give the
    # fast path's row, not fail the chunk (which lost the whole file, or raised from pyarrow).
    base = {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 10.0, "dur": 5.0}
    odd = [
        {"name": None},
        {"cat": 5},
        {"dur": None},
        {"ts": "12.5"},
        {"args": {"External id": 2**70}},
        {"cat": "kernel", "args": {"device": None, "stream": None, "bytes": None}},
    ]
    events = [{**base, **change} for change in odd]
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    expected = [
        ("", "cpu_op", 10.0, 5.0, -1, -1, -1),
        ("op", "5", 10.0, 5.0, -1, -1, -1),
        ("op", "cpu_op", 10.0, 0.0, -1, -1, -1),
        ("op", "cpu_op", 12.5, 5.0, -1, -1, -1),
        ("op", "cpu_op", 10.0, 5.0, -1, -1, -1),
        ("op", "kernel", 10.0, 5.0, 1, 1, -1),  # device and stream fall back to pid and tid
    ]
    columns = ("name", "category", "start_us", "dur_us", "device", "stream", "external_id")
    fast = read_kineto_trace(path).table().select(columns).to_pylist()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    chunked = read_kineto_trace(path).table().select(columns).to_pylist()
    for rows in (fast, chunked):
        assert [tuple(row.values()) for row in rows] == expected


@pytest.mark.parametrize("path_taken", ["fast", "chunked"])
def test_events_with_no_time_are_skipped_with_a_warning(tmp_path, monkeypatch, caplog, path_taken):
    # Before, an event without ts started at 0 (the epoch) and a negative dur was kept: a job
    # of 1970 to now, and an export whose slice ends before it starts.
    base = {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "dur": 5.0}
    events = [
        {**base, "name": "good", "ts": 10.0},
        {**base, "name": "no ts"},
        {**base, "name": "null ts", "ts": None},
        {**base, "name": "backwards", "ts": 20.0, "dur": -3.0},
        {**base, "name": "also good", "ts": 30.0, "dur": 0.0},
    ]
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    if path_taken == "chunked":
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    with caplog.at_level(logging.WARNING, logger="stepscope.store.kineto"):
        trace = read_kineto_trace(path)
    rows = trace.table().select(["name", "start_us", "dur_us"]).to_pylist()
    assert [tuple(row.values()) for row in rows] == [("good", 10.0, 5.0), ("also good", 30.0, 0.0)]
    assert (trace.metadata["start_us"], trace.metadata["end_us"]) == (10.0, 30.0)
    warning = next(w for w in trace.metadata["warnings"] if "skipped" in w)
    assert str(path) in warning and "skipped 3 event(s)" in warning and "'no ts'" in warning
    assert warning in caplog.text


def test_an_event_dated_decades_from_the_others_is_skipped(tmp_path, caplog):
    # A negative ts among µs since the epoch was kept: the job ran from 1970 to now, and the
    # warning said the whole trace was on its own clock.
    op = {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "dur": 5}
    dated = [{**op, "name": f"op{i}", "ts": 1_700_000_000_000_000 + 10 * i} for i in range(9)]
    dated[4] = {**op, "name": "before 1970", "ts": -3}
    # in a trace counted from its baseTimeNanoseconds, a date is as far off
    relative = [{**op, "name": f"op{i}", "ts": 10 * i} for i in range(9)]
    relative[2] = {**op, "name": "in 2077", "ts": 1_700_000_000_000_000}
    for name, events, extra in (
        ("dated", dated, {}),
        ("relative", relative, {"baseTimeNanoseconds": 1_700_000_000_000_000_000}),
    ):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, **extra}))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="stepscope.store.kineto"):
            trace = read_kineto_trace(path)
        assert trace.metadata["event_count"] == 8
        assert trace.metadata["start_us"] == 1_700_000_000_000_000
        assert trace.metadata["end_us"] < 1_700_000_000_000_100
        (warning,) = [w for w in trace.metadata["warnings"] if "skipped" in w]
        odd = events[4 if name == "dated" else 2]["name"]
        assert str(path) in warning and "skipped 1 event(s)" in warning and repr(odd) in warning
        assert "decades away" in warning and warning in caplog.text


def _strict_json(text: str) -> Any:
    """Parse ``text`` as browsers do: NaN and Infinity are no JSON."""

    def refuse(token: str) -> None:
        raise ValueError(f"{token} is not JSON")

    return json.loads(text, parse_constant=refuse)


#: A 2021 Kineto memcpy of zero duration (pytorch/kineto#105): its bandwidth is written ``inf``.
INFINITE_BANDWIDTH = """{"schemaVersion": 1, "traceEvents": [
  {"ph": "X", "cat": "Runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": "1",
   "ts": 1614800519473210, "dur": 5, "args": {"correlation": 20002, "external id": 3981}},
  {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0,
   "tid": "stream 7", "ts": 1614800519473220, "dur": 0,
   "args": {"device": 0, "context": 1, "stream": 7, "correlation": 20002,
            "external id": 3981, "bytes": 200, "memory bandwidth (GB/s)": inf,
            "other": [nan, -Infinity, NaN], "note": "a:nan,b"}},
  {"ph": "X", "cat": "Operator", "name": "no length", "pid": 1, "tid": "1",
   "ts": 1614800519473300, "dur": nan},
  {"ph": "X", "cat": "Operator", "name": "no time", "pid": 1, "tid": "1",
   "ts": Infinity, "dur": 3},
  {"ph": "X", "cat": "Operator", "name": "no end", "pid": 1, "tid": "1",
   "ts": 1614800519473400, "dur": Infinity}
]}"""


def test_numbers_json_cannot_hold_become_text_or_skip_their_event(tmp_path, caplog):
    path = tmp_path / "rank-0.json"
    path.write_text(INFINITE_BANDWIDTH)
    with caplog.at_level(logging.WARNING, logger="stepscope.store.kineto"):
        table = read_kineto_trace(path).table()
    assert table["name"].to_pylist() == ["cudaMemcpyAsync", "Memcpy HtoD (Pageable -> Device)"]
    assert "skipped 3 event(s)" in caplog.text and str(path) in caplog.text
    memcpy = _strict_json(table["args"][1].as_py())
    assert memcpy["memory bandwidth (GB/s)"] == "inf"
    assert memcpy["other"] == ["nan", "-Infinity", "NaN"]
    assert memcpy["note"] == "a:nan,b"


def test_an_event_beyond_any_timestamp_is_skipped_and_the_trace_queried(tmp_path, caplog):
    # A ts or dur of 1e300 is finite: it reached the store and broke every query that turns
    # start_us into a timestamp (PandasFrame's text times among them).
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "dur": 5}
    events = [{**op, "ts": 1614800519473210 + 10 * i} for i in range(10)]
    events += [{**op, "name": "far", "ts": 1e300}, {**op, "name": "long", "dur": 1e300, "ts": 1}]
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    with caplog.at_level(logging.WARNING, logger="stepscope.store.kineto"):
        table = read_kineto_trace(path).table()
    assert table["name"].to_pylist() == ["aten::mm"] * 10
    assert "skipped 2 event(s)" in caplog.text and "'far'" in caplog.text
    frame = PandasFrame(open_job(path, cache_dir=tmp_path / "cache")).get_all_framework_metrics()
    assert sorted(frame["framework_metric"].unique()) == ["aten::mm"]
    assert len(frame) == 10


def test_a_damaged_trace_keeps_its_events_with_inf_or_nan_up_to_the_damage(tmp_path):
    # A damaged file is read chunk by chunk with orjson, which refuses inf and NaN: the first
    # memcpy of 0 µs was taken for the damage, and it and every event after it were lost.
    launch = {"ph": "X", "cat": "Runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1}
    memcpy = {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7}
    bandwidth = {"memory bandwidth (GB/s)": "INF"}
    events = [
        {**event, "ts": 1614800519473210 + 10 * i, "dur": 0, "args": bandwidth}
        for i in range(50)
        for event in (launch, memcpy)
    ]
    text = json.dumps({"schemaVersion": 1, "traceEvents": events}).replace('"INF"', "inf")
    cut = tmp_path / "rank-0.json"
    cut.write_text(text[: len(text) - 100])  # cut inside the last event
    table = read_kineto_trace(cut).table()
    assert table.num_rows == 99
    bandwidths = {
        _strict_json(args)["memory bandwidth (GB/s)"] for args in table["args"].to_pylist()
    }
    assert bandwidths == {"inf"}


def test_the_warning_of_a_trace_cut_short_says_where_its_events_end(tmp_path):
    # It read "the event array ends early; the events after this point are lost at
    # decompressed byte N", "decompressed" for a plain .json too.
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
        for i in range(100)
    ]
    text = json.dumps({"schemaVersion": 1, "traceEvents": events})
    cut = tmp_path / "rank-0.json"
    cut.write_text(text[: len(text) // 2])
    trace = read_kineto_trace(cut)
    (warning,) = [w for w in trace.metadata["warnings"] if "ends early" in w]
    match = re.fullmatch(
        rf"{re.escape(str(cut))}: the event array ends early at byte (\d+)", warning
    )
    assert match, warning
    kept_text = cut.read_text()[: int(match.group(1))]
    assert kept_text.count('"ph"') == trace.metadata["event_count"]


@pytest.mark.parametrize(
    ("events", "damaged_event", "damage"),
    [
        (50, 33, "zeroed"),
        (30_000, 20_000, "zeroed"),
        (60_000, 20_000, "zeroed"),
        (50, 33, "garbled"),
        (60_000, 20_000, "garbled"),
        (50, 48, "zeroed"),  # the last event after the damage is kept
        (50, 49, "zeroed"),  # the keys after the damaged last event are kept
    ],
)
def test_damage_inside_a_trace_skips_only_the_damaged_event(
    tmp_path, events, damaged_event, damage
):
    # Bytes zeroed in the middle (a crash of the disk's cache), or one event's text garbled:
    # the events before the damage were kept and every event after it was lost, the tail's
    # keys with them; at most one large trace's first four megabytes took over a minute.
    op = {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "dur": 5}
    texts = [
        json.dumps({**op, "name": f"op{i}", "ts": 1_700_000_000_000_000 + i}, indent=1)
        for i in range(events)
    ]
    head = b'{"schemaVersion": 1, "traceEvents": [\n'
    start = len(head) + sum(len(t) + 2 for t in texts[:damaged_event])
    tail = b'], "baseTimeNanoseconds": 1700000000000000000, "traceName": "rank-0"}'
    text = head + ",\n".join(texts).encode() + tail
    if damage == "zeroed":
        text = text[: start + 10] + b"\0" * 64 + text[start + 74 :]
    else:  # a quote lost: the rest of the event reads as one string
        name = text.index(b'"op', start)
        text = text[:name] + text[name + 1 :]
    path = tmp_path / "rank-0.json"
    path.write_bytes(text)
    trace = read_kineto_trace(path)
    kept = [f"op{i}" for i in range(events) if i != damaged_event]
    assert trace.table()["name"].to_pylist() == kept
    assert trace.metadata["trace_name"] == "rank-0"
    (warning,) = [w for w in trace.metadata["warnings"] if "byte" in w]
    assert warning.startswith(f"{path}: the event array is damaged")
    assert warning.endswith(f" at byte {start}")


def test_damage_longer_than_the_largest_event_keeps_the_events_after_it(tmp_path):
    # Megabytes zeroed inside the event array: past 4 MB without an event boundary that parses,
    # the rest of the array was given up.
    op = {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "dur": 5}
    texts = [
        json.dumps({**op, "name": f"op{i}", "ts": 1_700_000_000_000_000 + i}, indent=1)
        for i in range(30_000)
    ]
    head = b'{"schemaVersion": 1, "traceEvents": [\n'
    start = len(head) + sum(len(t) + 2 for t in texts[:10_000])
    text = head + ",\n".join(texts).encode() + b'], "traceName": "rank-0"}'
    path = tmp_path / "rank-0.json"
    path.write_bytes(text[: start + 10] + b"\0" * (9 << 20) + text[start + 74 :])
    trace = read_kineto_trace(path)
    kept = [f"op{i}" for i in range(30_000) if i != 10_000]
    assert trace.table()["name"].to_pylist() == kept
    assert trace.metadata["trace_name"] == "rank-0"
    warnings = [w for w in trace.metadata["warnings"] if "byte" in w]
    assert warnings and all(w.startswith(f"{path}: the event array is damaged") for w in warnings)
    assert warnings[0].endswith(f" at byte {start}")


def test_a_trace_with_a_quote_in_an_annotation_name_keeps_all_its_events(tmp_path):
    # The PyTorch profiler writes event names unescaped (pytorch/pytorch#146900): one
    # record_function name with a quote made the trace invalid JSON, and the reader kept only
    # what came before the first event, losing the whole window.
    torch = pytest.importorskip("torch")
    names = ['load "train" shard', 'say "hi"', "plain"]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        for name in names:
            with torch.profiler.record_function(name):
                torch.ones(4).sum()
    path = tmp_path / "rank-0.pt.trace.json"
    profiler.export_chrome_trace(str(path))
    table = read_kineto_trace(path).table()
    annotations = table.filter(pc.equal(table["category"], "user_annotation"))
    assert annotations["name"].to_pylist() == names
    assert table["name"].to_pylist().count("aten::ones") == len(names)


def test_a_name_with_a_lone_surrogate_escape_keeps_the_trace_whole(tmp_path):
    # Python's json writes \udcxx for a name that held undecodable bytes (a file path, say);
    # orjson and DuckDB refuse it, and every event after the first was lost.
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
        for i in range(50)
    ]
    events[10]["name"] = "data/\udcff.bin"
    events[20]["name"] = "🚀 \\ud800 as text"
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}, indent=1))
    trace = read_kineto_trace(path)
    names = trace.table()["name"].to_pylist()
    assert len(names) == 50
    assert not [w for w in trace.metadata["warnings"] if "ends early" in w]
    assert names[10] == "data/\ufffd.bin" and names[20] == "🚀 \\ud800 as text"


def test_a_traces_head_gives_its_rank_world_size_and_start_without_reading_it(
    shared_fixtures, tmp_path
):
    folder = shared_fixtures / "kineto"
    gloo = read_trace_head(folder / "cpu_only_gloo_rank34of300.json.gz")
    assert gloo is not None and (gloo.rank, gloo.world_size) == (34, 300)
    # a trace without distributedInfo is the rank its file name says
    (tmp_path / "worker_rank-3.json.gz").write_bytes(
        (folder / "distributed_info_not_found.json.gz").read_bytes()
    )
    named = read_trace_head(tmp_path / "worker_rank-3.json.gz")
    assert named is not None and (named.rank, named.world_size) == (3, None)
    # an older trace's times are dates: its start is its first events'
    memory = json.loads(gzip.decompress((folder / "v100_rank1of2_memory.json.gz").read_bytes()))
    times = [e["ts"] for e in memory["traceEvents"] if "ts" in e]
    head = read_trace_head(folder / "v100_rank1of2_memory.json.gz")
    assert head is not None and min(times) <= head.start_us <= min(times) + 1e6
    # a newer one's count from the baseTimeNanoseconds at its end: read in a plain file, not in
    # a compressed one (that would mean decompressing it all)
    triton = gzip.decompress((folder / "a100_triton.json.gz").read_bytes())
    document = json.loads(triton)
    first = min(e["ts"] for e in document["traceEvents"] if "ts" in e)
    (tmp_path / "triton.json").write_bytes(triton)
    plain = read_trace_head(tmp_path / "triton.json")
    assert plain is not None
    assert plain.start_us == pytest.approx(document["baseTimeNanoseconds"] / 1e3 + first)
    compressed = read_trace_head(folder / "a100_triton.json.gz")
    assert compressed is not None and compressed.start_us is None
    (tmp_path / "notes.json").write_text('{"not": "a trace"}')
    assert read_trace_head(tmp_path / "notes.json") is None


@pytest.mark.parametrize(
    ("name", "encode"),
    [
        ("rank-3.json", lambda text: codecs.BOM_UTF8 + text.encode()),
        ("rank-3.json.gz", lambda text: gzip.compress(codecs.BOM_UTF8 + text.encode())),
        ("rank-3.json", lambda text: text.encode("utf-16")),
        ("rank-3.json.gz", lambda text: gzip.compress(text.encode("utf-16-be"))),
        ("rank-3.json", lambda text: text.encode("utf-16-le")),
    ],
)
def test_a_trace_with_a_byte_order_mark_or_in_utf16_is_read(tmp_path, name, encode):
    # Windows tools save JSON with a UTF-8 byte order mark, or as UTF-16, which JSON lets a
    # reader accept: the trace was no trace to the sniff, and the reader refused it.
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"öp{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
        for i in range(2000)
    ]
    text = json.dumps(
        {
            "schemaVersion": 1,
            "distributedInfo": {"rank": 2, "world_size": 4},
            "traceEvents": events,
            "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        },
        ensure_ascii=False,
    )
    folder = tmp_path / "traces"
    folder.mkdir()
    path = folder / name
    path.write_bytes(encode(text))
    assert is_kineto_trace(path)
    head = read_trace_head(path)
    assert head is not None and (head.rank, head.world_size) == (2, 4)
    trace = read_kineto_trace(path)
    assert trace.table()["name"].to_pylist() == [f"öp{i}" for i in range(2000)]
    assert trace.metadata["rank"] == 2 and trace.metadata["base_time_ns"] is not None
    assert not trace.metadata["warnings"]
    events_view = open_job(folder, cache_dir=tmp_path / "cache").table("events")
    assert events_view.num_rows == 2000


@pytest.mark.parametrize("compressed", [False, True])
def test_bytes_that_are_not_utf8_in_the_top_level_keys_lose_no_key(tmp_path, compressed):
    # A device's or a host's name in Latin-1: the keys before the events, or after them, were
    # all unreadable, and the rank fell back to 0, the times to the trace's own clock.
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
        for i in range(20)
    ]
    document = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "GPU-NAME"}],
        "distributedInfo": {"rank": 3, "world_size": 4},
        "traceEvents": events,
        "traceName": "TRACE-NAME",
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
    }
    text = json.dumps(document).encode()
    text = text.replace(b"GPU-NAME", b"caf\xe9 GPU").replace(b"TRACE-NAME", b"h\xf4te")
    path = tmp_path / ("trace.json.gz" if compressed else "trace.json")
    path.write_bytes(gzip.compress(text) if compressed else text)
    trace = read_kineto_trace(path)
    metadata = trace.metadata
    assert (metadata["rank"], metadata["world_size"]) == (3, 4)
    assert metadata["device_properties"] == [{"id": 0, "name": "caf\ufffd GPU"}]
    assert metadata["trace_name"] == "h\ufffdte"
    assert metadata["start_us"] == 1_700_000_000_000_000
    assert not metadata["warnings"]
    head = read_trace_head(path)
    assert head is not None and (head.rank, head.world_size) == (3, 4)


@pytest.mark.parametrize("padding", [512, 600_000])
def test_a_gzip_trace_padded_with_zeros_is_read_without_a_warning(tmp_path, padding):
    # Zeros after the gzip stream (a block device's or a copy tool's padding), which gzip(1)
    # and Python's gzip skip, were read as a corrupt second member, with a warning.
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
        for i in range(20)
    ]
    text = json.dumps(
        {
            "distributedInfo": {"rank": 1},
            "traceEvents": events,
            "traceName": "t",
            "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        }
    )
    half = len(text) // 2
    members = gzip.compress(text[:half].encode()) + gzip.compress(text[half:].encode())
    path = tmp_path / "rank-1.json.gz"
    path.write_bytes(members + b"\0" * padding)
    assert json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] == events
    trace = read_kineto_trace(path)
    assert trace.table()["name"].to_pylist() == [f"op{i}" for i in range(20)]
    assert trace.metadata["trace_name"] == "t" and not trace.metadata["warnings"]


def test_a_rank_and_world_size_written_as_text_are_the_traces(tmp_path):
    # Some launchers write distributedInfo's numbers as text ("rank": "1"): the rank fell back
    # to the file name, else 0 with a warning, so two ranks' traces landed on one rank.
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
        for i in range(20)
    ]
    folder = tmp_path / "traces"
    folder.mkdir()
    for rank in (0, 1):
        document = {
            "distributedInfo": {"backend": "nccl", "rank": str(rank), "world_size": "2"},
            "traceEvents": events,
            "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        }
        (folder / f"worker{rank}.json").write_text(json.dumps(document))
    trace = read_kineto_trace(folder / "worker1.json")
    assert (trace.metadata["rank"], trace.metadata["world_size"]) == (1, 2)
    assert not trace.metadata["warnings"]
    head = read_trace_head(folder / "worker1.json")
    assert head is not None and (head.rank, head.world_size) == (1, 2)
    ranks = open_job(folder, cache_dir=tmp_path / "cache").table("events")["rank"]
    assert Counter(ranks.to_pylist()) == {0: 20, 1: 20}
