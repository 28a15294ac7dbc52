"""SystemMetricsWriter: SageMaker system JSON lines, per-minute files, failures, the end marker."""

from __future__ import annotations

import calendar
import json
import logging
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from stepscope.errors import ConfigError
from stepscope.store import SystemMetricsWriter, SystemRecord, write_job_end_marker
from stepscope.store.layout import job_has_ended

# 2026-02-03 10:59:30 UTC
T0_S = calendar.timegm((2026, 2, 3, 10, 59, 30)) + 0.25


def test_records_are_sagemaker_lines_in_minute_files(tmp_path: Path, shared_fixtures: Path) -> None:
    with SystemMetricsWriter(tmp_path, node="algo-2") as writer:
        written = writer.write(
            [
                SystemRecord("cpu", "cpu0", "CPUUtilization", 12.5, T0_S),
                SystemRecord("memory", "MemoryUsedPercent", "", 40.25, T0_S),
                SystemRecord("network", "ReceiveBytesPerSecond", "Algorithm", 1024.0, T0_S + 40),
            ]
        )
    assert written == 3
    first = tmp_path / "system/incremental/2026020310" / f"{int(T0_S) // 60 * 60}.algo-2.json"
    second = tmp_path / "system/incremental/2026020311" / f"{int(T0_S) // 60 * 60 + 60}.algo-2.json"
    assert sorted(tmp_path.rglob("*.json")) == [first, second]
    lines = first.read_text().splitlines()
    assert json.loads(lines[0]) == {
        "Type": "cpu",
        "Name": "cpu0",
        "Dimension": "CPUUtilization",
        "Value": 12.5,
        "NodeId": "algo-2",
        "Timestamp": T0_S,
    }
    # key order and spacing as the SageMaker host agent writes them
    recorded = (
        shared_fixtures / "smdebug/test_traces/system/incremental/1591748100.algo-1.json"
    ).read_text()
    assert list(json.loads(lines[1])) == list(json.loads(recorded.splitlines()[0]))
    assert lines[0].startswith('{"Type":"cpu","Name":"cpu0","Dimension":"CPUUtilization","Value":')
    assert json.loads(second.read_text())["Dimension"] == "Algorithm"


def test_writes_append_to_the_minute_file(tmp_path: Path) -> None:
    writer = SystemMetricsWriter(tmp_path)
    writer.write([SystemRecord("cpu", "cpu0", "CPUUtilization", 1.0, T0_S)])
    writer.close()
    reopened = SystemMetricsWriter(tmp_path)
    reopened.write([SystemRecord("cpu", "cpu0", "CPUUtilization", 2.0, T0_S + 1)])
    reopened.close()
    [path] = tmp_path.rglob("*.json")
    assert [json.loads(line)["Value"] for line in path.read_text().splitlines()] == [1.0, 2.0]


