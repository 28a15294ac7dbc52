"""Job, step, utilization and device statistics, from frames and straight from the store."""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import pandas as pd
import pytest
from tests.analysis import _handbuilt as hb

from stepscope.analysis.pandas_frame import PandasFrame
from stepscope.analysis.statistics import (
    PandasFrameAnalysis,
    Resource,
    StatsBy,
    device_usage_statistics,
    job_statistics,
    step_statistics,
    training_phase_intervals,
    utilization_statistics,
)
from stepscope.errors import ConfigError
from stepscope.store import open_job
from stepscope.testing import generate_job

S = hb.S


@pytest.fixture
def analysis() -> PandasFrameAnalysis:
    pf = PandasFrame(hb.connect())
    return PandasFrameAnalysis(pf.get_all_system_metrics(), pf.get_all_framework_metrics())


def test_job_statistics(analysis: PandasFrameAnalysis) -> None:
    stats = analysis.get_job_statistics()
    # System samples 0..9 s; TRAIN step 0 starts at 1 s; the last framework event (a worker)
    # ends at 8 s.
    assert stats["job_duration"] == 9 * S
    assert stats.initialization == 1 * S
    assert stats["training_loop_duration"] == 7 * S
    assert stats["finalization"] == 1 * S
    assert stats["initialization_%"] == pytest.approx(100 / 9)
    assert stats["training_loop_%"] == pytest.approx(700 / 9)
    assert stats["training_loop_start_epoch_us"] == hb.T0 + S
    assert stats["start_time"] < stats["training_loop_start"] < stats["end_time"]


def test_the_job_statistics_of_a_window_add_up_to_its_span() -> None:
    # The frames of a window hold events that began before its one system sample (3 s) and end
    # after it: the job ran from that sample only, so initialization was -1 s and finalization
    # -5 s, and the shares were missing values (a job of no duration).
    pf = PandasFrame(hb.connect())
    system, framework = pf.get_profiler_data_by_time(hb.T0 + 2.5 * S, hb.T0 + 3.2 * S)
    stats = PandasFrameAnalysis(system, framework).get_job_statistics()
    assert stats["start_time_epoch_us"] == hb.T0 + 0.5 * S  # the workers' start
    assert stats["job_duration"] == 7.5 * S
    assert stats.initialization == 1.5 * S  # to TRAIN step 1, the window's first step
    assert stats["training_loop_duration"] == 6 * S
    assert stats.finalization == 0
    parts = ("initialization_%", "training_loop_%", "finalization_%")
    assert sum(stats[p] for p in parts) == pytest.approx(100)


def test_events_outside_every_step_keep_minus_one_and_inner_ones_get_their_step(
    analysis: PandasFrameAnalysis,
) -> None:
    fw = analysis.framework_metrics_df
    assert (fw.loc[fw.framework_metric == "worker_loop", "step"] == -1).all()
    assert (fw.loc[fw.process == "DataLoaderIterInitialize", "step"] == -1).all()
    assert fw.loc[fw.framework_metric == "Net", "step"].tolist() == [0, 1, 2]
    # GetNext calls start exactly at a step's start: not strictly inside it.
    assert (fw.loc[fw.process == "DataLoaderIter", "step"] == -1).all()
    assert "duration_us" in fw.columns


def test_step_statistics_by_training_phase(analysis: PandasFrameAnalysis) -> None:
    stats = analysis.get_step_statistics().set_index("training_phase")
    train = stats.loc["Step:ModeKeys.TRAIN"]
    assert train["duration_mean_us"] == pytest.approx((1 + 1.5 + 1) / 3 * S)
    assert (train["duration_min_us"], train["duration_max_us"]) == (1 * S, 1.5 * S)
    assert train["duration_p50_us"] == 1 * S
    eval_ = stats.loc["Step:ModeKeys.EVAL"]
    assert eval_["duration_mean_us"] == 0.75 * S


def test_step_statistics_by_process_use_back_filled_steps(analysis: PandasFrameAnalysis) -> None:
    stats = analysis.get_step_statistics(StatsBy.PROCESS).set_index("process")
    assert stats.loc["Forward", "duration_mean_us"] == 0.5 * S
    # Data-loader events outside every step are not a step.
    assert "DataLoaderWorker" not in stats.index
    by_name = analysis.get_step_statistics(StatsBy.FRAMEWORK_METRICS)
    assert "Net" in set(by_name["framework_metric"])


