"""PT_dataloader_analysis: the five data-loader analyses return their findings."""

from __future__ import annotations

import logging

import pandas as pd
import pyarrow as pa
import pytest
from tests.analysis import _handbuilt as hb

from stepscope import testing
from stepscope.analysis.dataloader import PT_dataloader_analysis
from stepscope.analysis.pandas_frame import PandasFrame
from stepscope.errors import ConfigError

S = hb.S


@pytest.fixture
def analysis() -> PT_dataloader_analysis:
    return PT_dataloader_analysis(PandasFrame(hb.connect()))


def test_iterator_initialization(
    analysis: PT_dataloader_analysis, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="stepscope.analysis.dataloader"):
        found = analysis.analyze_dataloaderIter_initialization()
    assert list(found) == ["_MultiProcessingDataLoaderIter.__init__"]
    init = found["_MultiProcessingDataLoaderIter.__init__"]
    assert (init.count, init.pin_memory, init.num_workers) == (1, "True", 4)
    assert init.median_duration_us == init.max_duration_us == 0.3 * S
    assert "pin_memory=True and num_workers=4" in caplog.text


def test_iterators_of_different_settings_are_each_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # an evaluation loader with one worker and no pinned memory beside the training loader
    rows = hb.event_rows()
    for start_s in (5.5, 8.5):
        rows.append(
            hb.event(
                "model_timeline",
                "DataLoaderIterInitialize",
                "_MultiProcessingDataLoaderIter.__init__",
                start_s,
                0.1,
                args={"num_workers": 1, "pin_memory": False},
            )
        )
    analysis = PT_dataloader_analysis(PandasFrame(hb.connect(events=hb.events_table(rows))))
    with caplog.at_level(logging.INFO, logger="stepscope.analysis.dataloader"):
        init = analysis.analyze_dataloaderIter_initialization()[
            "_MultiProcessingDataLoaderIter.__init__"
        ]
    assert init.count == 3
    assert init.settings.values.tolist() == [[1, "False", 2], [4, "True", 1]]
    assert (
        "initialized 3 times: 2 with pin_memory=False and num_workers=1, "
        "1 with pin_memory=True and num_workers=4." in caplog.text
    )


def test_workers_outside_every_step_are_analysed(analysis: PT_dataloader_analysis) -> None:
    workers = analysis.analyze_dataloaderWorkers()
    assert workers.count == 2
    assert workers.median_duration_us == (7.5 + 2.0) / 2 * S
    assert workers.max_duration_us == 7.5 * S
    assert workers.outliers.empty  # 7.5 s < 2 x 4.75 s


def test_getnext_outliers_are_at_least_twice_the_median(analysis: PT_dataloader_analysis) -> None:
    getnext = analysis.analyze_dataloader_getnext()
    assert (getnext.count, getnext.median_duration_us, getnext.max_duration_us) == (3, 100, 500)
    assert getnext.outliers[["duration_us", "worker_id"]].values.tolist() == [[500.0, 0]]
    assert "1 outliers" in getnext.summary()


def _getnext_job(fractions_us: dict[int, float] | None = None) -> PT_dataloader_analysis:
    """GetNext calls at 0, 1, 2, 3, 6 and 7 s: batches of 1, 1, 1, 3 and 1 s.

    :param fractions_us: a fraction of a µs to add to the start of the call at that second.
    """
    events = hb.events_table(_getnext_rows(fractions_us))
    return PT_dataloader_analysis(PandasFrame(hb.connect(events=events)))


def _getnext_rows(fractions_us: dict[int, float] | None = None) -> list[dict]:
    rows = [r for r in hb.event_rows() if r["category"] != "DataLoaderIter"]
    for start_s in (0, 1, 2, 3, 6, 7):
        row = hb.event(
            "model_timeline",
            "DataLoaderIter",
            "DataLoaderIter::GetNext",
            start_s,
            0.001,
            args={"worker_id": start_s % 2},
        )
        row["start_us"] += (fractions_us or {}).get(start_s, 0.0)
        rows.append(row)
    return rows


