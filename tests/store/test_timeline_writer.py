"""TimelineWriter: SageMaker pevents files, rotation, durability, failures and fork safety."""

from __future__ import annotations

import calendar
import json
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from stepscope.errors import ConfigError
from stepscope.store import TimelineWriter, recover_timeline_files

NODE = "0-algo-1"
# 2026-02-03 10:59:58 UTC: close to an hour boundary on purpose.
T0_US = calendar.timegm((2026, 2, 3, 10, 59, 58)) * 1_000_000


def closed_files(root: Path) -> list[Path]:
    return sorted((root / "framework" / "pevents").glob("*/*"))


def read_events(path: Path) -> list[dict[str, Any]]:
    """Check one closed file against SageMaker's format and return its events, times absolute."""
    records = json.loads(path.read_text())
    assert path.read_bytes().startswith(b"[\n") and path.read_bytes().endswith(b"\n]\n")
    assert records[0]["name"] == "process_name" and records[0]["pid"] == 0
    start_us = records[0]["args"]["start_time_since_epoch_in_micros"]
    assert isinstance(start_us, int)
    assert records[1] == {
        "name": "process_sort_index",
        "ph": "M",
        "pid": 0,
        "args": {"sort_index": 0},
    }
    phases: dict[int, str] = {}
    events = []
    for index, record in enumerate(records[2:], start=2):
        if record["ph"] == "M":
            assert record["pid"] >= 1  # pid 0 is the start-time process
            if record["name"] == "process_name":
                assert record["pid"] not in phases, "phase declared twice in one file"
                phases[record["pid"]] = record["args"]["name"]
                assert records[index + 1] == {
                    "name": "process_sort_index",
                    "ph": "M",
                    "pid": record["pid"],
                    "args": {"sort_index": record["pid"]},
                }
            continue
        assert record["pid"] in phases, "event before its phase metadata"
        assert set(record) == {"name", "pid", "ph", "ts", "dur", "args"}
        events.append(
            {
                "phase": phases[record["pid"]],
                "pid": record["pid"],
                "name": record["name"],
                "start_us": start_us + record["ts"],
                "dur_us": record["dur"],
                "args": record["args"],
            }
        )
    return events


def all_events(root: Path) -> list[dict[str, Any]]:
    return [event for path in closed_files(root) for event in read_events(path)]


def test_file_is_in_sagemaker_pevents_format_named_by_last_event_end(tmp_path: Path) -> None:
    writer = TimelineWriter(tmp_path, NODE)
    writer.write_event(
        "Step:ModeKeys.TRAIN", "Step:ModeKeys.TRAIN", T0_US, 900.0, {"step_num": "0"}
    )
    writer.write_event("Net", "Forward", T0_US + 100, 300.0, {"step_num": "0", "pid": 77})
    writer.write_event("Step:ModeKeys.TRAIN", "Step:ModeKeys.TRAIN", T0_US + 1000, 500.0)
    writer.close()

    [path] = closed_files(tmp_path)
    assert path.parent.name == "2026020310"
    assert path.name == f"{T0_US + 1500}_{NODE}_pythontimeline.json"
    events = read_events(path)
    assert [(e["phase"], e["pid"], e["name"]) for e in events] == [
        ("Step:ModeKeys.TRAIN", 1, "Step:ModeKeys.TRAIN"),
        ("Forward", 2, "Net"),
        ("Step:ModeKeys.TRAIN", 1, "Step:ModeKeys.TRAIN"),
    ]
    assert [e["start_us"] for e in events] == [T0_US, T0_US + 100, T0_US + 1000]
    assert [e["dur_us"] for e in events] == [900.0, 300.0, 500.0]
    assert events[1]["args"] == {"step_num": "0", "pid": 77}
    assert not list((tmp_path / "framework").glob("*.tmp"))
    assert writer.dropped_events == 0


