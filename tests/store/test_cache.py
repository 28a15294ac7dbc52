"""The columnar cache: incremental refresh, grown and removed files, open files, where it lives."""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from stepscope.errors import ConfigError, JobNotFoundError, StoreError
from stepscope.store import EVENT_SCHEMA, SYSTEM_SCHEMA, open_job
from stepscope.testing import TINY_JOB, generate_job


@pytest.fixture
def job(tmp_path: Path) -> Path:
    return generate_job(tmp_path / "job", **TINY_JOB)


def _data_files(job: Path) -> list[str]:
    """Raw data files, listed by hand from the layout."""
    output = job / "profiler-output"
    found = list(output.glob("system/incremental/*/*.json")) + list(
        output.glob("framework/pevents/*/*.json")
    )
    return sorted(p.relative_to(job).as_posix() for p in found)


def _system_lines(job: Path) -> int:
    return sum(
        len(p.read_text().splitlines())
        for p in (job / "profiler-output").glob("system/incremental/*/*.json")
    )


def _count(job_data, table: str) -> int:
    return job_data.connect().execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_refresh_converts_each_raw_file_once(job: Path) -> None:
    data = open_job(job)
    assert data.refresh() is True
    assert sorted(data.last_refresh_files) == _data_files(job)
    assert _count(data, "system") == _system_lines(job)
    assert data.refresh() is False
    assert data.last_refresh_files == []
    # the manifest persists: a new JobData on the same job reads nothing either
    again = open_job(job)
    assert again.refresh() is False and again.last_refresh_files == []
    manifest = json.loads((job / ".stepscope/cache/manifest.json").read_text())
    assert sorted(manifest["files"]) == _data_files(job)


def test_new_grown_and_removed_files_are_the_only_ones_read(job: Path) -> None:
    data = open_job(job)
    data.refresh()
    before = _count(data, "system")
    files = sorted((job / "profiler-output").glob("system/incremental/*/*.json"))
    # a new minute file
    new_file = files[-1].with_name(f"{int(files[-1].name.split('.')[0]) + 60}.algo-1.json")
    new_file.write_text(files[-1].read_text())
    assert data.refresh() is True
    assert data.last_refresh_files == [new_file.relative_to(job).as_posix()]
    assert _count(data, "system") == before + len(new_file.read_text().splitlines())
    # a grown file is re-read whole and its old segment replaced
    manifest_path = job / ".stepscope/cache/manifest.json"
    rel = files[0].relative_to(job).as_posix()
    old_segment = json.loads(manifest_path.read_text())["files"][rel]["segment"]
    extra = files[0].read_text().splitlines()[:5]
    with open(files[0], "a") as handle:
        handle.write("\n".join(extra) + "\n")
    assert data.refresh() is True
    assert data.last_refresh_files == [rel]
    manifest = json.loads(manifest_path.read_text())
    new_segment = manifest["files"][rel]["segment"]
    assert new_segment != old_segment
    assert (job / ".stepscope/cache" / new_segment).exists()
    # the old segment leaves the views at once and the disk after a grace period
    assert old_segment in [segment for segment, _ in manifest["retired"]]
    assert old_segment not in [e["segment"] for e in manifest["files"].values()]
    assert _count(data, "system") == _system_lines(job)
    # a removed file takes its rows with it
    removed = len(new_file.read_text().splitlines())
    new_file.unlink()
    total = _count(data, "system")
    assert data.refresh() is True
    assert _count(data, "system") == total - removed


def test_open_tmp_files_are_never_read(job: Path) -> None:
    framework = job / "profiler-output" / "framework"
    pevents = sorted(framework.glob("pevents/*/*_pythontimeline.json"))[0]
    tmp = framework / "0-algo-1_pythontimeline.json.4242.tmp"
    shutil.copy(pevents, tmp)
    data = open_job(job)
    data.refresh()
    assert tmp.relative_to(job).as_posix() not in data.last_refresh_files
    expected = sum(
        sum(1 for e in json.loads(p.read_text()) if e.get("ph") == "X")
        for p in framework.glob("pevents/*/*.json")
    )
    assert _count(data, "events") == expected