def test_batch_time_outliers_and_what_happened_during_them() -> None:
    result = _getnext_job().analyze_batchtime(
        select_events=["Forward"], select_dimensions=["CPUUtilization"]
    )
    assert result.median_batch_time_s == 1.0
    assert result.batches["BatchTime_in_seconds"].dropna().tolist() == [1.0, 1.0, 1.0, 3.0, 1.0]
    (outlier,) = result.outliers.itertuples()
    assert outlier.BatchTime_in_seconds == 3.0
    assert outlier.previous_batch_start_epoch_us == hb.T0 + 3 * S
    assert outlier.start_time_epoch_us == hb.T0 + 6 * S
    # System samples at 3, 4, 5 and 6 s: CPUUtilization 30, 40, 50, 60.
    assert result.system_metrics[["dimension", "mean", "max", "samples"]].values.tolist() == [
        ["CPUUtilization", 45.0, 60.0, 4]
    ]
    # Framework events overlapping [3, 6] s whose name or phase matches "Forward": Net of step 2.
    assert result.framework_metrics[
        ["process", "framework_metric", "count", "total_us"]
    ].values.tolist() == [["Forward", "Net", 1, 0.5 * S]]


def test_what_happened_during_an_outlier_batch_is_taken_from_its_own_node_and_rank() -> None:
    # Another node, busy during algo-1's slow batch [3, 6] s, with steady batches of its own.
    other = [hb.event("pythontimeline", "Forward", "Net", 3.5, 2.0)]
    other += [
        hb.event("model_timeline", "DataLoaderIter", "DataLoaderIter::GetNext", t, 0.001)
        for t in range(8)
    ]
    other_system = testing.system_table(
        timestamp_us=[hb.T0 + k * S for k in range(10)],
        node="algo-2",
        type="cpu",
        name="cpu0",
        dimension="CPUUtilization",
        value=99.0,
    )
    both = PandasFrame(
        hb.connect(
            system=pa.concat_tables([hb.system_table(), other_system]),
            events=hb.events_table(
                _getnext_rows() + [{**r, "node": "algo-2", "rank": 1} for r in other]
            ),
        )
    )
    result = PT_dataloader_analysis(both).analyze_batchtime(
        select_events=["Forward"], select_dimensions=["CPUUtilization"]
    )
    (outlier,) = result.outliers.itertuples()
    assert outlier.node_id == "algo-1"
    assert result.system_metrics[["nodeID", "mean", "samples"]].values.tolist() == [
        ["algo-1", 45.0, 4]
    ]
    assert result.framework_metrics[
        ["process", "framework_metric", "count", "total_us"]
    ].values.tolist() == [["Forward", "Net", 1, 0.5 * S]]


def test_io_metrics_during_an_outlier_batch_are_told_apart_by_name() -> None:
    # IOPS (ops/s) and read throughput (B/s) share the empty dimension of the `i/o` type: one
    # row averaged 200 IOPS with 5e7 B/s, a mean of 2.5e7 in no unit
    io = testing.system_table(
        timestamp_us=[hb.T0 + k * S for k in range(10) for _ in range(2)],
        node="algo-1",
        type="i/o",
        name=["IOPS", "ReadThroughputInBytesPerSecond"] * 10,
        dimension="",
        value=[200.0, 5e7] * 10,
    )
    pf = PandasFrame(
        hb.connect(
            system=pa.concat_tables([hb.system_table(), io]),
            events=hb.events_table(_getnext_rows()),
        )
    )
    result = PT_dataloader_analysis(pf).analyze_batchtime()
    rows = result.system_metrics[result.system_metrics["type"] == "i/o"]
    assert rows[["dimension", "mean", "samples"]].values.tolist() == [
        ["IOPS", 200.0, 4],
        ["ReadThroughputInBytesPerSecond", 5e7, 4],
    ]


