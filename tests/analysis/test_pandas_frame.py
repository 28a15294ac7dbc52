"""PandasFrame: SageMaker's DataFrame columns over a hand-built job and a recorded one."""

from __future__ import annotations

import datetime as dt
import enum
import json
import logging
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from tests.analysis import _handbuilt as hb

from stepscope.analysis.pandas_frame import PandasFrame
from stepscope.errors import ConfigError
from stepscope.store import open_job
from stepscope.store.cache import ColumnarCache
from stepscope.testing import TINY_JOB, generate_job

S = hb.S


def _text(us: int) -> str:
    moment = dt.datetime.fromtimestamp(us // S, dt.timezone.utc).replace(microsecond=us % S)
    return moment.strftime("%Y-%m-%dT%H:%M:%S:%f")


@pytest.fixture
def pf() -> PandasFrame:
    return PandasFrame(hb.connect())


def test_relative_times_count_from_the_minute_of_the_first_system_sample(pf: PandasFrame) -> None:
    assert pf.start_time == hb.MINUTE0


def test_system_metrics_have_sagemaker_columns_and_absolute_times(pf: PandasFrame) -> None:
    system = pf.get_all_system_metrics()
    assert list(system.columns) == [
        "timestamp",
        "timestamp_us",
        "value",
        "system_metric",
        "dimension",
        "nodeID",
        "type",
        "timestamp_epoch_us",
    ]
    assert len(system) == 40
    first = system.iloc[0]
    assert first["timestamp"] == _text(hb.T0)
    assert first["timestamp_us"] == 5 * S
    assert first["timestamp_epoch_us"] == hb.T0
    assert system["timestamp_us"].max() == 14 * S
    cpu = system[(system.system_metric == "cpu0") & (system.dimension == "CPUUtilization")]
    assert cpu["value"].tolist() == [10.0 * k for k in range(10)]


def test_system_metrics_filter_by_name(pf: PandasFrame) -> None:
    gpu = pf.get_all_system_metrics(selected_system_metrics=["gpu0"])
    assert set(gpu["system_metric"]) == {"gpu0"} and len(gpu) == 10


def test_framework_metrics_have_sagemaker_columns(pf: PandasFrame) -> None:
    fw = pf.get_all_framework_metrics()
    assert len(fw) == len(hb.event_rows())
    for column in [
        "start_time",
        "end_time",
        "start_time_us",
        "end_time_us",
        "tid",
        "pid",
        "framework_metric",
        "step",
        "bytes",
        "process",
        "nodeID",
    ]:
        assert column in fw.columns
    train = fw[fw.process == "Step:ModeKeys.TRAIN"]
    assert train["step"].tolist() == [0, 1, 2]
    assert train["start_time_us"].tolist() == [6 * S, 7 * S, 8.5 * S]
    assert train["end_time"].iloc[1] == _text(hb.T0 + int(3.5 * S))
    assert train["start_time_epoch_us"].iloc[0] == hb.T0 + S
    forward = fw[fw.process == "Forward"]
    assert set(forward["framework_metric"]) == {"Net"}
    assert (forward["step"] == -1).all()


def test_framework_metrics_filter_by_exact_name_or_phase(pf: PandasFrame) -> None:
    by_phase = pf.get_all_framework_metrics(["Step:ModeKeys.EVAL"])
    assert by_phase["step"].tolist() == [0, 1]
    by_name = pf.get_all_framework_metrics(["worker_loop"])
    assert len(by_name) == 2
    assert pf.get_all_framework_metrics(["Step"]).empty


@pytest.mark.parametrize("kind", [pd.Series, np.array])
def test_selections_may_be_a_series_or_an_array(pf: PandasFrame, kind: Any) -> None:
    # e.g. names picked from a frame: system[system.type == "cpu"].system_metric.drop_duplicates()
    assert (
        len(pf.get_all_system_metrics(kind(["cpu0"])))
        == len(pf.get_all_system_metrics(["cpu0"]))
        > 0
    )
    phases = ["Forward", "DataLoaderWorker"]
    assert (
        len(pf.get_all_framework_metrics(kind(phases)))
        == len(pf.get_all_framework_metrics(phases))
        > 0
    )
    assert (
        len(pf.get_all_dataloader_metrics(kind(["Worker"])))
        == len(pf.get_all_dataloader_metrics(["Worker"]))
        > 0
    )
    system, fw = pf.get_profiler_data_by_time(
        hb.T0,
        hb.T0 + 9 * S,
        selected_framework_metrics=kind(phases),
        selected_system_metrics=kind(["cpu0"]),
    )
    assert set(system["system_metric"]) == {"cpu0"} and set(fw["process"]) == set(phases)
    assert len(pf.get_all_system_metrics(kind([]))) == len(pf.get_all_system_metrics())


def test_layer_name_argument_names_the_metric() -> None:
    rows = hb.event_rows()
    rows[1]["args"] = json.dumps({"layer_name": "conv1"})
    fw = PandasFrame(hb.connect(events=hb.events_table(rows))).get_all_framework_metrics()
    assert "conv1" in set(fw["framework_metric"])


def test_data_by_time_window(pf: PandasFrame) -> None:
    system, fw = pf.get_profiler_data_by_time(hb.T0 + 2 * S, hb.T0 + 3 * S)
    assert sorted(set(system["timestamp_epoch_us"])) == [hb.T0 + 2 * S, hb.T0 + 3 * S]
    # Overlapping events: TRAIN steps 0 (ends at 2 s) and 1, Forward of step 1, GetNext at 2 s,
    # and both workers.
    assert sorted(fw["framework_metric"]) == sorted(
        [
            "Step:ModeKeys.TRAIN",
            "Step:ModeKeys.TRAIN",
            "Net",
            "DataLoaderIter::GetNext",
            "worker_loop",
            "worker_loop",
        ]
    )
    only_system, none = pf.get_profiler_data_by_time(hb.T0, hb.T0 + S, get_framework_metrics=False)
    assert none.empty and len(only_system) == 8
    # the table not asked for has its columns (it had none: selecting one raised KeyError)
    assert none.columns.equals(fw.columns)
    none, only_framework = pf.get_profiler_data_by_time(hb.T0, hb.T0 + S, get_system_metrics=False)
    assert none.empty and none.columns.equals(only_system.columns)
    assert only_framework.equals(pf.get_profiler_data_by_time(hb.T0, hb.T0 + S)[1])


@pytest.mark.parametrize("scale", [1e-6, 1e-3])
def test_a_window_in_other_units_says_where_the_data_is(
    pf: PandasFrame, scale: float, caplog: pytest.LogCaptureFixture
) -> None:
    # seconds or ms since the epoch select nothing; that must not pass for a quiet window
    with caplog.at_level(logging.WARNING, logger="stepscope.analysis"):
        system, fw = pf.get_profiler_data_by_time(hb.T0 * scale, (hb.T0 + 3 * S) * scale)
    assert system.empty and fw.empty
    assert "holds none of the job's data" in caplog.text
    assert "µs since the epoch" in caplog.text and f"{hb.T0:.0f}" in caplog.text
    # so do the instants and intervals of the correlation queries (they gave empty dicts alone)
    for query in (
        lambda: pf.get_framework_metrics_by_timesteps([(hb.T0 + 2 * S) * scale]),
        lambda: pf.get_framework_metrics_by_begin_and_end_timesteps(
            [hb.T0 * scale], [(hb.T0 + 3 * S) * scale]
        ),
    ):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="stepscope.analysis"):
            assert not any(query())
        assert "holds none of the job's data" in caplog.text