def test_step_statistics_by_name_or_phase_keep_each_modes_steps_apart() -> None:
    # TRAIN and EVAL both number their steps from 0: a forward of TRAIN step 0 and one of EVAL
    # step 0 (carrying its step, or back-filled from the step holding it) are two steps, whose
    # spans are 0.5 s and 0.25 s, not one span from TRAIN's step 0 to EVAL's (5.25 s)
    rows = hb.event_rows()
    for lo, step in ((1.1, 0), (6.1, 0), (6.6, -1)):
        rows.append(hb.event("pythontimeline", "Forward", "Model", lo, 0.25, step))
    rows.append(hb.event("pythontimeline", "Forward", "Model", 1.35, 0.25, 0))
    con = hb.connect(events=hb.events_table(rows))
    pf = PandasFrame(con)
    analysis = PandasFrameAnalysis(pf.get_all_system_metrics(), pf.get_all_framework_metrics())
    for stats in (
        analysis.get_step_statistics(StatsBy.FRAMEWORK_METRICS).set_index("framework_metric"),
        step_statistics(con, StatsBy.FRAMEWORK_METRICS).set_index("framework_metric"),
    ):
        model = stats.loc["Model"]
        assert model["duration_max_us"] == 0.5 * S
        assert model["duration_min_us"] == 0.25 * S
        assert model["duration_mean_us"] == pytest.approx((0.5 + 0.25 + 0.25) / 3 * S)
    for stats in (
        analysis.get_step_statistics(StatsBy.PROCESS).set_index("process"),
        step_statistics(con, StatsBy.PROCESS).set_index("process"),
    ):
        assert stats.loc["Forward", "duration_max_us"] == 0.5 * S


def test_utilization_is_per_resource_and_dimension(analysis: PandasFrameAnalysis) -> None:
    stats = analysis.get_utilization_stats()
    cpu = stats[stats.Resource == "cpu"].set_index("dimension")
    assert cpu.loc["CPUUtilization", "utilization_mean"] == 45.0
    assert cpu.loc["CPUUtilization", "utilization_max"] == 90.0
    assert cpu.loc["CPUUtilization", "utilization_p50"] == 45.0
    assert cpu.loc["I/OWaitPercentage", "utilization_mean"] == 1.0
    assert set(stats.Resource) == {"cpu", "gpu", "memory"}
    gpu_only = analysis.get_utilization_stats(resource=Resource.GPU)
    assert gpu_only[["Resource", "dimension", "utilization_mean"]].values.tolist() == [
        ["gpu", "GPUUtilization", 50.0]
    ]


def test_io_metrics_sharing_an_empty_dimension_are_told_apart_by_name(tmp_path: Path) -> None:
    # IOPS (ops/s) and read and write throughput (B/s) all have dimension "": one `i/o` row
    # averaged them together, a mean of millions with a minimum that was an IOPS sample
    job = generate_job(tmp_path / "job", minutes=2, gpus=1, cpus=2)
    raw = open_job(job).table("system").to_pandas()
    io = raw[raw.type == "i/o"].groupby("name")["value"]
    pf = PandasFrame(job)
    for stats in (
        utilization_statistics(job, resource=Resource.IO),
        PandasFrameAnalysis(
            pf.get_all_system_metrics(), pf.get_all_framework_metrics()
        ).get_utilization_stats(resource=Resource.IO),
    ):
        by_metric = stats.set_index("dimension")
        assert sorted(by_metric.index) == [
            "IOPS",
            "ReadThroughputInBytesPerSecond",
            "WriteThroughputInBytesPerSecond",
        ]
        assert by_metric["utilization_min"].to_dict() == io.min().to_dict()
        assert by_metric["utilization_max"].to_dict() == io.max().to_dict()


def test_utilization_by_training_phase(analysis: PandasFrameAnalysis) -> None:
    stats = analysis.get_utilization_stats(resource=Resource.CPU, by=StatsBy.TRAINING_PHASE)
    cpu = stats[stats.dimension == "CPUUtilization"].set_index("Training_phase")
    assert cpu["utilization_mean"].to_dict() == {
        "Before Step:ModeKeys.TRAIN": 0.0,  # sample at 0 s
        "Step:ModeKeys.TRAIN": 25.0,  # 1..4 s
        "Between Step:ModeKeys.EVAL and Step:ModeKeys.TRAIN": 50.0,  # 5 s
        "Step:ModeKeys.EVAL": 65.0,  # 6, 7 s
        "After Step:ModeKeys.EVAL": 85.0,  # 8, 9 s
    }