def test_start_time_never_follows_the_first_event(tmp_path: Path) -> None:
    late_clock_s = (T0_US + 5_000_000) / 1e6
    writer = TimelineWriter(tmp_path, NODE, clock_s=lambda: late_clock_s)
    writer.write_event("a", "Forward", T0_US, 10.0)
    writer.close()
    [path] = closed_files(tmp_path)
    records = json.loads(path.read_text())
    assert records[0]["args"]["start_time_since_epoch_in_micros"] == T0_US
    assert records[-1]["ts"] == 0


def test_rotation_by_size_keeps_every_event_once_and_every_file_valid(tmp_path: Path) -> None:
    writer = TimelineWriter(tmp_path, NODE, suffix="model_timeline.json", file_max_size=2000)
    count = 200
    for i in range(count):
        phase = "DataLoaderIter" if i % 3 else "DataLoaderWorker"
        writer.write_event(f"e{i}", phase, T0_US + i * 1000, 100.0, {"i": i})
    writer.close()

    files = closed_files(tmp_path)
    assert len(files) > 5
    sizes = [path.stat().st_size for path in files]
    longest_record = max(len(line) for path in files for line in path.read_bytes().splitlines())
    assert max(sizes) <= 2000 + 2 * longest_record + 3
    events = all_events(tmp_path)
    assert [e["args"]["i"] for e in events] == list(range(count))
    # a phase keeps its pid in every file, and the file name is its last event's end
    assert {e["phase"]: e["pid"] for e in events} == {"DataLoaderWorker": 1, "DataLoaderIter": 2}
    for path in files:
        last_end = max(e["start_us"] + e["dur_us"] for e in read_events(path))
        assert path.name == f"{int(last_end)}_{NODE}_model_timeline.json"


def test_files_go_to_the_hour_folder_of_their_last_event(tmp_path: Path) -> None:
    writer = TimelineWriter(tmp_path, NODE, file_max_size=1)  # one event per file
    writer.write_event("before", "Forward", T0_US, 1000.0)  # ends 10:59:58.001
    writer.write_event("after", "Forward", T0_US + 2_500_000, 1000.0)  # 11:00:00.5
    writer.close()
    assert [(p.parent.name, read_events(p)[0]["name"]) for p in closed_files(tmp_path)] == [
        ("2026020310", "before"),
        ("2026020311", "after"),
    ]