@pytest.mark.parametrize(
    "missing",
    [math.nan, math.inf, -math.inf, pd.NaT, np.datetime64("NaT"), np.timedelta64(5, "s")],
)
def test_a_bound_that_is_not_a_time_is_a_config_error(pf: PandasFrame, missing: object) -> None:
    # e.g. training_loop_start_epoch_us of a job without TRAIN steps is NaN; a duration is no
    # time either, though numpy counts it as an integer
    with pytest.raises(ConfigError, match="get_profiler_data_by_time.start_time_us"):
        pf.get_profiler_data_by_time(missing, hb.T0)
    with pytest.raises(ConfigError, match="get_profiler_data_by_time.end_time_us"):
        pf.get_profiler_data_by_time(hb.T0, missing)
    with pytest.raises(ConfigError, match="timestep_list"):
        pf.get_framework_metrics_by_timesteps([hb.T0, missing])


@pytest.mark.parametrize("fraction_us", [0.3, 0.7])
def test_an_event_is_in_the_window_of_its_own_start_time(fraction_us: float) -> None:
    # events start at fractions of a µs; the text timestamps round them to the nearest µs
    rows = [hb.event("pythontimeline", "Forward", "Net", 1.1, 1e-6)]
    rows[0]["start_us"] += fraction_us
    pf = PandasFrame(hb.connect(events=hb.events_table(rows)))
    (event,) = pf.get_all_framework_metrics().itertuples()
    for bound in (event.start_time, event.start_time_epoch_us):
        _, fw = pf.get_profiler_data_by_time(bound, bound)
        assert fw["framework_metric"].tolist() == ["Net"], bound