def test_batch_time_tables_have_their_columns_also_without_outliers(
    analysis: PT_dataloader_analysis,
) -> None:
    # a window without outlier batches (a healthy job) gave tables without columns: selecting
    # one raised KeyError
    with_outliers = _getnext_job().analyze_batchtime()
    for result in (analysis.analyze_batchtime(), analysis.analyze_batchtime(hb.T0, hb.T0)):
        assert result.outliers.empty
        for table in ("batches", "outliers", "system_metrics", "framework_metrics"):
            assert list(getattr(result, table).columns) == list(
                getattr(with_outliers, table).columns
            ), table


def test_batch_time_window(caplog: pytest.LogCaptureFixture) -> None:
    analysis = _getnext_job()
    late = analysis.analyze_batchtime(hb.T0 + 5 * S, hb.T0 + 10 * S)
    assert late.batches["BatchTime_in_seconds"].dropna().tolist() == [1.0]
    assert late.outliers.empty
    with caplog.at_level(logging.INFO, logger="stepscope.analysis.dataloader"):
        none = analysis.analyze_batchtime(hb.T0 + 8 * S, hb.T0 + 10 * S)
    assert none.empty
    assert "Fewer than two" in caplog.text


def test_an_outlier_batch_is_found_again_by_the_bounds_the_outlier_table_gives() -> None:
    # the calls start at fractions of a µs, as real ones do; the text timestamps round them
    analysis = _getnext_job({3: 0.7, 6: 0.3})
    (outlier,) = analysis.analyze_batchtime().outliers.itertuples()
    texts = pd.Series([outlier.previous_batch_start, outlier.start_time])
    parsed = pd.to_datetime(texts, format="%Y-%m-%dT%H:%M:%S:%f")
    for bounds in (
        (outlier.previous_batch_start_epoch_us, outlier.start_time_epoch_us),
        (outlier.previous_batch_start, outlier.start_time),
        tuple(parsed),  # pandas.Timestamp
        tuple(parsed.to_numpy()),  # numpy.datetime64
    ):
        times = analysis.analyze_batchtime(*bounds).batches["BatchTime_in_seconds"].dropna()
        assert times.tolist() == [pytest.approx(3.0)], bounds


def test_a_batch_time_window_in_seconds_says_where_the_calls_are(
    caplog: pytest.LogCaptureFixture,
) -> None:
    analysis = _getnext_job()
    first = analysis.dataIter_metric["start_time"].iloc[0]
    with caplog.at_level(logging.WARNING, logger="stepscope.analysis.dataloader"):
        none = analysis.analyze_batchtime((hb.T0 + S) / 1e6, (hb.T0 + 6 * S) / 1e6)
    assert none.empty
    assert "No DataLoaderIter::GetNext call starts in the window" in caplog.text
    assert f"the job's 6 calls start from {first} ({hb.T0})" in caplog.text


def test_a_batch_time_window_that_ends_before_it_starts_is_a_config_error() -> None:
    analysis = _getnext_job()
    with pytest.raises(ConfigError, match="analyze_batchtime.end_timestamp"):
        analysis.analyze_batchtime(hb.T0 + 6 * S, hb.T0 + 1 * S)
    # as text, the way the outlier table shows times
    calls = analysis.dataIter_metric
    with pytest.raises(ConfigError, match="at or after start_timestamp"):
        analysis.analyze_batchtime(calls["start_time"].iloc[-1], calls["start_time"].iloc[0])


def test_a_job_without_data_loader_events_gives_empty_results() -> None:
    rows = [r for r in hb.event_rows() if r["source"] != "model_timeline"]
    analysis = PT_dataloader_analysis(PandasFrame(hb.connect(events=hb.events_table(rows))))
    assert analysis.analyze_dataloaderIter_initialization() == {}
    assert analysis.analyze_dataloaderWorkers().empty
    getnext = analysis.analyze_dataloader_getnext()
    assert getnext.empty and "No DataLoaderIter::GetNext events" in getnext.summary()
    assert analysis.analyze_batchtime().empty