def _timeline_written_later(job: Path, aside: Path) -> tuple[list[Path], Callable[[], int]]:
    """The second half of the job's timeline files, moved to ``aside`` as if not written yet,
    and what writes them back and returns how many events they hold."""
    pevents = sorted((job / "profiler-output/framework/pevents").glob("*/*.json"))
    late = pevents[len(pevents) // 2 :]
    aside.mkdir()
    for path in late:
        shutil.move(path, aside / path.name)

    def write_them() -> int:
        for path in late:
            shutil.move(aside / path.name, path)
        return sum(sum(1 for e in json.loads(p.read_text()) if e.get("ph") == "X") for p in late)

    return late, write_them


def test_a_job_still_being_written_shows_more_rows_after_refresh(job: Path, tmp_path: Path) -> None:
    late, write_them = _timeline_written_later(job, tmp_path / "aside")
    data = open_job(job)
    data.refresh()
    first = _count(data, "events")
    added = write_them()
    assert data.refresh() is True
    assert sorted(data.last_refresh_files) == sorted(p.relative_to(job).as_posix() for p in late)
    assert _count(data, "events") == first + added


def test_rows_another_process_converted_are_new_rows_for_every_reader(
    job: Path, tmp_path: Path
) -> None:
    """The live rule engine, the UI and a notebook refresh one cache: whichever converts the
    new files, the others' refresh must say there are new rows, or they keep stale answers."""
    _, write_them = _timeline_written_later(job, tmp_path / "aside")
    data = open_job(job)
    data.refresh()
    first = _count(data, "events")
    added = write_them()
    other = "from stepscope.store import open_job; import sys; open_job(sys.argv[1]).refresh()"
    subprocess.run([sys.executable, "-c", other, str(job)], check=True, timeout=120)
    assert data.refresh() is True
    assert data.last_refresh_files == []  # the other process read them
    assert _count(data, "events") == first + added
    assert data.refresh() is False


def test_the_last_line_of_a_system_file_being_written_is_read_once_complete_without_a_warning(
    job: Path, caplog: pytest.LogCaptureFixture
) -> None:
    output = job / "profiler-output"
    for marker in (output / "training_job_end.ts", output / "system" / "training_job_end.ts"):
        marker.unlink()  # the job runs: its newest system file is still appended to
    newest = sorted(output.glob("system/incremental/*/*.json"))[-1]
    lines = newest.read_bytes().splitlines(keepends=True)
    half = len(lines) // 2
    newest.write_bytes(b"".join(lines[:half]) + lines[half][:20])  # a line cut mid-record
    data = open_job(job)
    with caplog.at_level(logging.WARNING, logger="stepscope.store"):
        data.refresh()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert _count(data, "system") == _system_lines(job) - 1  # the whole lines
    with open(newest, "ab") as handle:  # the writer completes the line and goes on
        handle.write(lines[half][20:] + b"".join(lines[half + 1 :]))
    assert data.refresh() is True
    assert _count(data, "system") == _system_lines(job)
    # once the job has ended, a line cut short is damage, and said so
    newest.write_bytes(b"".join(lines[:half]) + lines[half][:20])
    (output / "training_job_end.ts").touch()
    with caplog.at_level(logging.WARNING, logger="stepscope.store"):
        data.refresh()
    assert any(str(newest) in r.getMessage() for r in caplog.records)
    assert _count(data, "system") == _system_lines(job) - 1


def test_views_exist_with_the_schema_columns_when_there_is_no_data(tmp_path: Path) -> None:
    (tmp_path / "out" / "system").mkdir(parents=True)
    con = open_job(tmp_path / "out").connect()
    for table, schema in (("system", SYSTEM_SCHEMA), ("events", EVENT_SCHEMA)):
        assert con.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,)
        columns = [row[0] for row in con.execute(f"DESCRIBE {table}").fetchall()]
        assert columns == schema.names


