"""The python-stats folder names of the profiler output, parsed into records."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from stepscope.store.python_stats import (
    PythonProfileModes,
    StepPhase,
    list_python_stats,
    parse_python_stats_folder,
)

TRAIN_FOLDER = "train-5-stepstart-1700000000000000.5_train-5-stepend-1700000000250000.0"
PRE_FOLDER = "prestepzero-*-start-1699999990000000.0_train-0-stepstart-1700000000000000.0"
POST_FOLDER = "eval-3-stepend-1700000100000000.0_posthookclose-*-end-1700000101000000.0"


def _touch(path: Path, data: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_a_step_folder_name_is_parsed_into_modes_steps_phases_and_times() -> None:
    record = parse_python_stats_folder(
        TRAIN_FOLDER, node_id="0-algo-1", profiler="cprofile", framework="pytorch", path="p"
    )
    assert record is not None
    assert record.start_mode is PythonProfileModes.TRAIN
    assert record.end_mode is PythonProfileModes.TRAIN
    assert (record.start_step, record.end_step) == (5, 5)
    assert record.start_phase is StepPhase.STEP_START
    assert record.end_phase is StepPhase.STEP_END
    assert record.start_time_us == 1700000000000000.5
    assert record.end_time_us == 1700000000250000.0


def test_star_steps_of_pre_step_zero_and_post_hook_close_become_minus_one() -> None:
    pre = parse_python_stats_folder(
        PRE_FOLDER, node_id="n", profiler="cprofile", framework="pytorch", path="p"
    )
    post = parse_python_stats_folder(
        POST_FOLDER, node_id="n", profiler="cprofile", framework="pytorch", path="p"
    )
    assert pre is not None and post is not None
    assert (pre.start_mode, pre.start_step, pre.start_phase) == (
        PythonProfileModes.PRE_STEP_ZERO,
        -1,
        StepPhase.START,
    )
    assert (post.end_mode, post.end_step, post.end_phase) == (
        PythonProfileModes.POST_HOOK_CLOSE,
        -1,
        StepPhase.END,
    )


@pytest.mark.parametrize(
    "folder",
    [
        "1596585376012363.8_1596585376017246.5_151-algo-1_3",  # the 2020 naming
        "train-5-stepstart-1_train-5-nophase-2",
        "walk-5-stepstart-1_train-5-stepend-2",
        "train-x-stepstart-1_train-5-stepend-2",
    ],
)
def test_names_outside_the_layout_are_not_records(folder: str) -> None:
    assert (
        parse_python_stats_folder(
            folder, node_id="n", profiler="cprofile", framework="pytorch", path="p"
        )
        is None
    )


@pytest.fixture
def job(tmp_path: Path) -> Path:
    root = tmp_path / "job"
    base = root / "profiler-output" / "framework" / "pytorch"
    _touch(base / "cprofile" / "0-algo-1" / TRAIN_FOLDER / "python_stats")
    _touch(base / "cprofile" / "0-algo-1" / PRE_FOLDER / "python_stats")
    _touch(base / "cprofile" / "1-algo-1" / TRAIN_FOLDER / "python_stats")
    _touch(base / "pyinstrument" / "0-algo-1" / POST_FOLDER / "python_stats.json", b"{}")
    _touch(base / "pyinstrument" / "0-algo-1" / POST_FOLDER / "python_stats.html", b"<html/>")
    _touch(base / "cprofile" / "0-algo-1" / "not-a-profile-folder" / "python_stats")
    # A pyinstrument folder with only its HTML page has nothing to analyse.
    _touch(base / "pyinstrument" / "0-algo-1" / TRAIN_FOLDER / "python_stats.html")
    return root


def test_every_profile_of_a_job_is_listed_sorted_by_node_and_start(
    job: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="stepscope.store.python_stats"):
        records = list_python_stats(job)
    assert [(r.node_id, r.profiler, r.folder) for r in records] == [
        ("0-algo-1", "cprofile", PRE_FOLDER),
        ("0-algo-1", "cprofile", TRAIN_FOLDER),
        ("0-algo-1", "pyinstrument", POST_FOLDER),
        ("1-algo-1", "cprofile", TRAIN_FOLDER),
    ]
    assert all(r.framework == "pytorch" for r in records)
    pyinstrument = records[2]
    assert pyinstrument.path.endswith("python_stats.json")
    assert pyinstrument.html_path.endswith("python_stats.html")
    assert Path(records[0].path).is_file()
    (skipped,) = [r for r in caplog.records if "Skipped 2 python-stats folder(s)" in r.message]
    assert skipped.levelno == logging.WARNING  # seen at the default log level


def test_listing_from_the_profiler_output_or_the_profiler_folder_finds_the_same(job: Path) -> None:
    from_job = list_python_stats(job)
    from_output = list_python_stats(job / "profiler-output")
    from_cprofile = list_python_stats(
        job / "profiler-output" / "framework" / "pytorch" / "cprofile"
    )
    assert from_output == from_job
    assert from_cprofile == [r for r in from_job if r.profiler == "cprofile"]


def test_an_empty_or_missing_folder_has_no_profiles(tmp_path: Path) -> None:
    assert list_python_stats(tmp_path) == []
    assert list_python_stats(tmp_path / "missing") == []


def test_recorded_cprofile_layout_is_read(shared_fixtures: Path) -> None:
    records = list_python_stats(shared_fixtures / "smdebug" / "cprofile_layout")
    assert [(r.start_mode.value, r.start_step, r.end_step) for r in records] == [
        ("prestepzero", -1, 1),
        ("train", 2, 2),
        ("train", 3, 3),
    ]
    assert {(r.node_id, r.framework, r.profiler) for r in records} == {
        ("151-algo-1", "tensorflow", "cprofile")
    }
    assert records[2].start_time_us == 1596585376012363.8
