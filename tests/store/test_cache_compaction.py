"""Compaction of the columnar cache: the small segments of a stream merged into larger ones."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest

from stepscope.store import SYSTEM_SCHEMA, open_job
from stepscope.store.cache import ColumnarCache
from stepscope.store.filesystem import FileInfo
from stepscope.testing import TINY_JOB, generate_job

_ORDERED = {
    "system": "SELECT * FROM system ORDER BY ALL",
    "events": "SELECT * FROM events ORDER BY ALL",
}


def _end_markers(job: Path) -> list[Path]:
    output = job / "profiler-output"
    return [output / "training_job_end.ts", output / "system" / "training_job_end.ts"]


@pytest.fixture
def running_job(tmp_path: Path) -> Path:
    """A job whose end marker is not written yet: its segments are not merged."""
    job = generate_job(tmp_path / "job", **TINY_JOB)
    for marker in _end_markers(job):
        marker.unlink(missing_ok=True)
    return job


def _end(job: Path) -> None:
    _end_markers(job)[0].touch()


def _manifest(job: Path) -> dict:
    return json.loads((job / ".stepscope/cache/manifest.json").read_text())


def _live_segments(job: Path) -> set[str]:
    return {e["segment"] for e in _manifest(job)["files"].values() if e.get("segment")}


def _rows(con, table: str) -> list[tuple]:
    return con.execute(_ORDERED[table]).fetchall()


def _system_lines(job: Path) -> int:
    return sum(
        len(p.read_text().splitlines())
        for p in (job / "profiler-output").glob("system/incremental/*/*.json")
    )


def _streams(job: Path) -> set[str]:
    """One stream per system node and per event source of a rank, listed from the layout."""
    output = job / "profiler-output"
    nodes = {p.name.split(".", 1)[1] for p in output.glob("system/incremental/*/*.json")}
    sources = {p.name.split("_", 1)[1] for p in output.glob("framework/pevents/*/*.json")}
    return nodes | sources


def test_an_ended_job_has_one_segment_per_stream_with_the_same_rows(running_job: Path) -> None:
    data = open_job(running_job)
    data.refresh()
    before = _live_segments(running_job)
    assert len(before) == len(list(running_job.glob("profiler-output/*/*/*/*.json")))
    con = data.connect()
    rows = {table: _rows(con, table) for table in _ORDERED}
    _end(running_job)
    assert data.refresh() is False  # no row added or removed
    assert data.last_refresh_files == []  # and no raw file read again
    after = _live_segments(running_job)
    assert len(after) == len(_streams(running_job)) == 3
    assert after.isdisjoint(before)
    retired = {segment for segment, _ in _manifest(running_job)["retired"]}
    assert before <= retired
    fresh = data.connect()
    for table, expected in rows.items():
        assert _rows(fresh, table) == expected
    # the connection opened before the compaction still reads the replaced segments
    for table, expected in rows.items():
        assert _rows(con, table) == expected


def test_refresh_after_compaction_reads_only_new_files(running_job: Path) -> None:
    _end(running_job)
    data = open_job(running_job)
    data.refresh()
    con = data.connect()
    events_before = con.execute("SELECT count(*) FROM events").fetchone()[0]
    pevents = sorted(
        (running_job / "profiler-output/framework/pevents").glob("*/*_pythontimeline.json")
    )
    new_file = pevents[-1].with_name("1700000218749991_0-algo-1_pythontimeline.json")
    events = json.loads(pevents[-1].read_text())
    shift_us = 60_000_000
    for event in events:
        if "ts" in event:
            event["ts"] += shift_us
    new_file.write_text(json.dumps(events))
    assert data.refresh() is True
    assert data.last_refresh_files == [new_file.relative_to(running_job).as_posix()]
    added = sum(1 for e in events if e.get("ph") == "X")
    assert (
        data.connect().execute("SELECT count(*) FROM events").fetchone()[0] == events_before + added
    )
    # the job has ended, so the new file's segment joined its stream's merged segment
    assert len(_live_segments(running_job)) == len(_streams(running_job))
    assert data.refresh() is False and data.last_refresh_files == []


def test_a_grown_file_after_compaction_replaces_exactly_its_rows(
    running_job: Path, tmp_path: Path
) -> None:
    _end(running_job)
    data = open_job(running_job)
    data.refresh()
    system_files = sorted((running_job / "profiler-output").glob("system/incremental/*/*.json"))
    first = system_files[0]
    records = [json.loads(line) for line in first.read_text().splitlines()[:5]]
    with open(first, "a") as handle:
        for record in records:
            record["Timestamp"] += 59.5
            handle.write(json.dumps(record) + "\n")
    assert data.refresh() is True
    assert data.last_refresh_files == [first.relative_to(running_job).as_posix()]
    con = data.connect()
    assert con.execute("SELECT count(*) FROM system").fetchone()[0] == _system_lines(running_job)
    # the same rows as a cache built from scratch over the files as they are now
    scratch = open_job(running_job, cache_dir=tmp_path / "scratch").connect()
    for table in _ORDERED:
        assert _rows(con, table) == _rows(scratch, table)
    # a removed file takes exactly its rows out of the merged segment
    model = sorted(
        (running_job / "profiler-output/framework/pevents").glob("*/*_model_timeline.json")
    )
    gone = sum(1 for e in json.loads(model[0].read_text()) if e.get("ph") == "X")
    total = con.execute("SELECT count(*) FROM events").fetchone()[0]
    model[0].unlink()
    assert data.refresh() is True
    assert data.connect().execute("SELECT count(*) FROM events").fetchone()[0] == total - gone
    assert len(_live_segments(running_job)) == len(_streams(running_job))


_READER = textwrap.dedent(
    """
    import sys
    from stepscope.store import open_job
    con = open_job(sys.argv[1]).connect()
    query = "SELECT count(*), sum(timestamp_us) FROM system"
    print(repr(con.execute(query).fetchone()), flush=True)
    sys.stdin.readline()  # the other process compacts the cache meanwhile
    print(repr(con.execute(query).fetchone()), flush=True)
    """
)


def test_another_process_keeps_reading_while_the_cache_is_compacted(running_job: Path) -> None:
    data = open_job(running_job)
    data.refresh()
    with subprocess.Popen(
        [sys.executable, "-c", _READER, str(running_job)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as reader:
        assert reader.stdout is not None and reader.stdin is not None
        try:
            first = reader.stdout.readline().strip()
            before = _live_segments(running_job)
            _end(running_job)
            data.refresh()
            assert _live_segments(running_job).isdisjoint(before)  # compacted under its feet
            reader.stdin.write("go\n")
            reader.stdin.flush()
            second = reader.stdout.readline().strip()
        finally:
            reader.stdin.close()
            if reader.wait(timeout=60) != 0:
                reader.kill()
    assert reader.returncode == 0
    expected = data.connect().execute("SELECT count(*), sum(timestamp_us) FROM system").fetchone()
    assert first == second == repr(expected)
    assert expected[0] == _system_lines(running_job)


def test_a_reader_whose_segments_another_merged_and_deleted_reads_on_without_a_warning(
    running_job: Path, caplog: pytest.LogCaptureFixture
) -> None:
    notebook = open_job(running_job)
    notebook.refresh()
    _end(running_job)
    open_job(running_job).refresh()  # the live engine's final pass merges the segments
    later = ColumnarCache(running_job / ".stepscope" / "cache", retire_after_s=0)
    with later.locked():  # the grace period is over: the replaced segments are deleted
        later.load()
        later.save()
    with caplog.at_level(logging.WARNING, logger="stepscope.store"):
        counted = notebook.connect().execute("SELECT count(*) FROM system").fetchone()[0]
        events = notebook.table("events").num_rows
    assert counted == _system_lines(running_job)
    assert events == open_job(running_job).table("events").num_rows > 0
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


_KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    import pyarrow as pa
    from stepscope.store import SYSTEM_SCHEMA
    from stepscope.store.cache import ColumnarCache

    def rows():
        row = {"timestamp_us": 1, "node": "algo-1", "type": "cpu", "name": "cpu0", "dimension": "CPUUtilization", "value": 1.0}
        yield pa.RecordBatch.from_pylist([row], schema=SYSTEM_SCHEMA)
        print("writing", flush=True)
        time.sleep(600)  # killed here, its segment half written

    cache = ColumnarCache(sys.argv[1])
    with cache.locked():
        cache.write_segment("system", "system/incremental/1.algo-1.json", rows())
    """
)