def wait_for(condition: Any, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_idle_file_is_closed_on_the_interval(tmp_path: Path) -> None:
    writer = TimelineWriter(tmp_path, NODE, file_close_interval_s=0.2)
    try:
        writer.write_event("first", "Forward", T0_US, 10.0)
        # no further event and no close(): the interval alone must close the file
        assert wait_for(lambda: len(closed_files(tmp_path)) == 1)
        assert [e["name"] for e in all_events(tmp_path)] == ["first"]
        writer.write_event("second", "Forward", T0_US + 1000, 10.0)
        assert wait_for(lambda: len(closed_files(tmp_path)) == 2)
    finally:
        writer.close()
    assert [e["name"] for e in all_events(tmp_path)] == ["first", "second"]


class _BlockingClock:
    """A clock that holds the writer thread at its first file open until released."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def __call__(self) -> float:
        self.release.wait(timeout=30)
        return T0_US / 1e6


def test_full_queue_drops_and_counts_without_blocking(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = _BlockingClock()
    writer = TimelineWriter(tmp_path, NODE, queue_size=10, clock_s=clock)
    with caplog.at_level(logging.WARNING, logger="stepscope.store.timeline_writer"):
        accepted = [writer.write_event(f"e{i}", "Forward", T0_US + i, 1.0) for i in range(100)]
    dropped = accepted.count(False)
    assert dropped > 0 and writer.dropped_events == dropped
    assert sum("dropping events" in r.getMessage() for r in caplog.records) == 1
    clock.release.set()
    writer.close()
    written = [e["name"] for e in all_events(tmp_path)]
    assert written == [f"e{i}" for i, ok in enumerate(accepted) if ok]


def test_a_batch_writes_the_same_file_as_its_events_one_by_one(tmp_path: Path) -> None:
    events = [
        ("Step:ModeKeys.TRAIN", "Step:ModeKeys.TRAIN", T0_US, 900.0, {"step_num": "0"}, "X"),
        ("Net", "Forward", T0_US + 100, 300.0, {"step_num": "0", "pid": 77}, "X"),
        ("conv", "Forward-SubModuleInternal", T0_US + 120, 50.0, {"step_num": "0"}, "X"),
        ("late", "Forward", T0_US + 1000, 500.0, None, "X"),
    ]
    one_by_one = TimelineWriter(tmp_path / "single", NODE, clock_s=lambda: T0_US / 1e6)
    for name, phase, start_us, dur_us, args, ph in events:
        assert one_by_one.write_event(name, phase, start_us, dur_us, args, ph)
    one_by_one.close()
    batched = TimelineWriter(tmp_path / "batch", NODE, clock_s=lambda: T0_US / 1e6)
    assert batched.write_events(list(events)) == len(events)
    batched.close()
    [single_path] = closed_files(tmp_path / "single")
    [batch_path] = closed_files(tmp_path / "batch")
    assert batch_path.name == single_path.name
    assert batch_path.read_bytes() == single_path.read_bytes()
    names = [e["name"] for e in read_events(batch_path)]
    assert names == ["Step:ModeKeys.TRAIN", "Net", "conv", "late"]


def test_a_batch_beyond_the_queue_keeps_its_head_and_counts_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = _BlockingClock()
    writer = TimelineWriter(tmp_path, NODE, queue_size=10, clock_s=clock)
    batch = [(f"e{i}", "Forward", T0_US + i, 1.0, None, "X") for i in range(25)]
    with caplog.at_level(logging.WARNING, logger="stepscope.store.timeline_writer"):
        first = writer.write_events(batch[:4])  # the writer thread may take these at once
        rest = writer.write_events(batch[4:])
        assert writer.write_events([("late", "Forward", T0_US, 1.0, None, "X")]) in (0, 1)
    assert first == 4 and rest < 21
    assert writer.dropped_events >= 21 - rest
    assert sum("dropping events" in r.getMessage() for r in caplog.records) == 1
    clock.release.set()
    writer.close()
    written = [e["name"] for e in all_events(tmp_path)]
    # what was accepted is written, in order; what was dropped is the tail of a batch
    assert written[: 4 + rest] == [f"e{i}" for i in range(4 + rest)]
    assert len(written) + writer.dropped_events == 26


def test_a_malformed_event_in_a_batch_is_dropped_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    writer = TimelineWriter(tmp_path, NODE)
    batch: list[Any] = [
        ("good1", "Forward", T0_US, 1.0, None, "X"),
        ("short", "Forward", T0_US + 1),
        ("bad", "Forward", "yesterday", 1.0, None, "X"),
        ("good2", "Forward", T0_US + 10, 1.0, None, "X"),
    ]
    with caplog.at_level(logging.WARNING, logger="stepscope.store.timeline_writer"):
        assert writer.write_events(batch) == 4
        writer.close()
    assert [e["name"] for e in all_events(tmp_path)] == ["good1", "good2"]
    assert writer.dropped_events == 2
    assert len(caplog.records) == 1 and "not a number" in caplog.messages[0]


def test_unwritable_folder_disables_after_threshold_and_never_raises(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("a file where a folder should be")
    writer = TimelineWriter(blocker / "sub", NODE, file_open_fail_threshold=5)
    with caplog.at_level(logging.WARNING, logger="stepscope.store.timeline_writer"):
        results = []
        for i in range(300):
            results.append(writer.write_event("e", "Forward", T0_US + i, 1.0))
            if i == 150:
                assert wait_for(lambda: writer.disabled)
        writer.close()
    assert writer.disabled
    assert results[-1] is False  # after disabling, events are refused at once
    assert writer.dropped_events == 300
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2  # one warning for the failure, one for disabling
    assert "could not open" in messages[0]
    assert "disabled after 5 consecutive file failures" in messages[1]


def test_a_closed_file_is_never_overwritten(tmp_path: Path) -> None:
    for run in range(2):  # e.g. a relaunched process with the same node id
        writer = TimelineWriter(tmp_path, NODE)
        writer.write_event(f"run{run}", "Forward", T0_US, 10.0)
        writer.close()
    names = [p.name for p in closed_files(tmp_path)]
    assert names == [
        f"{T0_US + 10}_{NODE}_pythontimeline.json",
        f"{T0_US + 11}_{NODE}_pythontimeline.json",
    ]
    assert [e["name"] for e in all_events(tmp_path)] == ["run0", "run1"]


def test_a_malformed_event_is_dropped_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    writer = TimelineWriter(tmp_path, NODE)
    with caplog.at_level(logging.WARNING, logger="stepscope.store.timeline_writer"):
        writer.write_event("good1", "Forward", T0_US, 1.0)
        writer.write_event("bad", "Forward", "yesterday", 1.0)  # type: ignore[arg-type]
        writer.write_event("odd args", "Forward", T0_US + 5, 1.0, {"when": object(), 3: "int key"})
        writer.write_event("good2", "Forward", T0_US + 10, 1.0)
        writer.close()
    events = all_events(tmp_path)
    assert [e["name"] for e in events] == ["good1", "odd args", "good2"]
    assert events[1]["args"]["3"] == "int key" and "object" in events[1]["args"]["when"]
    assert writer.dropped_events == 1
    assert len(caplog.records) == 1 and "not a number" in caplog.messages[0]


def test_a_burst_keeps_one_record_a_line_whatever_its_args_hold(tmp_path: Path) -> None:
    # written as one burst; the second args hold what a record boundary looks like
    nested = {"layers": [{"name": "a"}, {"name": "b"}], "text": '},{"name":'}
    writer = TimelineWriter(tmp_path, NODE)
    writer.write_event("first", "Forward", T0_US, 1.0, {"step_num": "0"})
    writer.write_event("nested", "Forward", T0_US + 5, 2.0, nested)
    writer.write_event("nan", "Forward", T0_US + 10, float("nan"), None)
    writer.write_event("last", "Backward", T0_US + 20, 3.0, {"step_num": "0"})
    writer.close()
    [path] = closed_files(tmp_path)
    events = read_events(path)
    assert [e["name"] for e in events] == ["first", "nested", "nan", "last"]
    assert events[1]["args"] == nested and events[2]["dur_us"] is None
    # every record on its own line (what the recovery of a killed writer's file relies on)
    lines = path.read_text().splitlines()
    assert len(lines) == 1 + 2 + 2 * 2 + 4 + 1  # "[", start time, two phases, events, "]"
    assert all(json.loads(line.removesuffix(",")) for line in lines[1:-1])


_FULL_DISK_WRITER = textwrap.dedent(
    """
    import json, logging, resource, signal, sys
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    from stepscope.store import TimelineWriter
    # files cannot grow past 20 kB: writes fail with EFBIG, like ENOSPC on a full disk;
    # 5000 events make at least two batches (4096 at most each), each one failed write
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))
    writer = TimelineWriter(sys.argv[1], "0-algo-1", file_open_fail_threshold=2)
    accepted = sum(
        writer.write_event(f"e{i}", "Forward", 1_700_000_000_000_000 + i, 1.0, {"i": i})
        for i in range(5000)
    )
    writer.close()
    print(json.dumps({"accepted": accepted, "dropped": writer.dropped_events, "disabled": writer.disabled}))
    """
)


def test_full_disk_drops_events_with_warnings_and_leaves_no_broken_file(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _FULL_DISK_WRITER, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["disabled"] and result["dropped"] == 5000
    warnings = done.stderr.strip().splitlines()
    assert len(warnings) == 2, warnings
    assert "could not write" in warnings[0] and "disabled after 2" in warnings[1]
    assert closed_files(tmp_path) == [] and not list((tmp_path / "framework").glob("*.tmp"))


_DISK_FULL_TWICE_WRITER = textwrap.dedent(
    """
    import logging, resource, signal, sys, time
    from pathlib import Path
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    from stepscope.store import TimelineWriter
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    writer = TimelineWriter(sys.argv[1], "0-algo-1", file_max_size=2000)
    closed = lambda: len(list(Path(sys.argv[1], "framework", "pevents").glob("*/*")))

    def burst(first, until):
        for i in range(first, first + 50):
            writer.write_event(f"e{i}", "Forward", 1_700_000_000_000_000 + i, 1.0, {"i": i})
        deadline = time.monotonic() + 60
        while not until() and time.monotonic() < deadline:
            time.sleep(0.01)

    for spell in range(2):
        print(f"INFO spell {spell}", file=sys.stderr, flush=True)
        dropped, files = writer.dropped_events, closed()
        resource.setrlimit(resource.RLIMIT_FSIZE, (500, hard))  # the disk fills up
        burst(100 * spell, lambda: writer.dropped_events > dropped)
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space is freed
        burst(100 * spell + 50, lambda: closed() > files)
    writer.close()
    """
)


def test_a_disk_that_fills_again_after_it_was_freed_is_warned_about_again(
    tmp_path: Path,
) -> None:
    # the one warning came at the first full disk only: a second was silent, events lost unsaid
    done = subprocess.run(
        [sys.executable, "-c", _DISK_FULL_TWICE_WRITER, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    spells = done.stderr.split("INFO spell ")[1:]
    assert len(spells) == 2
    for spell in spells:  # one warning each time writing starts failing, not one per write
        assert spell.count("WARNING ") == 1, done.stderr
        assert "could not write" in spell and "files are written again" in spell, done.stderr


def test_invalid_settings_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="TimelineWriter.file_max_size must be an integer > 0"):
        TimelineWriter(tmp_path, NODE, file_max_size=0)
    with pytest.raises(ConfigError, match="TimelineWriter.suffix"):
        TimelineWriter(tmp_path, NODE, suffix="timeline.json")


_KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    from stepscope.store import TimelineWriter, recover_timeline_files
    writer = TimelineWriter(sys.argv[1], "0-algo-1", file_max_size=3000)
    i = 0
    while True:
        # a full queue drops the event (and says so): offer it again, so the sequence has no gap
        if writer.write_event(f"e{i}", "Forward", 1_700_000_000_000_000 + i * 10, 5.0, {"i": i}):
            i += 1
            if i % 200 == 0:
                time.sleep(0.01)
        else:
            time.sleep(0.001)
    """
)