def test_a_file_that_is_not_a_trace_is_skipped_and_retried_only_when_it_changes(
    job: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hour = sorted((job / "profiler-output/framework/pevents").iterdir())[0]
    bogus = hour / "1700000099000000_0-algo-1_pythontimeline.json"
    bogus.write_text('{"this": "is not an event array"}\n')
    data = open_job(job)
    with caplog.at_level(logging.WARNING, logger="stepscope.store"):
        data.refresh()
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(bogus) in m and "Chrome trace-event JSON array" in m for m in messages)
    assert data.refresh() is False and data.last_refresh_files == []
    bogus.write_text("[\n]\n")
    os.utime(bogus, (1, 1))
    data.refresh()
    assert data.last_refresh_files == [bogus.relative_to(job).as_posix()]


@contextmanager
def _read_only(job: Path) -> Iterator[None]:
    """The job's folders without write permission while the block runs (a colleague's job)."""
    folders = [job, *(p for p in job.rglob("*") if p.is_dir())]
    for folder in folders:
        folder.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP)
    try:
        yield
    finally:
        for folder in folders:
            folder.chmod(stat.S_IRWXU)


def test_read_only_job_caches_under_the_user_cache(
    job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "user-cache"))
    with _read_only(job):
        data = open_job(job)
        assert data.cache_dir.parent == tmp_path / "user-cache"
        assert data.refresh() is True
        assert _count(data, "system") == _system_lines(job)
        assert not (job / ".stepscope").exists()