def test_a_time_window_takes_the_datetimes_pandas_and_numpy_parse_the_text_times_into(
    pf: PandasFrame,
) -> None:
    steps = pf.get_all_framework_metrics(["Step:ModeKeys.TRAIN"])
    first = steps.iloc[0]
    by_text = pf.get_profiler_data_by_time(first["start_time"], first["end_time"])
    parsed = pd.to_datetime(
        pd.Series([first["start_time"], first["end_time"]]), format="%Y-%m-%dT%H:%M:%S:%f"
    )
    in_tokyo = parsed.dt.tz_localize("UTC").dt.tz_convert("Asia/Tokyo")
    for start, end in (
        (parsed.iloc[0], parsed.iloc[1]),  # pandas.Timestamp
        (parsed.to_numpy()[0], parsed.to_numpy()[1]),  # numpy.datetime64[ns]
        (in_tokyo.iloc[0], in_tokyo.iloc[1]),  # the same instants, in another zone
    ):
        system, fw = pf.get_profiler_data_by_time(start, end)
        assert system.equals(by_text[0]) and fw.equals(by_text[1]), type(start)
    assert len(by_text[1]) > 0
    finer = parsed.to_numpy()[0] + np.timedelta64(999, "ns")  # cut to its µs
    assert pf.convert_datetime_to_timestamp(finer) == first["start_time_epoch_us"]


def test_data_by_step_takes_system_samples_within_those_steps(pf: PandasFrame) -> None:
    system, fw = pf.get_profiler_data_by_step(1, 1)
    # TRAIN step 1 [2, 3.5] and EVAL step 1 [6.5, 7.5]: samples at 2..7 s.
    assert sorted(fw["process"]) == ["Step:ModeKeys.EVAL", "Step:ModeKeys.TRAIN"]
    assert sorted(set(system["timestamp_epoch_us"])) == [hb.T0 + k * S for k in range(2, 8)]


class ModeKeys(enum.Enum):
    """smdebug's ``ModeKeys``, as a notebook written for it passes them."""

    TRAIN = 1
    EVAL = 2
    PREDICT = 3
    GLOBAL = 4


def test_data_by_step_of_one_mode_leaves_the_other_modes_steps_of_that_number(
    pf: PandasFrame,
) -> None:
    # TRAIN step 1 [2, 3.5] holds a Forward; EVAL step 1 [6.5, 7.5]; samples every second
    train_system, train = pf.get_profiler_data_by_step(1, 1, mode="TRAIN")
    assert train["process"].tolist() == ["Step:ModeKeys.TRAIN"]
    assert train_system["timestamp_epoch_us"].unique().tolist() == [hb.T0 + 2 * S, hb.T0 + 3 * S]
    for mode in ("eval", ModeKeys.EVAL, "ModeKeys.EVAL"):
        _, evaluation = pf.get_profiler_data_by_step(1, 1, mode=mode)
        assert evaluation["process"].tolist() == ["Step:ModeKeys.EVAL"], mode
    assert pf.get_profiler_data_by_step(0, 2, mode=ModeKeys.PREDICT)[1].empty
    with pytest.raises(ConfigError, match="get_profiler_data_by_step.mode must be one of TRAIN"):
        pf.get_profiler_data_by_step(1, 1, mode="TEST")


def test_data_by_step_of_a_mode_in_a_recorded_job(shared_fixtures: Path, tmp_path: Path) -> None:
    # a TensorFlow job of 30 TRAIN and 10 EVAL steps, each mode numbering its steps from 0
    job = tmp_path / "merge_traces"
    shutil.copytree(shared_fixtures / "smdebug" / "merge_traces", job)
    pf = PandasFrame(job)
    both = pf.get_profiler_data_by_step(0, 9)[1]
    evaluation = pf.get_profiler_data_by_step(0, 9, mode="EVAL")[1]
    training = pf.get_profiler_data_by_step(0, 29, mode=ModeKeys.TRAIN)[1]
    assert evaluation["step"].tolist() == list(range(10))
    assert set(evaluation["process"]) == {"Step:ModeKeys.EVAL"}
    assert len(training) == 30 and set(training["process"]) == {"Step:ModeKeys.TRAIN"}
    assert len(both) == 20


