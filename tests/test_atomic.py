"""Small files replaced atomically: the UI, the rules and the training processes read them."""

from __future__ import annotations

import errno
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stepscope._atomic import write_atomic


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "status.json"
    write_atomic(target, '{"old": true}')
    with pytest.raises(UnicodeEncodeError):
        write_atomic(target, "a lone surrogate \ud800 cannot be written as UTF-8")
    assert target.read_text() == '{"old": true}'
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]


def test_an_exclusive_write_creates_the_file_once_and_never_replaces_it(tmp_path: Path) -> None:
    # two launchers given one job folder at once both wrote job.json, each taking the job
    target = tmp_path / "job.json"
    write_atomic(target, '{"node": "algo-1"}', exclusive=True)
    with pytest.raises(FileExistsError):
        write_atomic(target, '{"node": "algo-2"}', exclusive=True)
    assert target.read_text() == '{"node": "algo-1"}'
    assert target.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["job.json"]


def test_a_new_file_is_readable_by_others_in_a_new_folder(tmp_path: Path) -> None:
    target = tmp_path / "rule-output" / "profiler-reports" / "StepOutlier.json"
    write_atomic(target, b"{}")
    assert target.read_bytes() == b"{}"
    assert target.stat().st_mode & 0o777 == 0o644


def test_a_folder_in_the_way_is_named_not_the_temporary_file(tmp_path: Path) -> None:
    # `stepscope report -o <a folder>` prints the error's file name
    folder = tmp_path / "reports"
    folder.mkdir()
    with pytest.raises(IsADirectoryError) as caught:
        write_atomic(folder, "<html></html>")
    assert caught.value.filename == str(folder)
    assert list(folder.iterdir()) == []
    assert [p.name for p in tmp_path.iterdir()] == ["reports"]


@pytest.mark.parametrize("below", ["report.html", "x/ProfilerReport/report.json"])
def test_a_file_where_the_folder_should_be_is_named_as_not_a_folder(
    tmp_path: Path, below: str
) -> None:
    # `stepscope report -o notes.txt/report.html` printed "File exists: notes.txt", which
    # reads as if the report would not replace a file; `stepscope rules --output-dir notes.txt/x`
    # named notes.txt/x/ProfilerReport, where nothing is wrong but the file above it
    (tmp_path / "notes.txt").write_text("notes")
    with pytest.raises(NotADirectoryError) as caught:
        write_atomic(tmp_path / "notes.txt" / below, "<html></html>")
    assert caught.value.filename == str(tmp_path / "notes.txt")
    assert (tmp_path / "notes.txt").read_text() == "notes"


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_folder_that_takes_no_new_file_is_named_with_the_file_not_a_temporary_one() -> None:
    # `stepscope report -o <a folder it may not write>` printed
    # "No such file or directory: /proc/.report.html.gl68ijok.tmp", a file the user never named
    target = Path("/proc") / "report.html"
    with pytest.raises(OSError) as caught:
        write_atomic(target, "<html></html>")
    assert caught.value.filename == str(target)
    assert not target.exists()


_FULL_DISK = textwrap.dedent(
    """
    import resource, signal, sys
    from stepscope._atomic import write_atomic
    # files cannot grow past 1 kB: writes fail with EFBIG, like ENOSPC on a full disk
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1_000, 1_000))
    try:
        write_atomic(sys.argv[1], b"x" * 100_000)
    except OSError as exc:
        print(exc.errno, exc.filename)
    """
)


def test_a_full_disk_names_the_file_that_was_not_written(tmp_path: Path) -> None:
    # `stepscope rules` or `report` on a full disk prints the error's file name
    target = tmp_path / "rule-output" / "StepOutlier" / "status.json"
    done = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(target)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(errno.EFBIG), str(target)]
    assert not target.exists() and list(target.parent.iterdir()) == []