def test_a_read_only_job_is_read_when_the_home_folder_cannot_hold_the_user_cache(
    job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("STEPSCOPE_CACHE_DIR", raising=False)
    home = tmp_path / "home"
    home.write_text("")  # no folder can be made under it, as under a read-only home
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    with _read_only(job), caplog.at_level(logging.WARNING, logger="stepscope.store"):
        data = open_job(job)
        assert data.refresh() is True
        assert _count(data, "system") == _system_lines(job)
    assert data.cache_dir.is_relative_to(tmp_path / "tmp")
    (note,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert str(data.cache_dir) in note and "STEPSCOPE_CACHE_DIR" in note


@pytest.mark.parametrize("planted", ["open to everyone", "a link"])
def test_the_temporary_cache_is_never_a_folder_another_user_could_have_planted(
    job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    monkeypatch.delenv("STEPSCOPE_CACHE_DIR", raising=False)
    home = tmp_path / "home"
    home.write_text("")  # no user cache, as under a read-only home
    monkeypatch.setenv("HOME", str(home))
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    usual = temporary / f"stepscope-cache-{os.getuid()}"
    elsewhere = tmp_path / "someone-elses"
    elsewhere.mkdir()
    if planted == "a link":
        usual.symlink_to(elsewhere)
    else:
        usual.mkdir()
        usual.chmod(0o777)
    with _read_only(job):
        data = open_job(job)
        assert data.refresh() is True
        assert _count(data, "system") == _system_lines(job)
    assert not data.cache_dir.is_relative_to(usual)
    assert data.cache_dir.is_relative_to(temporary)
    assert not any(elsewhere.iterdir())


def test_a_cache_folder_that_cannot_be_made_is_a_clear_error(
    job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = tmp_path / "a-file"
    taken.write_text("")
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(taken))
    with _read_only(job), pytest.raises(StoreError, match="STEPSCOPE_CACHE_DIR") as raised:
        open_job(job)
    assert str(taken) in str(raised.value)
    with pytest.raises(StoreError, match="cache_dir=") as raised:
        open_job(job, cache_dir=taken / "cache")
    assert str(taken / "cache") in str(raised.value)


def test_the_recorded_fixtures_stay_untouched(
    shared_fixtures: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "user-cache"))
    folder = shared_fixtures / "smdebug" / "test_traces"
    data = open_job(folder)
    data.refresh()
    assert data.cache_dir.parent == tmp_path / "user-cache"
    assert not (folder / ".stepscope").exists()
    lines = sum(len(p.read_text().splitlines()) for p in folder.glob("system/**/*.json"))
    assert _count(data, "system") == lines


def test_retired_segments_are_deleted_after_the_grace_period(tmp_path: Path) -> None:
    import pyarrow as pa

    from stepscope.store.cache import ColumnarCache
    from stepscope.store.filesystem import FileInfo

    row = {"timestamp_us": 1, "node": "algo-1", "type": "cpu", "name": "cpu0", "dimension": "", "value": 1.0}  # fmt: skip
    batch = pa.RecordBatch.from_pylist([row], schema=SYSTEM_SCHEMA)
    cache = ColumnarCache(tmp_path / "c", retire_after_s=0.0)
    segment, stats = cache.write_segment("system", "system/x.json", [batch])
    assert segment is not None and stats["rows"] == 1
    cache.record(FileInfo("system/x.json", 10, 1.0), segment, stats)
    cache.save()
    assert cache.connect().execute("SELECT count(*) FROM system").fetchone() == (1,)
    cache.drop("system/x.json")
    assert (tmp_path / "c" / segment).exists()  # retired, not yet deleted
    cache.save()
    assert not (tmp_path / "c" / segment).exists()
    assert cache.connect().execute("SELECT count(*) FROM system").fetchone() == (0,)


def test_missing_or_damaged_segments_are_rebuilt_from_the_raw_files(
    job: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = open_job(job)
    data.refresh()
    expected = {table: _count(data, table) for table in ("system", "events")}
    cache = job / ".stepscope" / "cache"
    live = {
        e["segment"] for e in json.loads((cache / "manifest.json").read_text())["files"].values()
    }
    # the job has ended: each stream's files share one merged segment
    (system_segment,) = [s for s in live if s.startswith("system/")]
    (python_segment,) = [s for s in live if "pythontimeline" in s]
    (cache / system_segment).unlink()
    (cache / python_segment).write_bytes(b"not parquet at all")
    with caplog.at_level(logging.WARNING, logger="stepscope.store"):
        con = data.connect()
    for table, rows in expected.items():
        assert con.execute(f"SELECT count(*) FROM {table}").fetchone() == (rows,)
    reread = [p for p in _data_files(job) if "/system/" in p or p.endswith("_pythontimeline.json")]
    assert any(f"re-reading {len(reread)} raw file(s)" in r.getMessage() for r in caplog.records)
    assert sorted(data.last_refresh_files) == reread


def test_a_whole_table_without_duckdb_has_the_rows_of_the_view_in_order(job: Path) -> None:
    data = open_job(job)
    con = data.connect()
    for table, schema in (("system", SYSTEM_SCHEMA), ("events", EVENT_SCHEMA)):
        whole = data.table(table)
        assert whole.schema == schema
        assert whole.to_pylist() == con.sql(f"SELECT * FROM {table}").to_arrow_table().to_pylist()
    assert data.table("system").num_rows == _system_lines(job)
    with pytest.raises(ConfigError, match="JobData.table.kind must be 'system' or 'events'"):
        data.table("kernels")


def test_a_whole_table_of_a_job_without_data_is_empty_with_the_schema(tmp_path: Path) -> None:
    (tmp_path / "out" / "system").mkdir(parents=True)
    data = open_job(tmp_path / "out")
    assert data.table("events").num_rows == 0
    assert data.table("events").schema == EVENT_SCHEMA


def test_a_whole_table_is_rebuilt_when_its_segment_is_damaged(
    job: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = open_job(job)
    expected = data.table("events").to_pylist()
    cache = job / ".stepscope" / "cache"
    for segment in cache.glob("events/pythontimeline/*/*.parquet"):
        segment.write_bytes(b"not parquet at all")
    with caplog.at_level(logging.WARNING, logger="stepscope.store"):
        again = open_job(job).table("events")
    assert sorted(again.to_pylist(), key=repr) == sorted(expected, key=repr)
    assert any("re-reading" in r.getMessage() for r in caplog.records)


def test_explicit_cache_dir_wins(job: Path, tmp_path: Path) -> None:
    data = open_job(job, cache_dir=tmp_path / "mine")
    data.refresh()
    assert (tmp_path / "mine" / "manifest.json").exists()
    assert not (job / ".stepscope").exists()


def test_files_of_the_real_writers_appear_as_they_are_written(tmp_path: Path) -> None:
    from stepscope.store import SystemMetricsWriter, SystemRecord, TimelineWriter

    job = tmp_path / "live"
    output = job / "profiler-output"
    output.mkdir(parents=True)
    data = open_job(job, cache_dir=tmp_path / "cache")
    start_s = 1_700_000_000.0
    system = SystemMetricsWriter(output, node="algo-1")
    system.write(
        SystemRecord("cpu", "cpu0", "CPUUtilization", 10.0 + i, start_s + i) for i in range(5)
    )
    data.refresh()
    assert _count(data, "system") == 5
    # the minute file grows while the job runs: the next refresh re-reads it
    system.write(
        SystemRecord("cpu", "cpu0", "CPUUtilization", 1.0, start_s + 10 + i) for i in range(3)
    )
    assert data.refresh() is True
    assert _count(data, "system") == 8
    system.close()
    read_before: set[str] = set()
    for first_step in (0, 20):
        writer = TimelineWriter(output, "0-algo-1", file_max_size=1500)
        for step in range(first_step, first_step + 20):
            t_us = (start_s + step) * 1e6
            writer.write_event("Step:ModeKeys.TRAIN", "Step:ModeKeys.TRAIN", t_us, 900_000.0, {"step_num": str(step)})  # fmt: skip
        writer.close()
        data.refresh()
        assert data.last_refresh_files  # rotated at 1,500 bytes: several closed files
        assert all(path.endswith("_pythontimeline.json") for path in data.last_refresh_files)
        assert read_before.isdisjoint(data.last_refresh_files)
        read_before.update(data.last_refresh_files)
        steps = data.connect().execute("SELECT step FROM events ORDER BY step").fetchall()
        assert [s for (s,) in steps] == list(range(first_step + 20))


_FULL_DISK_REFRESH = textwrap.dedent(
    """
    import resource, signal, sys
    from stepscope.store import open_job
    # files cannot grow past the limit: writes fail with EFBIG, like ENOSPC on a full disk
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), hard))
    open_job(sys.argv[1]).refresh()
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space is freed
    data = open_job(sys.argv[1])
    data.refresh()
    print(data.connect().execute("SELECT count(*) FROM system").fetchone()[0])
    """
)


@pytest.mark.parametrize(
    "limit",
    [
        pytest.param(4_000, id="the-manifest-fits-but-no-segment"),
        pytest.param(0, id="nothing-fits"),
    ],
)
def test_a_full_disk_while_converting_loses_no_rows_once_space_is_freed(
    job: Path, limit: int
) -> None:
    for marker in job.rglob("training_job_end.ts"):
        marker.unlink()  # still running: each raw file gets a segment of its own
    done = subprocess.run(
        [sys.executable, "-c", _FULL_DISK_REFRESH, str(job), str(limit)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == _system_lines(job)
    assert "No space left" in done.stderr or "too large" in done.stderr.lower()


def test_a_manifest_that_cannot_be_saved_is_logged_once_and_the_rows_are_served(
    job: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (job / ".stepscope/cache/manifest.json").mkdir(parents=True)  # no file can replace it
    data = open_job(job)
    with caplog.at_level(logging.WARNING, logger="stepscope.store"):
        assert data.refresh() is True
        assert data.refresh() is False  # what was converted is not converted again
        assert data.last_refresh_files == []
    assert _count(data, "system") == _system_lines(job)
    unsaved = [r for r in caplog.records if "Cannot save the cache manifest" in r.getMessage()]
    assert len(unsaved) == 1


def test_a_cache_folder_removed_while_the_job_is_open_is_rebuilt_at_the_next_refresh(
    job: Path,
) -> None:
    data = open_job(job)
    data.refresh()
    shutil.rmtree(job / ".stepscope")  # someone clears the cache while the UI or the rules run
    data.refresh()  # the same rows again: not new ones
    assert _count(data, "system") == _system_lines(job)
    assert (job / ".stepscope/cache/manifest.json").is_file()


def test_a_job_folder_removed_while_it_is_open_is_named_and_not_made_again(job: Path) -> None:
    data = open_job(job)
    data.refresh()
    shutil.rmtree(job)
    with pytest.raises(JobNotFoundError, match="removed"):
        data.refresh()
    assert not job.exists()


_HOLD_THE_LOCK = """
import sys, time
from pathlib import Path
from stepscope.store.cache import ColumnarCache

with ColumnarCache(Path(sys.argv[1])).locked():
    print("locked", flush=True)
    time.sleep(120)  # hung while it refreshes
"""


def test_a_cache_locked_by_a_hung_process_names_it_and_one_killed_no_longer_blocks(
    tmp_path: Path,
) -> None:
    from stepscope.store.cache import ColumnarCache

    root = tmp_path / "cache"
    with subprocess.Popen(
        [sys.executable, "-c", _HOLD_THE_LOCK, str(root)], stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
            cache = ColumnarCache(root, lock_timeout_s=1.0)
            with pytest.raises(StoreError) as raised:
                with cache.locked():
                    pytest.fail("the lock of a running holder was taken")
            assert f"pid {holder.pid} on " in str(raised.value)
            assert str(root) in str(raised.value)
            holder.kill()  # kill -9 while it holds the lock
            holder.wait(timeout=30)
            with cache.locked():
                pass
        finally:
            holder.kill()


def test_a_lock_file_that_is_a_link_is_refused_not_written_through(tmp_path: Path) -> None:
    # a link planted in a shared job's cache must not make a refresh overwrite the file it names
    from stepscope.store.cache import ColumnarCache

    root = tmp_path / "cache"
    root.mkdir()
    victim = tmp_path / "someone-elses-file"
    victim.write_text("keep me")
    (root / "lock").symlink_to(victim)
    with pytest.raises(StoreError, match="symbolic link"):
        with ColumnarCache(root).locked():
            pytest.fail("the lock was taken through the link")
    assert victim.read_text() == "keep me"


@pytest.mark.parametrize("link", ["system", "events", "spill", "manifest.json"])
def test_a_confined_job_never_writes_its_cache_through_a_link_planted_in_it(
    job: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    link: str,
) -> None:
    # the job's owner links a part of a real cache folder elsewhere: the cache moves instead
    cache = job / ".stepscope" / "cache"
    cache.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (cache / link).symlink_to(outside / link, target_is_directory=link != "manifest.json")
    if link != "manifest.json":
        (outside / link).mkdir()
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "user-cache"))
    with caplog.at_level(logging.WARNING, logger="stepscope"):
        data = open_job(job, confined=True)
        assert data.refresh() is True
    assert _count(data, "system") == _system_lines(job)
    assert data.cache_dir.is_relative_to(tmp_path / "user-cache")
    assert [p for p in outside.rglob("*") if not p.is_dir()] == []
    said = [r.getMessage() for r in caplog.records if str(cache / link) in r.getMessage()]
    assert len(said) == 1 and "symbolic link" in said[0], said


def test_a_link_planted_in_a_confined_jobs_cache_after_it_was_opened_is_not_written_through(
    job: Path, tmp_path: Path
) -> None:
    data = open_job(job, confined=True)
    assert data.refresh() is True
    assert data.cache_dir == job / ".stepscope" / "cache"
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(data.cache_dir / "events")
    (data.cache_dir / "events").symlink_to(outside, target_is_directory=True)
    for events in (job / "profiler-output" / "framework").rglob("*.json"):
        os.utime(events)  # changed: converted again at the next refresh
    with pytest.raises(StoreError, match="symbolic link") as raised:
        data.refresh()
    assert str(data.cache_dir / "events") in str(raised.value)
    assert list(outside.iterdir()) == []


def test_a_job_removed_after_it_was_read_is_not_made_again_by_a_read(
    job: Path, tmp_path: Path
) -> None:
    data = open_job(job)
    assert _count(data, "system") == _system_lines(job)
    job.rename(tmp_path / "moved-away")  # the user deletes the job while a reader holds it
    with pytest.raises(JobNotFoundError, match="removed"):
        data.connect()
    assert not job.exists()