def test_kill_9_loses_nothing_that_was_closed(tmp_path: Path) -> None:
    process = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(tmp_path)])
    try:
        assert wait_for(lambda: len(closed_files(tmp_path)) >= 5, timeout_s=60)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    indices = [e["args"]["i"] for e in all_events(tmp_path)]  # every closed file parses
    assert indices == list(range(len(indices)))  # and holds a gapless prefix of the events
    assert len(indices) > 0
    # the file that was open when the process died is recovered, continuing the sequence
    recovered = recover_timeline_files(tmp_path)  # one file, unless it died between files
    assert len(recovered) <= 1 and set(recovered) <= set(closed_files(tmp_path))
    after = [e["args"]["i"] for e in all_events(tmp_path)]
    assert after == list(range(len(after))) and len(after) >= len(indices) + len(recovered)
    assert not list((tmp_path / "framework").glob("*.tmp"))


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_recovery_cuts_a_torn_record_and_leaves_live_files_alone(tmp_path: Path) -> None:
    framework = tmp_path / "framework"
    framework.mkdir()
    header = (
        b'[\n{"name":"process_name","ph":"M","pid":0,"args":{"start_time_since_epoch_in_micros":1000}},\n'
        b'{"name":"process_sort_index","ph":"M","pid":0,"args":{"sort_index":0}},\n'
        b'{"name":"process_name","ph":"M","pid":1,"args":{"name":"Forward"}},\n'
        b'{"name":"process_sort_index","ph":"M","pid":1,"args":{"sort_index":1}}'
    )
    events = b',\n{"name":"a","pid":1,"ph":"X","ts":5,"dur":10,"args":{}},\n{"name":"b","pid":1,"ph":"X","ts":20,"dur":30,"args":{}}'
    torn = b',\n{"name":"c","pid":1,"ph":"X","ts":60,"du'
    dead = framework / f"{NODE}_pythontimeline.json.{_dead_pid()}.tmp"
    dead.write_bytes(header + events + torn)
    live = framework / f"{NODE}_pythontimeline.json.{os.getpid()}.tmp"
    live.write_bytes(header + events)
    empty = framework / f"1-algo-1_pythontimeline.json.{_dead_pid()}.tmp"
    empty.write_bytes(header)

    [recovered] = recover_timeline_files(tmp_path)
    assert recovered.name == f"1050_{NODE}_pythontimeline.json"  # b ends at 1000 + 20 + 30
    assert [(e["name"], e["start_us"]) for e in read_events(recovered)] == [
        ("a", 1005),
        ("b", 1020),
    ]
    assert live.exists() and not dead.exists() and not empty.exists()