def test_training_phase_intervals(analysis: PandasFrameAnalysis) -> None:
    intervals = analysis.get_training_phase_intervals()
    assert intervals["phase"].tolist() == [
        "Before Step:ModeKeys.TRAIN",
        "Step:ModeKeys.TRAIN",
        "Between Step:ModeKeys.EVAL and Step:ModeKeys.TRAIN",
        "Step:ModeKeys.EVAL",
        "After Step:ModeKeys.EVAL",
    ]
    assert intervals["start_time_epoch_us"].tolist() == [
        hb.T0,
        hb.T0 + S,
        hb.T0 + 4.5 * S + 1,
        hb.T0 + 6 * S,
        hb.T0 + 7.5 * S + 1,
    ]
    assert intervals["start_time_us"].iloc[1] == 6 * S  # relative, as the frames
    only_eval = analysis.get_training_phase_intervals("Step:ModeKeys.EVAL")
    assert only_eval["phase"].tolist() == [
        "Before Step:ModeKeys.EVAL",
        "Step:ModeKeys.EVAL",
        "After Step:ModeKeys.EVAL",
    ]


def test_intervals_of_one_phase_stop_where_another_phase_runs() -> None:
    # TRAIN steps at 1..4.5 s, EVAL steps at 6..7.5 s, a second TRAIN epoch at 8..8.5 s: asked
    # for TRAIN alone, the intervals were one TRAIN run from 1 to 8.5 s, and the samples taken
    # during EVAL (at 6 and 7 s) counted as TRAIN
    rows = hb.event_rows()
    rows.append(
        hb.event("pythontimeline", "Step:ModeKeys.TRAIN", "Step:ModeKeys.TRAIN", 8.0, 0.5, 3)
    )
    con = hb.connect(events=hb.events_table(rows))
    train = "Step:ModeKeys.TRAIN"
    intervals = training_phase_intervals(con, train)
    assert intervals["phase"].tolist() == [
        f"Before {train}",
        train,
        f"Between {train} and {train}",
        train,
        f"After {train}",
    ]
    assert intervals["start_time_epoch_us"].tolist() == [
        hb.T0,
        hb.T0 + S,
        hb.T0 + 4.5 * S + 1,
        hb.T0 + 8 * S,
        hb.T0 + 8.5 * S + 1,
    ]
    stats = utilization_statistics(con, Resource.CPU, by=StatsBy.TRAINING_PHASE, phase=train)
    cpu = stats[stats.dimension == "CPUUtilization"]
    # CPUUtilization is 10 * k at k s: TRAIN holds the samples at 1..4 s and 8 s
    assert cpu.loc[cpu.Training_phase == train, "utilization_mean"].tolist() == [25.0, 80.0]


def test_device_usage_counts_samples_per_range(analysis: PandasFrameAnalysis) -> None:
    usage = analysis.get_device_usage_stats().set_index("dimension")
    # CPUUtilization 0, 10 .. 90: 90 -> (90, 100); 10..80 -> (10, 90); 0 -> (0, 10).
    assert usage.loc["CPUUtilization", ["90-100", "10-90", "0-10"]].tolist() == [1, 8, 1]
    assert usage.loc["I/OWaitPercentage", ["90-100", "10-90", "0-10"]].tolist() == [0, 0, 10]
    assert usage.loc["GPUUtilization", "10-90"] == 10
    custom = analysis.get_device_usage_stats(Resource.GPU, utilization_ranges=[(0, 49), (50, 50)])
    assert custom[["0-49", "50-50"]].values.tolist() == [[0, 10]]


def test_wrong_arguments_are_config_errors(analysis: PandasFrameAnalysis) -> None:
    # a string was taken letter by letter ("got 'c'"), and a device was called the resource
    with pytest.raises(ConfigError, match=r"^resource must be .*, got 'cpu'\.$"):
        analysis.get_utilization_stats(resource="cpu")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^device must be .*, got 'gpu'\.$"):
        analysis.get_device_usage_stats(device="gpu")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="by"):
        analysis.get_utilization_stats(by=StatsBy.PROCESS)
    with pytest.raises(ConfigError, match="by"):
        analysis.get_step_statistics(by="training_phase")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="utilization_ranges"):
        analysis.get_device_usage_stats(utilization_ranges=[(1, 2, 3)])  # type: ignore[list-item]