def test_numpy_values_are_written_as_numbers(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    with SystemMetricsWriter(tmp_path) as writer:
        writer.write(
            [SystemRecord("gpu", "gpu0", "GPUUtilization", np.float32(33.5), np.float64(T0_S))]
        )
    [path] = tmp_path.rglob("*.json")
    record = json.loads(path.read_text())
    assert record["Value"] == 33.5 and record["Timestamp"] == T0_S


def test_node_must_be_algo_n(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="SystemMetricsWriter.node must be 'algo-<n>'"):
        SystemMetricsWriter(tmp_path, node="myhost")


def test_unwritable_folder_drops_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("not a folder")
    writer = SystemMetricsWriter(blocker / "sub")
    with caplog.at_level(logging.WARNING, logger="stepscope.store.system_writer"):
        for i in range(5):
            assert writer.write([SystemRecord("cpu", "cpu0", "CPUUtilization", 1.0, T0_S + i)]) == 0
    assert writer.dropped_records == 5
    assert len(caplog.records) == 1 and "could not be written" in caplog.records[0].getMessage()


def test_a_removed_system_folder_is_made_again_within_the_minute(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with SystemMetricsWriter(tmp_path) as writer:
        writer.write([SystemRecord("cpu", "cpu0", "CPUUtilization", 1.0, T0_S)])
        shutil.rmtree(tmp_path / "system")  # a user cleaning up while the job runs
        with caplog.at_level(logging.WARNING, logger="stepscope.store.system_writer"):
            assert writer.write([SystemRecord("cpu", "cpu0", "CPUUtilization", 2.0, T0_S + 1)])
            writer.write([SystemRecord("cpu", "cpu0", "CPUUtilization", 3.0, T0_S + 2)])
    [path] = tmp_path.rglob("*.json")
    assert [json.loads(line)["Value"] for line in path.read_text().splitlines()] == [2.0, 3.0]
    assert len(caplog.records) == 1 and "removed" in caplog.messages[0]


_KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    from stepscope.store import SystemMetricsWriter, SystemRecord
    writer = SystemMetricsWriter(sys.argv[1])
    i = 0
    while True:
        writer.write([SystemRecord("cpu", f"cpu{c}", "CPUUtilization", float(i), 1.7e9 + i) for c in range(8)])
        i += 1
        if i % 50 == 0:
            time.sleep(0.005)
    """
)


def test_kill_9_leaves_only_whole_snapshots(tmp_path: Path) -> None:
    process = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(tmp_path)])
    try:
        deadline = time.monotonic() + 60
        while sum(p.stat().st_size for p in tmp_path.rglob("*.json")) < 200_000:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    records = [
        json.loads(line)
        for p in sorted(tmp_path.rglob("*.json"))
        for line in p.read_text().splitlines()
    ]
    values = [r["Value"] for r in records]
    assert len(values) % 8 == 0  # each write call landed whole
    assert values == [float(i) for i in range(len(values) // 8) for _ in range(8)]


_FULL_DISK_WRITER = textwrap.dedent(
    """
    import resource, signal, sys
    from stepscope.store import SystemMetricsWriter, SystemRecord
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    writer = SystemMetricsWriter(sys.argv[1])
    snapshot = lambda i: [SystemRecord("cpu", f"cpu{c}", "CPUUtilization", float(i), 1.7e9 + i) for c in range(8)]
    resource.setrlimit(resource.RLIMIT_FSIZE, (3000, hard))  # the disk fills up
    results = [writer.write(snapshot(i)) for i in range(10)]
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space is freed
    results += [writer.write(snapshot(i)) for i in range(10, 12)]
    writer.close()
    print(results, writer.dropped_records)
    """
)


def test_a_full_disk_leaves_no_torn_line_behind(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _FULL_DISK_WRITER, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    results, dropped = done.stdout.rsplit(" ", 1)
    written = json.loads(results)
    assert 0 in written[:10] and written[10:] == [8, 8] and int(dropped) == written.count(0) * 8
    [path] = tmp_path.rglob("*.json")
    values = [
        json.loads(line)["Value"] for line in path.read_text().splitlines()
    ]  # all whole lines
    kept = [float(i) for i, n in enumerate(written) if n]
    assert values == [v for v in kept for _ in range(8)]
    assert done.stderr.count("could not be written") == 1


_DISK_FULL_TWICE_WRITER = textwrap.dedent(
    """
    import logging, resource, signal, sys
    from stepscope.store import SystemMetricsWriter, SystemRecord
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    writer = SystemMetricsWriter(sys.argv[1])
    snapshot = lambda i: [SystemRecord("cpu", f"cpu{c}", "CPUUtilization", float(i), 1.7e9 + i) for c in range(8)]
    for spell in range(2):
        print(f"INFO spell {spell}", file=sys.stderr, flush=True)
        resource.setrlimit(resource.RLIMIT_FSIZE, (3000 * (spell + 1), hard))  # the disk fills up
        for i in range(10):
            writer.write(snapshot(20 * spell + i))
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space is freed
        writer.write(snapshot(20 * spell + 10))
    writer.close()
    """
)


def test_a_disk_that_fills_again_after_it_was_freed_is_warned_about_again(
    tmp_path: Path,
) -> None:
    # the one warning came at the first full disk only: a second was silent, records lost unsaid
    done = subprocess.run(
        [sys.executable, "-c", _DISK_FULL_TWICE_WRITER, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    spells = done.stderr.split("INFO spell ")[1:]
    assert len(spells) == 2
    for spell in spells:  # one warning each time writing starts failing, not one per write
        assert spell.count("WARNING ") == 1, done.stderr
        assert "could not be written" in spell
        assert "are written again" in spell and "dropped" in spell


def test_job_end_marker_is_seen_by_us_and_by_sagemaker_readers(tmp_path: Path) -> None:
    assert not job_has_ended(tmp_path)
    marker = write_job_end_marker(tmp_path)
    assert marker == tmp_path / "training_job_end.ts"
    assert marker.exists() and (tmp_path / "system/training_job_end.ts").exists()
    assert job_has_ended(tmp_path)
