"""The SageMaker-style analyses over a generated job read through the real store.

Expected figures are counted here straight from the raw files the generator wrote.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from stepscope.analysis import (
    PandasFrame,
    PandasFrameAnalysis,
    PT_dataloader_analysis,
    job_statistics,
    step_statistics,
)
from stepscope.errors import ConfigError
from stepscope.store import open_job
from stepscope.testing import TINY_JOB, generate_job


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_job(tmp_path_factory.mktemp("generated") / "job", **TINY_JOB)


@pytest.fixture(scope="module")
def raw(job: Path) -> dict:
    """Phase counts, TRAIN step spans and system timestamps read from the raw files."""
    phases: Counter[str] = Counter()
    steps: list[tuple[int, float, float]] = []
    for path in (job / "profiler-output" / "framework" / "pevents").rglob("*.json"):
        events = json.loads(path.read_text())
        start = events[0]["args"]["start_time_since_epoch_in_micros"]
        names = {
            e["pid"]: e["args"]["name"]
            for e in events
            if e.get("name") == "process_name" and "name" in e["args"]
        }
        for e in events:
            if e.get("ph") != "X":
                continue
            phases[names[e["pid"]]] += 1
            if names[e["pid"]] == "Step:ModeKeys.TRAIN":
                steps.append((int(e["args"]["step_num"]), start + e["ts"], e["dur"]))
    timestamps = [
        json.loads(line)["Timestamp"]
        for path in (job / "profiler-output" / "system").rglob("*.json")
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    return {"phases": phases, "steps": sorted(steps), "system": (min(timestamps), max(timestamps))}


@pytest.fixture(scope="module")
def pf(job: Path, tmp_path_factory: pytest.TempPathFactory) -> PandasFrame:
    return PandasFrame(open_job(job, cache_dir=tmp_path_factory.mktemp("cache")))


def test_tables_hold_every_record(pf: PandasFrame, raw: dict) -> None:
    fw = pf.get_all_framework_metrics()
    assert Counter(fw["process"]) == raw["phases"]
    first_s, last_s = raw["system"]
    system = pf.get_all_system_metrics()
    assert system["timestamp_epoch_us"].min() == pytest.approx(first_s * 1e6, abs=1)
    assert system["timestamp_epoch_us"].max() == pytest.approx(last_s * 1e6, abs=1)


def test_job_and_step_statistics_match_the_raw_files(pf: PandasFrame, raw: dict) -> None:
    first_s, last_s = raw["system"]
    step0 = next(start for step, start, _ in raw["steps"] if step == 0)
    stats = job_statistics(pf.connection())
    assert stats["job_duration"] == pytest.approx((last_s - first_s) * 1e6, abs=2)
    assert stats["initialization"] == pytest.approx(step0 - first_s * 1e6, abs=2)
    durations = [dur for _, _, dur in raw["steps"]]
    train = step_statistics(pf.connection()).set_index("training_phase").loc["Step:ModeKeys.TRAIN"]
    assert train["duration_max_us"] == pytest.approx(max(durations))
    assert train["duration_mean_us"] == pytest.approx(sum(durations) / len(durations))
    frames = PandasFrameAnalysis(pf.get_all_system_metrics(), pf.get_all_framework_metrics())
    assert frames.get_job_statistics() == stats


def test_every_forward_event_gets_a_step(pf: PandasFrame) -> None:
    frames = PandasFrameAnalysis(pf.get_all_system_metrics(), pf.get_all_framework_metrics())
    fw = frames.framework_metrics_df
    assert (fw.loc[fw.process == "Forward", "step"] >= 0).all()


def test_dataloader_analysis_counts_what_was_written(pf: PandasFrame, raw: dict) -> None:
    assert min(raw["phases"][p] for p in ("DataLoaderIter", "DataLoaderWorker")) > 0
    analysis = PT_dataloader_analysis(pf)
    assert analysis.analyze_dataloader_getnext().count == raw["phases"]["DataLoaderIter"]
    assert analysis.analyze_dataloaderWorkers().count == raw["phases"]["DataLoaderWorker"]
    inits = analysis.analyze_dataloaderIter_initialization()
    assert sum(i.count for i in inits.values()) == raw["phases"]["DataLoaderIterInitialize"]
    batches = analysis.analyze_batchtime()
    assert batches.batches["BatchTime_in_seconds"].notna().sum() == (
        raw["phases"]["DataLoaderIter"] - 1
    )


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ((-1, 3), "start_step must be an integer >= 0, got -1"),
        ((5, 2), "end_step must be an integer >= start_step \\(5\\), got 2"),
        (("a", 2), "start_step must be an integer >= 0, got 'a'"),
    ],
)
def test_a_step_window_that_is_not_one_says_what_is_allowed(
    pf: PandasFrame, steps: tuple, message: str
) -> None:
    # step -1 is how events without a step are stored: a negative start selected all of them
    with pytest.raises(ConfigError, match=message):
        pf.get_profiler_data_by_step(*steps)
    assert (pf.get_profiler_data_by_step(0, 3)[1]["step"] >= 0).all()


def test_a_time_window_takes_text_timestamps_and_checks_its_order(pf: PandasFrame) -> None:
    steps = pf.get_all_framework_metrics(["Step:ModeKeys.TRAIN"])
    first = steps.iloc[0]
    by_text = pf.get_profiler_data_by_time(first["start_time"], first["end_time"])
    by_us = pf.get_profiler_data_by_time(first["start_time_epoch_us"], first["end_time_epoch_us"])
    assert len(by_text[1]) == len(by_us[1]) > 0
    assert by_text[0].equals(by_us[0])
    with pytest.raises(ConfigError, match="end_time_us must be a time at or after start_time_us"):
        pf.get_profiler_data_by_time(first["end_time_epoch_us"], first["start_time_epoch_us"])
    with pytest.raises(ConfigError, match="start_time_us must be µs since the epoch, a datetime"):
        pf.get_profiler_data_by_time("yesterday", first["end_time"])


def test_a_pattern_that_is_not_a_regex_is_named_in_the_error(pf: PandasFrame, tmp_path) -> None:
    analysis = PT_dataloader_analysis(pf)
    start = pf.start_time
    calls = {
        "get_all_dataloader_metrics.selected_framework_metrics": lambda: (
            pf.get_all_dataloader_metrics(["GetNext", "[bad"])
        ),
        "analyze_batchtime.select_events": lambda: analysis.analyze_batchtime(select_events="[bad"),
        "plot_the_window.select_dimensions": lambda: analysis.plot_the_window(
            start, start + 10_000_000, select_dimensions=["[bad"], output=tmp_path / "w.html"
        ),
    }
    for parameter, call in calls.items():
        with pytest.raises(
            ConfigError, match=rf"^{parameter} must be regular expressions .*'\[bad'"
        ):
            call()
    assert not (tmp_path / "w.html").exists()


def test_one_name_given_as_a_string_selects_that_name(pf: PandasFrame) -> None:
    # list("cpu0") would be four one-letter names that match nothing
    system = pf.get_all_system_metrics("cpu0")
    assert len(system) > 0 and set(system["system_metric"]) == {"cpu0"}
    assert system.equals(pf.get_all_system_metrics(["cpu0"]))
    steps = pf.get_all_framework_metrics("Step:ModeKeys.TRAIN")
    assert len(steps) == len(pf.get_all_framework_metrics(["Step:ModeKeys.TRAIN"])) > 0
    _, window = pf.get_profiler_data_by_time(
        steps["start_time_epoch_us"].min(),
        steps["end_time_epoch_us"].max(),
        selected_framework_metrics="Step:ModeKeys.TRAIN",
    )
    assert len(window) == len(steps)
