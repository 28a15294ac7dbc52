"""Small files replaced atomically: the UI, the rules and the training processes read them."""

from __future__ import annotations

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