def test_recovery_of_a_file_published_before_its_writer_died_keeps_one_copy(
    tmp_path: Path,
) -> None:
    # a close publishes the file as a hard link in pevents/, then removes the .tmp name: a
    # kill -9 between the two leaves both names on one closed file
    writer = TimelineWriter(tmp_path, NODE)
    for i in range(5):
        writer.write_event(f"e{i}", "Forward", T0_US + i, 1.0)
    writer.close()
    [published] = closed_files(tmp_path)
    left_over = tmp_path / "framework" / f"{NODE}_pythontimeline.json.{_dead_pid()}.tmp"
    os.link(published, left_over)

    assert recover_timeline_files(tmp_path) == []
    assert closed_files(tmp_path) == [published] and not left_over.exists()
    assert [e["name"] for e in all_events(tmp_path)] == [f"e{i}" for i in range(5)]


_EXITING_WRITER = textwrap.dedent(
    """
    import sys
    from stepscope.store import TimelineWriter, recover_timeline_files
    writer = TimelineWriter(sys.argv[1], "0-algo-1")
    for i in range(50):
        writer.write_event(f"e{i}", "Forward", 1_700_000_000_000_000 + i, 1.0)
    # no close(): the interpreter exit must close the file
    """
)


def test_interpreter_exit_closes_the_open_file(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-c", _EXITING_WRITER, str(tmp_path)], check=True, timeout=60)
    assert [e["name"] for e in all_events(tmp_path)] == [f"e{i}" for i in range(50)]


def _write_in_child(writer: TimelineWriter, count: int) -> None:
    for i in range(count):
        writer.write_event(f"child{i}", "DataLoaderWorker", T0_US + 10_000 + i, 1.0, {"i": i})
    # multiprocessing children leave through os._exit: no close(), no atexit


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_forked_child_writes_its_own_files_and_leaves_the_parents_intact(tmp_path: Path) -> None:
    writer = TimelineWriter(tmp_path, NODE, suffix="model_timeline.json")
    for i in range(20):
        writer.write_event(f"parent{i}", "DataLoaderIter", T0_US + i, 1.0)
    context = multiprocessing.get_context("fork")
    children = [context.Process(target=_write_in_child, args=(writer, 30)) for _ in range(2)]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
        assert child.exitcode == 0
    for i in range(20, 40):
        writer.write_event(f"parent{i}", "DataLoaderIter", T0_US + i, 1.0)
    writer.close()

    names = [e["name"] for e in all_events(tmp_path)]
    assert sorted(n for n in names if n.startswith("parent")) == sorted(
        f"parent{i}" for i in range(40)
    )
    assert sorted(n for n in names if n.startswith("child")) == sorted(
        f"child{i}" for i in range(30) for _ in range(2)
    )
    assert not list((tmp_path / "framework").glob("*.tmp"))
    assert len({p.name for p in closed_files(tmp_path)}) == len(closed_files(tmp_path)) == 3
    assert os.getpid() == writer._pid  # the parent's writer was not reset by the children


_SMDEBUG_READER = """
import json, sys
from smdebug.profiler.algorithm_metrics_reader import LocalAlgorithmMetricsReader
root, start_us, end_us, result = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
events = LocalAlgorithmMetricsReader(root).get_events(start_us, end_us)
with open(result, "w") as out:
    json.dump(
        [[e.event_name, e.event_phase, e.start_time, e.duration, e.event_args, e.file_type] for e in events],
        out,
    )
"""


@pytest.mark.slow
def test_smdebug_reads_our_files_as_we_wrote_them(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    try:
        from peers import SMDEBUG, PeerSetupError, peer_python
    finally:
        sys.path.pop(0)
    try:
        python = peer_python("smdebug", SMDEBUG)
    except PeerSetupError as exc:
        pytest.skip(f"smdebug could not be installed: {exc}")
    output = tmp_path / "out"
    written = []
    for suffix in ("pythontimeline.json", "model_timeline.json"):
        writer = TimelineWriter(output, NODE, suffix=suffix, file_max_size=1500)
        for i in range(40):
            phase = ["Step:ModeKeys.TRAIN", "Forward", "DataLoaderIter"][i % 3]
            args = {"step_num": str(i), "pid": 4321}
            writer.write_event(f"{suffix}-{i}", phase, T0_US + i * 1000, 400 + i, args)
            written.append([f"{suffix}-{i}", phase, T0_US + i * 1000, 400 + i, args])
        writer.close()
    assert len(closed_files(output)) > 4
    result = tmp_path / "events.json"
    subprocess.run(
        [
            str(python),
            "-c",
            _SMDEBUG_READER,
            str(output),
            str(T0_US - 1),
            str(T0_US + 10**6),
            str(result),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    read = json.loads(result.read_text())
    assert {tuple(e[5:]) for e in read} == {
        ("PythontimelineMetrics",),
        ("DetailedframeworkMetrics",),
    }
    assert sorted([e[:5] for e in read]) == sorted(written)


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_dataloader_workers_write_through_an_inherited_writer(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    writer = TimelineWriter(tmp_path, NODE, suffix="model_timeline.json")
    writer.write_event("before", "DataLoaderIterInitialize", T0_US, 1.0)  # thread runs before fork

    class Traced(torch.utils.data.Dataset):  # type: ignore[misc, name-defined]
        def __len__(self) -> int:
            return 16

        def __getitem__(self, index: int) -> Any:
            writer.write_event(
                f"item{index}", "DataLoaderWorker", T0_US + 10 + index, 1.0, {"pid": os.getpid()}
            )
            return torch.tensor([index])

    loader = torch.utils.data.DataLoader(
        Traced(), batch_size=4, num_workers=2, multiprocessing_context="fork"
    )
    assert sorted(int(x) for batch in loader for x in batch) == list(range(16))
    del loader  # workers exit through multiprocessing's os._exit
    writer.close()

    events = all_events(tmp_path)
    items = [e for e in events if e["name"].startswith("item")]
    assert sorted(e["name"] for e in items) == sorted(f"item{i}" for i in range(16))
    assert os.getpid() not in {e["args"]["pid"] for e in items}
    assert "before" in {e["name"] for e in events}
    assert not list((tmp_path / "framework").glob("*.tmp"))