def test_a_refresh_after_one_that_was_killed_removes_what_it_left(running_job: Path) -> None:
    """A UI server stopped while it loaded a job, an OOM-killed notebook: their half-written
    segments must not stay in the cache for ever."""
    cache = running_job / ".stepscope" / "cache"
    with subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(cache)], stdout=subprocess.PIPE, text=True
    ) as writer:
        assert writer.stdout is not None
        try:
            assert writer.stdout.readline().strip() == "writing"
        finally:
            writer.kill()
    assert list(cache.rglob("*.tmp"))  # what the killed refresh left
    data = open_job(running_job)
    data.refresh()
    assert list(cache.rglob("*.tmp")) == []
    assert data.connect().execute("SELECT count(*) FROM system").fetchone()[0] == _system_lines(
        running_job
    )


def _record(cache: ColumnarCache, name: str, value: float, *, mtime: float) -> None:
    row = {"timestamp_us": int(value), "node": "algo-1", "type": "cpu", "name": "cpu0", "dimension": "CPUUtilization", "value": value}  # fmt: skip
    batch = pa.RecordBatch.from_pylist([row], schema=SYSTEM_SCHEMA)
    segment, stats = cache.write_segment("system", name, [batch])
    cache.record(FileInfo(name, 100, mtime), segment, stats)