def test_data_by_step_of_a_trace_counts_its_profiler_steps_as_train(
    shared_fixtures: Path,
) -> None:
    pf = PandasFrame(shared_fixtures / "kineto" / "a100_rank0of2_nccl.json.gz")
    every = pf.get_profiler_data_by_step(4, 6)[1]
    training = pf.get_profiler_data_by_step(4, 6, mode="TRAIN")[1]
    assert len(training) == len(every) > 0  # kernels that ran after their step's range too
    assert pf.get_profiler_data_by_step(4, 6, mode="EVAL")[1].empty


def test_dataloader_metrics_are_selected_by_regex(pf: PandasFrame) -> None:
    getnext = pf.get_all_dataloader_metrics([".*DataLoaderIter::GetNext"])
    assert getnext["duration_us"].tolist() == [100.0, 100.0, 500.0]
    assert getnext["worker_id"].tolist() == [0, 1, 0]
    init = pf.get_all_dataloader_metrics(["DataLoaderIterInitialize"])
    assert init[["framework_metric", "num_workers", "pin_memory"]].values.tolist() == [
        ["_MultiProcessingDataLoaderIter.__init__", 4, "True"]
    ]
    assert getnext["pin_memory"].tolist() == ["NA"] * 3
    both = pf.get_all_dataloader_metrics(["DataLoaderWorker", "Initialize"])
    assert len(both) == 3


def test_text_timestamps_convert_back_to_microseconds(pf: PandasFrame) -> None:
    system = pf.get_all_system_metrics()
    for text, us in zip(system["timestamp"], system["timestamp_epoch_us"], strict=True):
        assert pf.convert_datetime_to_timestamp(text) == us


def test_framework_metrics_at_instants(pf: PandasFrame) -> None:
    phases, names, training = pf.get_framework_metrics_by_timesteps([_text(hb.T0 + int(1.5 * S))])
    # Running at 1.5 s: TRAIN step 0 (1 s long), Net (0.5 s), both workers (7.5 s and 2 s).
    assert training == {"Step:ModeKeys.TRAIN": 1.0 * S}
    assert names == {"Net": 0.5 * S, "worker_loop": 9.5 * S}
    assert phases == {"DataLoaderWorker": 1.0, "Forward": pytest.approx(0.5 / 9.5)}


def test_framework_metrics_in_intervals(pf: PandasFrame) -> None:
    phases, names = pf.get_framework_metrics_by_begin_and_end_timesteps(
        [_text(hb.T0 + S)], [_text(hb.T0 + 2 * S)]
    )
    # Overlapping [1, 2] s, Step events left out: GetNext at 1 s and 2 s (100 us each), Net
    # (0.5 s), both workers (9.5 s together).
    assert phases == {
        "DataLoaderWorker": 1.0,
        "Forward": pytest.approx(0.5 / 9.5),
        "DataLoaderIter": pytest.approx(200 / 9.5e6),
    }
    assert names["worker_loop"] == 1.0


def test_intervals_need_one_end_per_begin(pf: PandasFrame) -> None:
    # zip(strict=True) raised a bare "zip() argument 2 is shorter than argument 1"
    with pytest.raises(ConfigError, match=r"end_timestep_list must be a list of one end per begin"):
        pf.get_framework_metrics_by_begin_and_end_timesteps([hb.T0, hb.T0 + S], [hb.T0 + 2 * S])


def test_steps_that_select_nothing_say_which_steps_there_are(
    pf: PandasFrame, caplog: pytest.LogCaptureFixture
) -> None:
    # a range past the job's steps, or a mode it never ran, gave empty frames without a word
    with caplog.at_level(logging.WARNING, logger="stepscope.analysis"):
        assert pf.get_profiler_data_by_step(5, 9)[1].empty
        assert pf.get_profiler_data_by_step(0, 1, mode="PREDICT")[1].empty
    assert [r.getMessage() for r in caplog.records] == [
        "No events of steps 5 to 9; the job's steps: TRAIN 0 to 2, EVAL 0 to 1.",
        "No events of steps 0 to 1 of mode PREDICT; the job's steps: TRAIN 0 to 2, EVAL 0 to 1.",
    ]


def test_an_interval_that_ends_before_it_begins_is_a_config_error(pf: PandasFrame) -> None:
    # Swapped lists gave ({}, {}), as if nothing had run
    with pytest.raises(ConfigError, match=r"end_timestep_list must be an end at or after its"):
        pf.get_framework_metrics_by_begin_and_end_timesteps([hb.T0 + 2 * S], [hb.T0 + S])


