"""Exports of hand-made data whose every slice, flow and counter is known."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from stepscope.errors import ConfigError
from stepscope.export import parse_range
from stepscope.export.chrome import write_chrome_trace
from stepscope.export.perfetto import write_perfetto_trace
from stepscope.export.window import Window, resolve_window
from stepscope.store.schema import EVENT_SCHEMA, SYSTEM_SCHEMA
from tests.export.tracecheck import check_chrome, check_perfetto, load_chrome

T0 = 1_700_000_000_000_000.0  # epoch µs

DEFAULTS: dict[str, Any] = {
    "source": "kineto",
    "node": "algo-1",
    "rank": 0,
    "ph": "X",
    "pid": 1,
    "tid": 1,
    "step": -1,
    "device": -1,
    "stream": -1,
    "correlation": -1,
    "external_id": -1,
    "bytes": -1,
    "args": "",
}


def _event(category: str, name: str, start: float, dur: float, **extra: Any) -> dict[str, Any]:
    return {
        **DEFAULTS,
        "category": category,
        "name": name,
        "start_us": T0 + start,
        "dur_us": dur,
        **extra,
    }


def _connection(
    events: list[dict[str, Any]], system: list[dict[str, Any]]
) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.register("events_table", pa.Table.from_pylist(events, schema=EVENT_SCHEMA))
    con.register("system_table", pa.Table.from_pylist(system, schema=SYSTEM_SCHEMA))
    con.execute("CREATE VIEW events AS SELECT * FROM events_table")
    con.execute("CREATE VIEW system AS SELECT * FROM system_table")
    return con


EVENTS = [
    _event("user_annotation", "ProfilerStep#3", 0, 1000, step=3),
    _event("cpu_op", "aten::linear", 10, 200, step=3, external_id=5),
    # ns rounding: the child ends 0.4 µs after its parent, and must still nest
    _event("cpu_op", "aten::addmm", 20, 190.4, step=3, external_id=6),
    _event("cuda_runtime", "cudaLaunchKernel", 50, 10, step=3, correlation=77, external_id=6),
    _event(
        "kernel",
        "volta_sgemm_128x64_nn",
        300,
        120,
        device=0,
        stream=7,
        correlation=77,
        args=json.dumps({"grid": [1, 2, 1]}),
    ),
    _event("cpu_op", "aten::relu", 400, 50, step=3),
    _event("user_annotation", "ProfilerStep#4", 1000, 800, step=4),
    _event("cpu_op", "aten::mul", 1100, 30, step=4),
    # two annotations that overlap without nesting: the second goes to a second lane
    _event("Annotation", "load", 2000, 100, source="pythontimeline", tid=-1),
    _event("Annotation", "decode", 2050, 100, source="pythontimeline", tid=-1),
    _event(
        "cpu_instant_event",
        "[memory]",
        60,
        0,
        ph="i",
        device=0,
        args=json.dumps({"Total Allocated": 1024, "Total Reserved": 4096}),
    ),
]
SYSTEM = [
    {
        "timestamp_us": int(T0) + 500_000 * k,
        "node": "algo-1",
        "type": kind,
        "name": name,
        "dimension": dim,
        "value": value,
    }
    for k in range(3)
    for kind, name, dim, value in [
        ("cpu", "cpu0", "CPUUtilization", 50.0 + k),
        ("cpu", "cpu1", "CPUUtilization", 70.0 + k),
        ("gpu", "gpu0", "GPUUtilization", 90.0),
        ("memory", "MemoryUsedPercent", "", 40.0),
    ]
]


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    return _connection(EVENTS, SYSTEM)


def test_chrome_export_nests_every_thread_and_keeps_every_slice(con, tmp_path: Path) -> None:
    summary = write_chrome_trace(con, tmp_path / "t.json", Window())
    events = load_chrome(tmp_path / "t.json")
    counts = check_chrome(events)
    spans = [e for e in events if e["ph"] == "X"]
    assert counts["slices"] == summary.slices == 10  # every span of the input, no instants
    assert counts["flows"] == 1
    addmm = next(e for e in spans if e["name"] == "aten::addmm")
    linear = next(e for e in spans if e["name"] == "aten::linear")
    assert addmm["ts"] + addmm["dur"] == pytest.approx(linear["ts"] + linear["dur"])
    lanes = {e["tid"] for e in spans if e["cat"] == "Annotation"}
    assert len(lanes) == 2, "overlapping annotations must land on two lanes"
    kernel = next(e for e in spans if e["cat"] == "kernel")
    assert kernel["args"] == {"grid": [1, 2, 1], "correlation": 77}
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"algo-1 · rank 0 · CPU", "algo-1 · rank 0 · GPU 0", "algo-1 · system"}
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert {"CPU utilization (%)", "GPU-0 utilization (%)", "Memory used (%)"} <= counters
    assert "GPU-0 rank 0 allocated (bytes)" in counters
    cpu = [e["args"]["value"] for e in events if e["name"] == "CPU utilization (%)"]
    assert cpu == [60.0, 61.0, 62.0]  # the mean of cpu0 and cpu1 at each snapshot


def test_perfetto_export_keeps_the_node_cpu_gpu_tree(con, tmp_path: Path) -> None:
    summary = write_perfetto_trace(con, tmp_path / "t.pftrace", Window())
    counts = check_perfetto(tmp_path / "t.pftrace")
    assert counts["slices"] == summary.slices == 10
    assert counts["flows"] == 1
    assert counts["counters"] > 0
    paths = counts["paths"]
    assert ["algo-1", "GPUs", "GPU-0", "rank 0 · stream 7"] in paths
    assert ["algo-1", "CPU", "CPU utilization (%)"] in paths
    assert ["algo-1", "GPUs", "GPU-0", "utilization (%)"] in paths


def test_a_step_range_selects_the_steps_time(con, tmp_path: Path) -> None:
    window = resolve_window(con, steps=(4, 5))
    assert (window.start_us, window.end_us) == (T0 + 1000, T0 + 1800)
    write_chrome_trace(con, tmp_path / "t.json.gz", window)
    names = {e["name"] for e in load_chrome(tmp_path / "t.json.gz") if e["ph"] == "X"}
    assert names == {"ProfilerStep#4", "aten::mul"}


def test_a_time_range_counts_seconds_from_the_first_record(con) -> None:
    window = resolve_window(con, time_s=(0.5, 1.0))
    assert (window.start_us, window.end_us) == (T0 + 500_000, T0 + 1_000_000)


@pytest.mark.parametrize(
    ("text", "integer", "expected"),
    [("5:10", True, (5.0, 10.0)), (":10", True, (None, 10.0)), ("1.5:", False, (1.5, None))],
)
def test_ranges_parse(text: str, integer: bool, expected: tuple) -> None:
    assert parse_range(text, parameter="--steps", integer=integer) == expected


@pytest.mark.parametrize("text", ["10:5", "a:b", "5", "-1:3", "1.5:3"])
def test_bad_step_ranges_say_what_is_allowed(text: str) -> None:
    with pytest.raises(ConfigError, match="--steps must be A:B with whole numbers"):
        parse_range(text, parameter="--steps", integer=True)


def test_a_step_range_without_steps_is_an_error(con) -> None:
    with pytest.raises(ConfigError, match="at least one recorded step"):
        resolve_window(con, steps=(50, 60))