@pytest.mark.parametrize(
    "ranges", [[(10, 5)], [(0, 200)], [(-10, 10)], [("0", "10")], [(0, float("nan"))], []]
)
def test_utilization_ranges_outside_0_to_100_or_inverted_are_config_errors(
    analysis: PandasFrameAnalysis, ranges: list
) -> None:
    allowed = r"utilization_ranges must be .* with 0 <= low <= high <= 100"
    with pytest.raises(ConfigError, match=allowed):
        analysis.get_device_usage_stats(utilization_ranges=ranges)
    with pytest.raises(ConfigError, match=allowed):
        device_usage_statistics(hb.connect(), utilization_ranges=ranges)


def test_frames_without_the_needed_columns_are_a_config_error() -> None:
    pf = PandasFrame(hb.connect())
    with pytest.raises(ConfigError, match="framework_df.*start_time_us"):
        PandasFrameAnalysis(pf.get_all_system_metrics(), pd.DataFrame({"x": [1]}))
    empty = PandasFrame(hb.connect(hb.system_table().slice(0, 0), hb.events_table([])))
    analysis = PandasFrameAnalysis(
        empty.get_all_system_metrics(), empty.get_all_framework_metrics()
    )
    assert analysis.get_step_statistics().empty
    assert analysis.get_utilization_stats().empty


def test_job_level_functions_equal_the_frame_analysis(analysis: PandasFrameAnalysis) -> None:
    con = hb.connect()
    assert job_statistics(con) == analysis.get_job_statistics()
    for by in StatsBy:
        pd.testing.assert_frame_equal(step_statistics(con, by), analysis.get_step_statistics(by))
    pd.testing.assert_frame_equal(
        utilization_statistics(con, by=StatsBy.TRAINING_PHASE),
        analysis.get_utilization_stats(by=StatsBy.TRAINING_PHASE),
    )
    pd.testing.assert_frame_equal(device_usage_statistics(con), analysis.get_device_usage_stats())
    pd.testing.assert_frame_equal(
        training_phase_intervals(con), analysis.get_training_phase_intervals()
    )


def test_without_step_events_the_loop_statistics_are_missing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rows = [r for r in hb.event_rows() if not r["category"].startswith("Step:")]
    con = hb.connect(events=hb.events_table(rows))
    with caplog.at_level(logging.WARNING, logger="stepscope.analysis.statistics"):
        stats = job_statistics(con)
    assert stats["job_duration"] == 9 * S
    assert stats["training_loop_duration"] != stats["training_loop_duration"]  # NaN
    assert "No Step:ModeKeys.TRAIN" in caplog.text
    assert step_statistics(con).empty
    assert training_phase_intervals(con).empty


def test_recorded_merge_traces_step_statistics(shared_fixtures: Path, tmp_path: Path) -> None:
    root = shared_fixtures / "smdebug" / "merge_traces"
    (timeline,) = root.rglob("*_pythontimeline.json")
    events = json.loads(timeline.read_text())
    durations: dict[str, list[float]] = {"Step:ModeKeys.TRAIN": [], "Step:ModeKeys.EVAL": []}
    for event in events:
        if event.get("ph") == "X":
            durations[event["name"]].append(event["dur"])
    stats = step_statistics(open_job(root, cache_dir=tmp_path / "cache")).set_index(
        "training_phase"
    )
    for phase, values in durations.items():
        assert stats.loc[phase, "duration_mean_us"] == pytest.approx(sum(values) / len(values))
        assert stats.loc[phase, "duration_max_us"] == max(values)
        assert stats.loc[phase, "duration_min_us"] == min(values)


def test_recorded_kineto_job_start_reads_as_its_first_event(
    shared_fixtures: Path, tmp_path: Path
) -> None:
    job = open_job(shared_fixtures / "kineto" / "a100_rank0of2_nccl.json.gz", cache_dir=tmp_path)
    pf = PandasFrame(job)
    framework = pf.get_all_framework_metrics()
    first = framework.loc[framework["start_time_epoch_us"].idxmin()]
    assert first["start_time_epoch_us"] % 1  # a fractional µs, which must round the same way
    analysis = PandasFrameAnalysis(pf.get_all_system_metrics(), framework)
    assert analysis.get_job_statistics()["start_time"] == first["start_time"]
    assert job_statistics(job)["start_time"] == first["start_time"]


