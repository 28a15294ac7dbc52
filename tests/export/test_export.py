"""Exports of hand-made data whose every slice, flow and counter is known."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest

from stepscope.analysis.tracks import assign_lanes
from stepscope.errors import ConfigError
from stepscope.export import parse_range
from stepscope.export.chrome import write_chrome_trace
from stepscope.export.perfetto import write_perfetto_trace
from stepscope.export.window import Window, resolve_window
from stepscope.testing import connect, event_row, events_table, system_table
from tests.export.tracecheck import _fields, check_chrome, check_perfetto, load_chrome
from tests.tables import SAMPLE_EVENTS, SAMPLE_SYSTEM, T0, event


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    return connect(events_table(SAMPLE_EVENTS), system_table(SAMPLE_SYSTEM))


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


def _steps(mode: str, first_s: float, count: int) -> list[dict[str, Any]]:
    """``count`` one-second steps of ``mode`` numbered from 0, the first at ``first_s``."""
    name = f"Step:ModeKeys.{mode}"
    return [
        event_row(category=name, name=name, start_us=T0 + (first_s + k) * 1e6, dur_us=1e6, step=k)
        for k in range(count)
    ]


def test_an_open_step_range_reaches_the_edges_of_the_job(tmp_path: Path) -> None:
    # `--steps :` dropped what came before the first step and after the last one (system
    # samples, the data loader's start), unlike no --steps at all; `--steps 100:` the tail
    from stepscope.cli import main
    from stepscope.testing import generate_job

    job = generate_job(tmp_path / "job", gpus=1, cpus=2, minutes=1)
    for name, steps in (("all.json", []), ("open.json", ["--steps", ":"])):
        assert main(["export", str(job), "-o", str(tmp_path / name), *steps]) == 0
    assert (tmp_path / "open.json").read_bytes() == (tmp_path / "all.json").read_bytes()
    con = connect(events_table(_steps("TRAIN", 1, 5)))
    assert resolve_window(con, steps=(2, None)) == Window(T0 + 3e6, None)
    assert resolve_window(con, steps=(None, 2)) == Window(None, T0 + 3e6)


def test_a_step_range_is_of_training_steps_when_evaluation_steps_come_after() -> None:
    # Each mode numbers its steps from 0: the evaluation loop after training has steps 2-4 too,
    # and the range must not stretch to them over every training step in between.
    con = connect(events_table(_steps("TRAIN", 0, 10) + _steps("EVAL", 10, 5)))
    window = resolve_window(con, steps=(2, 5))
    assert (window.start_us, window.end_us) == (T0 + 2e6, T0 + 5e6)
    # a job that only evaluates has its evaluation steps
    only_eval = connect(events_table(_steps("EVAL", 10, 5)))
    window = resolve_window(only_eval, steps=(2, 5))
    assert (window.start_us, window.end_us) == (T0 + 12e6, T0 + 15e6)


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
    with pytest.raises(
        ConfigError, match="at least one recorded step.*The job records steps 3 to 4"
    ):
        resolve_window(con, steps=(50, 60))


@pytest.mark.parametrize("time_s", [(5.0, 6.0), (2.0, None)])
def test_a_time_range_past_the_job_is_an_error_naming_its_span(con, time_s: tuple) -> None:
    with pytest.raises(ConfigError, match=r"time_s must be .*The job records seconds 0 to 1\."):
        resolve_window(con, time_s=time_s)


def test_a_time_range_of_a_job_with_no_records_is_an_error() -> None:
    # A job that holds nothing yet: a time range gave an empty trace, where a step range and a
    # time range past a job's end are errors.
    empty = connect(events_table([]), system_table([]))
    with pytest.raises(ConfigError, match=r"time_s must be .*The job records nothing yet\."):
        resolve_window(empty, time_s=(0.0, 5.0))


def _perfetto_intervals(path: Path) -> set[tuple[str, int, int]]:
    """Every slice of a Perfetto export as (name, begin ns, end ns), its end found by nesting."""
    intervals, open_slices = set(), []
    for _, packet in _fields(path.read_bytes()):
        p = dict(_fields(packet))
        if 11 not in p:
            continue
        event = dict(_fields(p[11]))
        if event[9] == 1:
            open_slices.append((event[23].decode(), p[8]))
        elif event[9] == 2:
            name, begin = open_slices.pop()
            intervals.add((name, begin, p[8]))
    return intervals


def test_perfetto_ends_each_slice_where_it_ends(tmp_path: Path) -> None:
    slices = [
        ("parent", 0, 10),
        ("child", 5, 3),
        ("grandchild", 6, 2),  # ends with its parent
        ("instant inside", 5, 0),  # zero length, starts with a sibling
        ("instant at the end", 10, 0),  # starts where the parent ends: after it
        ("next", 10, 2),
        ("last instant", 12, 0),
    ]
    # µs since the epoch small enough that every ns is exact in a double
    rows = [
        event_row(category="cpu_op", name=n, start_us=1000.0 + s, dur_us=d, source="kineto")
        for n, s, d in slices
    ]
    con = connect(events_table(rows))
    write_perfetto_trace(con, tmp_path / "t.pftrace", Window())
    check_perfetto(tmp_path / "t.pftrace")
    expected = {(n, (1000 + s) * 1000, (1000 + s + d) * 1000) for n, s, d in slices}
    assert _perfetto_intervals(tmp_path / "t.pftrace") == expected


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"duplicate keys {keys}"
    return dict(pairs)


def test_chrome_args_keep_their_text_and_the_extracted_columns_win(tmp_path: Path) -> None:
    name = 'say "hi" \\ ünïcode\n\ttab'
    rows = [
        event("cuda_runtime", name, 0, 5, correlation=9, args='{"correlation":5,"cbid":3}'),
        event("cpu_op", "plain", 10, 5, step=2, args='{"Input Dims":[[1,2]],"x":1.5e-7}'),
        event("cpu_op", "no args", 20, 5, step=2, external_id=4),
        event("cpu_op", "nothing", 30, 5),
    ]
    con = connect(events_table(rows))
    write_chrome_trace(con, tmp_path / "t.json", Window())
    document = json.loads((tmp_path / "t.json").read_text(), object_pairs_hook=_no_duplicate_keys)
    spans = {e["name"]: e for e in document["traceEvents"] if e["ph"] == "X"}
    assert spans[name]["args"] == {"correlation": 9, "cbid": 3}
    assert spans["plain"]["args"] == {"Input Dims": [[1, 2]], "x": 1.5e-7, "step": 2}
    assert spans["no args"]["args"] == {"step": 2, "external_id": 4}
    assert spans["nothing"]["args"] == {}
    assert [spans[n]["dur"] for n in (name, "plain", "no args", "nothing")] == [5, 5, 5, 5]


def test_lanes_restart_after_every_gap() -> None:
    starts = np.array([0, 5, 20, 40, 45, 60, 65, 80], dtype=np.float64)
    ends = np.array([10, 15, 30, 50, 55, 70, 70.5, 81], dtype=np.float64)
    lanes, clamped = assign_lanes(starts, ends)
    assert lanes.tolist() == [0, 1, 0, 0, 1, 0, 0, 0]
    assert clamped.tolist() == [10, 15, 30, 50, 55, 70, 70, 81]  # 70.5 overshot by < 1 µs


def test_the_output_name_chooses_the_format_unless_one_is_given(tmp_path: Path) -> None:
    import gzip

    from stepscope.export import export_trace
    from stepscope.testing import generate_job

    job = generate_job(tmp_path / "job", gpus=1, cpus=2, minutes=1)
    plain = export_trace(job, tmp_path / "out.json")
    assert plain.format == "chrome"
    assert json.loads((tmp_path / "out.json").read_text())["traceEvents"]
    zipped = export_trace(job, tmp_path / "out.JSON.GZ")
    assert zipped.format == "chrome"
    assert json.loads(gzip.decompress((tmp_path / "out.JSON.GZ").read_bytes()))["traceEvents"]
    assert export_trace(job, tmp_path / "out.pftrace").format == "perfetto"
    # an explicit format wins over the name
    assert export_trace(job, tmp_path / "x.json", format="perfetto").format == "perfetto"
    with pytest.raises(UnicodeDecodeError):
        json.loads((tmp_path / "x.json").read_text())


@pytest.mark.parametrize(
    ("format", "suffix"), [("perfetto", ".perfetto-trace"), ("chrome", ".trace.json.gz")]
)
def test_a_trace_exported_without_an_output_is_named_after_it_without_its_suffixes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, format: str, suffix: str
) -> None:
    from stepscope.export import export_trace
    from tests.analysis._kineto_synthetic import write_trace

    trace = write_trace(tmp_path, "rank-0.pt.trace.json.gz")
    monkeypatch.chdir(tmp_path)
    summary = export_trace(trace, format=format)
    assert summary.path == Path(f"rank-0{suffix}")
    assert summary.path.is_file()


def test_a_profiler_output_folder_exported_without_an_output_is_named_after_its_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SageMaker output downloaded as <job>/profiler-output and given itself: each such export
    # was profiler-output.perfetto-trace, the second job's replacing the first's
    from stepscope.export import export_trace
    from stepscope.testing import TINY_JOB, generate_job

    for name in ("resnet-1", "resnet-2"):
        generate_job(tmp_path / name, **TINY_JOB)
        (tmp_path / name / "job.json").unlink()  # as SageMaker's S3 output holds none
    monkeypatch.chdir(tmp_path)
    first = export_trace(Path("resnet-1", "profiler-output"))
    second = export_trace(tmp_path / "resnet-2" / "profiler-output")
    assert (first.path, second.path) == (
        Path("resnet-1.perfetto-trace"),
        Path("resnet-2.perfetto-trace"),
    )


def test_a_span_with_a_negative_duration_ends_where_it_starts(tmp_path: Path) -> None:
    # A framework file timed with a clock that stepped back holds a span with dur < 0: written
    # as is, the Chrome slice ended before it started and the Perfetto end came before its begin.
    rows = [
        event("Forward", "ResNet", 0, 100, source="pythontimeline"),
        event("Forward", "conv1", 10, -4, source="pythontimeline"),
        event("Forward", "fc", 50, 20, source="pythontimeline"),
    ]
    con = connect(events_table(rows))
    write_chrome_trace(con, tmp_path / "t.json", Window())
    spans = {e["name"]: e for e in load_chrome(tmp_path / "t.json") if e["ph"] == "X"}
    assert {name: span["dur"] for name, span in spans.items()} == {
        "ResNet": 100,
        "conv1": 0,
        "fc": 20,
    }
    write_perfetto_trace(con, tmp_path / "t.pftrace", Window())
    begin = (T0 + 10) * 1000
    assert ("conv1", begin, begin) in _perfetto_intervals(tmp_path / "t.pftrace")


def test_allocator_counters_of_a_lone_trace_sit_with_its_host(tmp_path: Path) -> None:
    # A lone PyTorch profiler trace names no node: its slices show under "host", and its
    # allocator totals must too, not under a process or track tree with an empty name.
    rows = [{**row, "node": ""} for row in SAMPLE_EVENTS]
    con = connect(events_table(rows))
    write_chrome_trace(con, tmp_path / "t.json", Window())
    events = load_chrome(tmp_path / "t.json")
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    allocated = next(e for e in events if e["name"] == "GPU-0 rank 0 allocated (bytes)")
    assert processes[allocated["pid"]] == "host · system"
    assert all(name.startswith("host · ") for name in processes.values())
    write_perfetto_trace(con, tmp_path / "t.pftrace", Window())
    paths = check_perfetto(tmp_path / "t.pftrace")["paths"]
    assert ["host", "GPUs", "GPU-0", "rank 0 allocated (bytes)"] in paths
    assert {path[0] for path in paths} == {"host"}


def test_counters_keep_their_sample_times(tmp_path: Path) -> None:
    # Samples taken off a 20 ms grid: snapped to it, the first one came before the origin
    # (Perfetto UI drops negative timestamps of a JSON trace, so each counter lost a sample)
    # and every sample showed up to 10 ms away from when it was taken.
    taken_us = [int(T0) + 3_000 + 500_000 * k for k in range(3)]
    rows = [
        {"timestamp_us": t, "node": "algo-1", "type": kind, "name": name, "dimension": dim}
        for t in taken_us
        for kind, name, dim in [
            ("cpu", "cpu0", "CPUUtilization"),
            ("gpu", "gpu0", "GPUUtilization"),
        ]
    ]
    con = connect(events_table([event("cpu_op", "aten::mm", 20_000, 100)]), system_table(rows))
    write_chrome_trace(con, tmp_path / "t.json", Window())
    document = json.loads((tmp_path / "t.json").read_text())
    origin = document["otherData"]["origin_epoch_us"]
    assert origin == taken_us[0]
    for name in ("CPU utilization (%)", "GPU-0 utilization (%)"):
        times = [e["ts"] for e in document["traceEvents"] if e["name"] == name]
        assert times == [t - origin for t in taken_us]
    write_perfetto_trace(con, tmp_path / "t.pftrace", Window())
    counter_us = set()
    for _, packet in _fields((tmp_path / "t.pftrace").read_bytes()):
        fields = dict(_fields(packet))
        if 11 in fields and dict(_fields(fields[11]))[9] == 4:
            counter_us.add(round(fields[8] / 1000))
    assert counter_us == set(taken_us)


def test_a_chrome_export_is_json_a_browser_parses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 2021 Kineto memcpy of 0 µs has "memory bandwidth (GB/s)": inf (pytorch/kineto#105);
    # copied as is, the export was no JSON, and chrome://tracing and Perfetto UI refused it.
    from stepscope.export import export_trace

    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))

    memcpy = {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": "stream 7"}
    text = json.dumps({"schemaVersion": 1, "traceEvents": [{**memcpy, "ts": T0, "dur": 0}]})
    trace = tmp_path / "rank-0.json"
    trace.write_text(text.replace('"dur": 0', '"dur": 0, "args": {"bandwidth": inf}'))
    export_trace(trace, tmp_path / "t.json")

    def refuse(token: str) -> None:
        raise AssertionError(f"{token} in the export")

    document = json.loads((tmp_path / "t.json").read_text(), parse_constant=refuse)
    spans = [e for e in document["traceEvents"] if e["ph"] == "X"]
    assert [span["args"]["bandwidth"] for span in spans] == ["inf"]


_EXPORT_ON_A_FULL_DISK = textwrap.dedent(
    """
    import resource, signal, sys
    from stepscope.export import export_trace
    # files cannot grow past 4 kB: writes fail with EFBIG, like ENOSPC on a full disk
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4_000, 4_000))
    try:
        export_trace(sys.argv[1], sys.argv[2])
    except OSError as exc:
        print(type(exc).__name__)
    """
)


@pytest.mark.parametrize("name", ["trace.json.gz", "trace.json", "trace.pftrace"])
def test_an_export_that_fails_half_way_leaves_the_previous_export_whole(
    tmp_path: Path, name: str
) -> None:
    from stepscope.export import export_trace
    from stepscope.testing import generate_job

    job = generate_job(tmp_path / "job", gpus=1, cpus=2, minutes=1)
    output = tmp_path / "exports" / name
    output.parent.mkdir()
    export_trace(job, output)
    before = output.read_bytes()
    failed = subprocess.run(
        [sys.executable, "-c", _EXPORT_ON_A_FULL_DISK, str(job), str(output)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert failed.returncode == 0, failed.stderr
    assert failed.stdout.strip() == "OSError"  # the export failed
    assert output.read_bytes() == before
    assert [p.name for p in output.parent.iterdir()] == [name]


def _export_signalled(
    tmp_path: Path, signum: int, *, ignored: bool = False
) -> subprocess.CompletedProcess[bytes]:
    """Export a ten-minute job over a previous export, send ``signum`` (set to be ignored in the
    exporter, as ``nohup`` does, when ``ignored``) while the trace is written."""
    import time

    from stepscope.testing import generate_job

    job = generate_job(tmp_path / "job", gpus=2, cpus=4, minutes=10)
    output = tmp_path / "exports" / "trace.json"
    output.parent.mkdir()
    output.write_text("the previous export")
    exporter = subprocess.Popen(
        [sys.executable, "-m", "stepscope", "export", str(job), "-o", str(output)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=(lambda: signal.signal(signum, signal.SIG_IGN)) if ignored else None,
    )

    def writing() -> bool:
        return any(p.stat().st_size for p in output.parent.iterdir() if p != output)

    while exporter.poll() is None and not writing():
        time.sleep(0.005)
    exporter.send_signal(signum)
    out, err = exporter.communicate(timeout=120)
    return subprocess.CompletedProcess(exporter.args, exporter.returncode, out, err)


@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["int", "term", "hup"]
)
def test_an_export_ended_by_a_signal_leaves_no_partial_file(tmp_path: Path, signum: int) -> None:
    # `timeout 60 stepscope export ...`, a `kill` or a closed terminal left the half-written
    # trace beside the previous export, one more hidden file of megabytes for each export; and
    # a Ctrl-C that landed in a DuckDB query ended with its traceback ("Query interrupted")
    ended = _export_signalled(tmp_path, signum)
    assert ended.returncode == 128 + signum
    assert b"Traceback" not in ended.stderr
    output = tmp_path / "exports" / "trace.json"
    assert [p.name for p in output.parent.iterdir()] == ["trace.json"]
    assert output.read_text() == "the previous export"


def test_an_export_under_nohup_goes_on_when_its_terminal_closes(tmp_path: Path) -> None:
    # a SIGHUP that nohup set to be ignored stays ignored: the export is written whole
    assert _export_signalled(tmp_path, signal.SIGHUP, ignored=True).returncode == 0
    check_chrome(load_chrome(tmp_path / "exports" / "trace.json"))


_COPY_STDIN = "import shutil, sys; shutil.copyfileobj(sys.stdin.buffer, open(sys.argv[1], 'wb'))"


@pytest.mark.parametrize(
    ("argv", "name"),
    [([], "t.pftrace"), (["--format", "chrome"], "t.json")],
    ids=["perfetto", "chrome"],
)
def test_an_export_to_dash_goes_down_a_pipe_and_its_summary_to_stderr(
    tmp_path: Path, argv: list[str], name: str
) -> None:
    # `stepscope export job -o - | ...` wrote a file named "-" and printed its summary on stdout
    from stepscope.testing import generate_job

    job = generate_job(tmp_path / "job", gpus=1, cpus=2, minutes=1)
    stepscope = [sys.executable, "-m", "stepscope", "export", str(job)]
    subprocess.run([*stepscope, *argv, "-o", str(tmp_path / name)], check=True, timeout=120)
    exporter = subprocess.Popen(
        [*stepscope, *argv, "-o", "-"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert exporter.stdout is not None
    reader = subprocess.run(
        [sys.executable, "-c", _COPY_STDIN, str(tmp_path / "piped")],
        stdin=exporter.stdout,
        timeout=120,
    )
    exporter.stdout.close()
    _, err = exporter.communicate(timeout=120)
    assert exporter.returncode == 0 and reader.returncode == 0, err
    assert (tmp_path / "piped").read_bytes() == (tmp_path / name).read_bytes()
    assert " trace with " in err.decode() and " slices on " in err.decode()
    assert not (tmp_path / "-").exists()
    if name.endswith(".json"):
        check_chrome(load_chrome(tmp_path / "piped"))
    else:
        check_perfetto(tmp_path / "piped")


def test_an_export_to_dash_ends_quietly_when_the_reader_leaves_early(tmp_path: Path) -> None:
    # `stepscope export job -o - | head -c 10` ended with "stepscope: error: Broken pipe"
    from stepscope.testing import generate_job

    job = generate_job(tmp_path / "job", gpus=1, cpus=2, minutes=1)
    exporter = subprocess.Popen(
        [sys.executable, "-m", "stepscope", "export", str(job), "-o", "-"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert exporter.stdout is not None
    head = subprocess.run(
        [sys.executable, "-c", "import sys; print(len(sys.stdin.buffer.read(10)))"],
        stdin=exporter.stdout,
        capture_output=True,
        text=True,
        timeout=120,
    )
    exporter.stdout.close()
    _, err = exporter.communicate(timeout=120)
    assert head.stdout.strip() == "10"
    assert err == b""
    assert exporter.returncode == 128 + 13  # as a shell reports a command SIGPIPE ended


def test_an_export_to_dash_refuses_a_terminal(tmp_path: Path) -> None:
    import os
    import pty

    job = tmp_path / "job"  # refused before the job is read: it need not exist
    controller, terminal = pty.openpty()
    try:
        refused = subprocess.run(
            [sys.executable, "-m", "stepscope", "export", str(job), "-o", "-"],
            cwd=tmp_path,
            stdout=terminal,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(terminal)
        os.close(controller)
    assert refused.returncode == 2
    assert refused.stderr.startswith(
        "stepscope: error: -o must be a file, or - with standard output piped or redirected, "
        "got '-'. Standard output is a terminal"
    )