def test_an_empty_job_gives_empty_frames() -> None:
    empty = PandasFrame(hb.connect(hb.system_table().slice(0, 0), hb.events_table([])))
    assert empty.start_time == 0
    assert empty.get_all_system_metrics().empty
    assert empty.get_all_framework_metrics().empty
    assert empty.get_all_dataloader_metrics([".*"]).empty


def test_a_frame_made_before_the_first_data_counts_from_that_data_once_it_comes(
    tmp_path: Path,
) -> None:
    job = tmp_path / "job"
    (job / "profiler-output").mkdir(parents=True)
    pf = PandasFrame(job)  # a job just started: nothing written yet
    assert pf.get_all_system_metrics().empty
    written = generate_job(tmp_path / "written", **TINY_JOB)
    shutil.copytree(written / "profiler-output" / "system", job / "profiler-output" / "system")
    system = pf.get_all_system_metrics()
    first_us = int(system["timestamp_epoch_us"].min())
    assert pf.start_time == first_us // 60_000_000 * 60_000_000
    relative = system["timestamp_epoch_us"] - pf.start_time
    assert system["timestamp_us"].tolist() == relative.tolist()
    assert 0 <= system["timestamp_us"].min() < 60_000_000


def test_a_frame_of_a_running_job_reads_on_after_its_segments_are_compacted(
    tmp_path: Path,
) -> None:
    """The live rule engine's last pass merges the cache's segments when the job ends, and the
    segments it replaced are deleted a few minutes later: the notebook's frame reads on."""
    job = generate_job(tmp_path / "job", **TINY_JOB)
    output = job / "profiler-output"
    for marker in (output / "training_job_end.ts", output / "system" / "training_job_end.ts"):
        marker.unlink(missing_ok=True)
    pf = PandasFrame(job)
    before = len(pf.get_all_system_metrics())
    (output / "training_job_end.ts").touch()
    open_job(job).refresh()  # the engine's final pass: the segments are merged
    later = ColumnarCache(job / ".stepscope" / "cache", retire_after_s=0)
    with later.locked():  # the grace period is over: the replaced segments are deleted
        later.load()
        later.save()
    assert len(pf.get_all_system_metrics()) == before > 0


# -- recorded SageMaker output -------------------------------------------------------------------


def _recorded_events(folder: Path) -> list[tuple[str, str, float, float]]:
    """(phase, name, start µs, duration µs) of every span in the trace files, read here directly."""
    found = []
    for path in sorted(folder.rglob("*.json")):
        events = json.loads(path.read_text())
        start = next(
            e["args"]["start_time_since_epoch_in_micros"]
            for e in events
            if e.get("ph") == "M" and "start_time_since_epoch_in_micros" in e.get("args", {})
        )
        phases = {
            e["pid"]: e["args"]["name"]
            for e in events
            if e.get("name") == "process_name" and "name" in e.get("args", {})
        }
        for e in events:
            if e.get("ph") == "X":
                found.append((phases[e["pid"]], e["name"], start + e["ts"], e["dur"]))
    return found


def test_recorded_merge_traces(shared_fixtures: Path, tmp_path: Path) -> None:
    root = shared_fixtures / "smdebug" / "merge_traces"
    expected = _recorded_events(root / "framework" / "pevents")
    pf = PandasFrame(open_job(root, cache_dir=tmp_path / "cache"))
    fw = pf.get_all_framework_metrics()
    assert (fw["process"] == "Step:ModeKeys.TRAIN").sum() == 30
    assert (fw["process"] == "Step:ModeKeys.EVAL").sum() == 10
    getnext_expected = sum(1 for phase, *_ in expected if phase == "DataIterator")
    assert getnext_expected == 662
    assert len(pf.get_all_dataloader_metrics(["DataIterator"])) == getnext_expected
    assert len(pf.get_all_framework_metrics(["dataset::GetNext"])) == sum(
        1 for _, name, *_ in expected if name == "dataset::GetNext"
    )
    train = sorted((s, d) for p, _, s, d in expected if p == "Step:ModeKeys.TRAIN")
    got = fw[fw["process"] == "Step:ModeKeys.TRAIN"].sort_values("start_time_epoch_us")
    assert got["start_time_epoch_us"].tolist() == [s for s, _ in train]
    assert (got["end_time_epoch_us"] - got["start_time_epoch_us"]).tolist() == [d for _, d in train]
    assert got["step"].tolist() == list(range(30))
    assert pf.get_all_system_metrics().empty