def _two_rank_connection() -> object:
    """Rank 0 on algo-1 and rank 1 on algo-2, each with TRAIN steps 0, 1, 2 of 1 s; rank 1 starts
    0.5 s later and runs a Forward (no step) inside its own step 0."""
    rows = []
    for rank, node, offset in ((0, "algo-1", 1.0), (1, "algo-2", 1.5)):
        for step in range(3):
            row = hb.event(
                "pythontimeline",
                "Step:ModeKeys.TRAIN",
                "Step:ModeKeys.TRAIN",
                offset + step,
                1.0,
                step,
            )
            rows.append({**row, "node": node, "rank": rank})
    forward = hb.event("pythontimeline", "Forward", "Net", 2.1, 0.3)
    rows.append({**forward, "node": "algo-2", "rank": 1})
    return hb.connect(events=hb.events_table(rows))


def test_steps_of_several_ranks_are_timed_and_back_filled_per_rank() -> None:
    con = _two_rank_connection()
    pf = PandasFrame(con)
    analysis = PandasFrameAnalysis(pf.get_all_system_metrics(), pf.get_all_framework_metrics())
    for stats in (analysis.get_step_statistics(), step_statistics(con)):
        train = stats.set_index("training_phase").loc["Step:ModeKeys.TRAIN"]
        # Every step of every rank lasts 1 s; the ranks being 0.5 s apart changes nothing.
        assert train["duration_max_us"] == 1 * S
        assert train["duration_mean_us"] == 1 * S
    fw = analysis.framework_metrics_df
    # Rank 1's Forward at 2.1 s lies in rank 1's step 0 [1.5, 2.5], not rank 0's step 1.
    assert fw.loc[fw.framework_metric == "Net", "step"].tolist() == [0]


def test_a_bare_profiler_trace_has_its_profiler_steps_as_train_steps(
    shared_fixtures: Path,
) -> None:
    # the trace has ProfilerStep#101-105 and no Step:ModeKeys events; the rules and the export
    # count those ranges as steps, while step_statistics was empty and job_statistics had no
    # training loop
    trace = shared_fixtures / "kineto" / "v100_single_ns_resolution.pt.trace.json.gz"
    raw = json.loads(gzip.decompress(trace.read_bytes()))
    durations = [
        event["dur"]
        for event in raw["traceEvents"]
        if event.get("ph") == "X"
        and str(event.get("name", "")).startswith("ProfilerStep#")
        and event.get("cat") != "gpu_user_annotation"
    ]
    first_start = min(
        event["ts"]
        for event in raw["traceEvents"]
        if event.get("ph") == "X" and str(event.get("name", "")).startswith("ProfilerStep#")
    )
    assert len(durations) == 5
    stats = step_statistics(trace).set_index("training_phase")
    assert list(stats.index) == ["Step:ModeKeys.TRAIN"]
    row = stats.loc["Step:ModeKeys.TRAIN"]
    assert row["duration_min_us"] == pytest.approx(min(durations), abs=1)
    assert row["duration_max_us"] == pytest.approx(max(durations), abs=1)
    assert row["duration_mean_us"] == pytest.approx(sum(durations) / 5, abs=1)
    frame = PandasFrame(trace)
    analysis = PandasFrameAnalysis(
        frame.get_all_system_metrics(), frame.get_all_framework_metrics()
    )
    pd.testing.assert_frame_equal(analysis.get_step_statistics().set_index("training_phase"), stats)
    loop = job_statistics(trace)
    start_us = loop["training_loop_start_epoch_us"]
    assert start_us - loop["start_time_epoch_us"] == pytest.approx(
        first_start - min(e["ts"] for e in raw["traceEvents"] if e.get("ph") == "X"), abs=1
    )


def test_phase_intervals_of_a_trace_count_from_its_first_minute_as_pandas_frame_does(
    shared_fixtures: Path,
) -> None:
    # without system metrics, training_phase_intervals gave epoch µs in its relative columns
    # ("start_time_us" 1712195495502094) where PandasFrame counts from the first event's minute
    trace = shared_fixtures / "kineto" / "v100_single_ns_resolution.pt.trace.json.gz"
    frame = PandasFrame(trace)
    analysis = PandasFrameAnalysis(
        frame.get_all_system_metrics(), frame.get_all_framework_metrics()
    )
    expected = analysis.get_training_phase_intervals()
    got = training_phase_intervals(trace)
    assert len(got) == 1
    pd.testing.assert_frame_equal(got, expected)
    assert 0 <= got["start_time_us"].iloc[0] < 60e6
