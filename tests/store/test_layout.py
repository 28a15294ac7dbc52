"""The job layout: every path as SageMaker Debugger's readers expect it, and names parsed back."""

from __future__ import annotations

import calendar
import re
from pathlib import Path

import pytest

from stepscope.store import layout
from stepscope.store.layout import StatsBoundary

# 2020-06-10 00:15:09 UTC, a moment of a recorded SageMaker system file.
T_S = 1591748109.2321954


def test_hour_folder_is_utc_of_the_timestamp() -> None:
    assert layout.hour_folder(calendar.timegm((2026, 1, 2, 3, 59, 59))) == "2026010203"
    assert layout.hour_folder(calendar.timegm((2026, 1, 2, 4, 0, 0))) == "2026010204"


def test_system_file_path_is_minute_file_in_hour_folder(tmp_path: Path) -> None:
    path = layout.system_file_path(tmp_path, "algo-2", T_S)
    assert path == tmp_path / "system/incremental/2020061000/1591748100.algo-2.json"
    # the regex SageMaker's system reader applies to full paths
    assert re.match(r".+/system/.+/(\d{10}).algo-\d+.json", str(path))
    assert layout.parse_system_file_name(path.name) == (1591748100, "algo-2")


def test_recorded_sagemaker_file_names_parse(shared_fixtures: Path) -> None:
    smdebug = shared_fixtures / "smdebug"
    system = sorted((smdebug / "test_traces/system/incremental").glob("*.json"))
    assert system and all(layout.parse_system_file_name(p.name) for p in system)
    framework = sorted(smdebug.glob("*/framework/pevents/*/*.json"))
    assert framework
    for path in framework:
        parsed = layout.parse_framework_file_name(path.name)
        assert parsed is not None, path.name
        assert layout.HOUR_FOLDER_RE.match(path.parent.name)
    old = layout.parse_framework_file_name("1589930991000000_4487_0000_pythontimeline.json")
    assert old == (1589930991000000, "4487_0000", "pythontimeline.json")


@pytest.mark.parametrize(
    "name", ["1591748100.algo-1.json.corrupt", "159174810.algo-1.json", "1591748100.host-1.json"]
)
def test_non_system_file_names_are_rejected(name: str) -> None:
    assert layout.parse_system_file_name(name) is None


def test_pevents_path_uses_hour_of_end_time(tmp_path: Path) -> None:
    end_us = calendar.timegm((2026, 3, 4, 5, 0, 0)) * 1_000_000 + 17
    path = layout.pevents_file_path(tmp_path, end_us, "0-algo-1", "model_timeline.json")
    assert path == tmp_path / f"framework/pevents/2026030405/{end_us}_0-algo-1_model_timeline.json"
    assert layout.parse_framework_file_name(path.name) == (
        end_us,
        "0-algo-1",
        "model_timeline.json",
    )


def test_tmp_file_is_never_read_as_a_closed_file(tmp_path: Path) -> None:
    tmp = layout.timeline_tmp_path(tmp_path, "3-algo-1", "pythontimeline.json", 4242)
    assert tmp == tmp_path / "framework/3-algo-1_pythontimeline.json.4242.tmp"
    assert layout.parse_framework_file_name(tmp.name) is None
    match = layout.FRAMEWORK_TMP_RE.match(tmp.name)
    assert match and match["node_id"] == "3-algo-1" and match["pid"] == "4242"
    assert layout.FRAMEWORK_TMP_RE.match("0-algo-1_pythontimeline.json.tmp")  # SageMaker's name


def test_node_ids() -> None:
    assert layout.node_name(0) == "algo-1"
    assert layout.node_id_for(0, 0) == "0-algo-1"
    assert layout.node_id_for(7, 1) == "7-algo-2"
    assert layout.node_id_for(3, "algo-4") == "3-algo-4"
    assert layout.parse_node_id("12-algo-3") == (12, "algo-3")
    assert layout.parse_node_id("905-b88ab1bb8259") is None


def test_python_stats_folder_round_trip_and_recorded_names(
    shared_fixtures: Path, tmp_path: Path
) -> None:
    start = StatsBoundary("prestepzero", None, "start", 1596585363775342.0)
    end = StatsBoundary("train", 1, "stepstart", 1596585373504789.0)
    name = layout.python_stats_folder_name(start, end)
    assert name == "prestepzero-*-start-1596585363775342.0_train-1-stepstart-1596585373504789.0"
    assert layout.parse_python_stats_folder(name) == (start, end)
    folder = layout.python_stats_dir(tmp_path, "cprofile", "0-algo-1", start, end)
    assert folder == tmp_path / "framework/pytorch/cprofile/0-algo-1" / name
    recorded = shared_fixtures / "smdebug/cprofile_layout/framework/tensorflow/cprofile/151-algo-1"
    names = [p.name for p in recorded.iterdir()]
    assert names and all(layout.parse_python_stats_folder(n) for n in names)
    assert layout.parse_python_stats_folder("train-1-badphase-1.0_train-2-stepend-2.0") is None


def test_detailed_profiling_trace_path(tmp_path: Path) -> None:
    start_us = calendar.timegm((2026, 5, 6, 7, 30, 0)) * 1_000_000
    path = layout.detailed_profiling_trace_path(tmp_path, 5, "0-algo-1", start_us, start_us + 900)
    expected = f"framework/pytorch/detailed_profiling/2026050607/000000005/0-algo-1_{start_us}_{start_us + 900}.pt.trace.json.gz"
    assert path == tmp_path / expected
    match = layout.DETAILED_TRACE_RE.match(path.name)
    assert match and match["node_id"] == "0-algo-1" and int(match["end_us"]) == start_us + 900


def test_job_folder_paths(tmp_path: Path) -> None:
    assert layout.job_file_path(tmp_path) == tmp_path / "job.json"
    assert layout.profiler_output_dir(tmp_path) == tmp_path / "profiler-output"
    assert (
        layout.rule_status_path(tmp_path, "CPUBottleneck")
        == tmp_path / "rule-output/CPUBottleneck/status.json"
    )
    assert (
        layout.rule_report_path(tmp_path, "StepOutlier")
        == tmp_path / "rule-output/profiler-reports/StepOutlier.json"
    )
    assert layout.report_html_path(tmp_path) == tmp_path / "rule-output/profiler-report.html"
    assert layout.cache_dir(tmp_path) == tmp_path / ".stepscope/cache"
    assert layout.rank_file_path(tmp_path, "1-algo-1") == tmp_path / "framework/ranks/1-algo-1.json"


@pytest.mark.parametrize("where", ["", "system", "framework"])
def test_job_end_is_seen_wherever_sagemaker_or_we_put_the_marker(
    tmp_path: Path, where: str
) -> None:
    assert not layout.job_has_ended(tmp_path)
    (tmp_path / where).mkdir(exist_ok=True)
    (tmp_path / where / "training_job_end.ts").touch()
    assert layout.job_has_ended(tmp_path)