def test_a_running_job_merges_a_stream_once_enough_closed_segments_exist(tmp_path: Path) -> None:
    cache = ColumnarCache(tmp_path / "c", compact_min_segments=3, settled_after_s=60.0)
    old, now = 1.0, time.time()
    _record(cache, "system/a.json", 1.0, mtime=old)
    _record(cache, "system/b.json", 2.0, mtime=old)
    _record(cache, "system/c.json", 3.0, mtime=now)  # still being written
    assert cache.compact() == 0  # two closed small segments are not enough
    _record(cache, "system/d.json", 4.0, mtime=old)
    assert cache.compact() == 3
    cache.save()
    segments = {name: cache.files[name]["segment"] for name in cache.files}
    assert segments["system/a.json"] == segments["system/b.json"] == segments["system/d.json"]
    assert segments["system/c.json"] != segments["system/a.json"]
    assert [cache.files[n]["offset"] for n in ("system/a.json", "system/b.json", "system/d.json")] == [0, 1, 2]  # fmt: skip
    con = cache.connect()
    assert con.execute("SELECT list(value ORDER BY value) FROM system").fetchone() == (
        [1.0, 2.0, 3.0, 4.0],
    )
    # once the job has ended, the open file's segment joins the merged one
    assert cache.compact(ended=True) == 2
    cache.save()
    assert len({entry["segment"] for entry in cache.files.values()}) == 1
    assert cache.connect().execute("SELECT list(value ORDER BY value) FROM system").fetchone() == (
        [1.0, 2.0, 3.0, 4.0],
    )


def test_closed_files_of_a_running_job_go_straight_into_merged_segments(tmp_path: Path) -> None:
    running_job = generate_job(tmp_path / "job", **{**TINY_JOB, "minutes": 4})
    for marker in _end_markers(running_job):
        marker.unlink()
    output = running_job / "profiler-output"
    raw = sorted(output.glob("system/incremental/*/*.json")) + sorted(
        output.glob("framework/pevents/*/*.json")
    )
    newest = {max(p for p in raw if p.name.endswith(suffix)) for suffix in (".algo-1.json", "_pythontimeline.json", "_model_timeline.json")}  # fmt: skip
    an_hour_ago = time.time() - 3600
    for path in raw:
        if path not in newest:  # closed long ago; the newest file of each stream is still written
            os.utime(path, (an_hour_ago, an_hour_ago))
    data = open_job(running_job)
    data.refresh()
    files = _manifest(running_job)["files"]
    segment = {path: files[path.relative_to(running_job).as_posix()]["segment"] for path in raw}
    for path in newest:
        assert sum(1 for s in segment.values() if s == segment[path]) == 1  # a segment of its own
    closed = [path for path in raw if path not in newest]
    assert len(closed) >= 2 * len(_streams(running_job))  # several closed files per stream
    assert {segment[p].rsplit("/", 1)[0] for p in closed} == {
        s.rsplit("/", 1)[0] for s in segment.values()
    }
    assert len({segment[p] for p in closed}) == len(_streams(running_job))
    scratch_rows = {table: _rows(data.connect(), table) for table in _ORDERED}
    _end(running_job)
    data.refresh()
    assert len(_live_segments(running_job)) == len(_streams(running_job))
    for table, rows in scratch_rows.items():
        assert _rows(data.connect(), table) == rows
