"""plot_the_window writes a chart file that opens without a notebook or a network."""

from __future__ import annotations

import base64
import json
import logging
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from tests.analysis import _handbuilt as hb

from stepscope import testing
from stepscope.analysis.dataloader import PT_dataloader_analysis
from stepscope.analysis.pandas_frame import PandasFrame
from stepscope.analysis.window_plot import plot_the_window
from stepscope.errors import ConfigError, MissingDependencyError

S = hb.S


def _figure_data(html: str) -> list[dict]:
    """The trace list passed to Plotly.newPlot in the page."""
    match = re.search(r"Plotly\.newPlot\(\s*\"[^\"]+\",\s*(\[.*?\]),\s*\{", html, re.S)
    assert match, "no Plotly.newPlot call in the page"
    return json.loads(match.group(1))


def _values(array: list | dict) -> list:
    """Plotly writes numeric arrays as base64 typed arrays; decode them to a list."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).tolist()
    return list(array)


def test_the_window_is_a_self_contained_html_page(tmp_path: Path) -> None:
    analysis = PT_dataloader_analysis(PandasFrame(hb.connect()))
    path = analysis.plot_the_window(
        hb.T0 + 1 * S,
        hb.T0 + 4 * S,
        select_dimensions=["CPUUtilization", "GPUUtilization"],
        output=tmp_path / "window.html",
    )
    assert path == tmp_path / "window.html"
    html = path.read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]+src=", html), "plotly.js must be inlined, not fetched"
    traces = _figure_data(html)
    lines = {t["name"]: t for t in traces if t["type"] == "scattergl"}
    assert set(lines) == {"algo-1 CPUUtilization cpu0", "algo-1 GPUUtilization gpu0"}
    # Samples at 1..4 s, CPUUtilization 10..40, x in seconds since the window start.
    assert _values(lines["algo-1 CPUUtilization cpu0"]["y"]) == [10.0, 20.0, 30.0, 40.0]
    assert _values(lines["algo-1 CPUUtilization cpu0"]["x"]) == [0.0, 1.0, 2.0, 3.0]
    bars = [t for t in traces if t["type"] == "bar"]
    phases = {t["y"][0] for t in bars}
    assert "Step:ModeKeys.TRAIN" in phases and "Step:ModeKeys.EVAL" not in phases


def test_a_png_without_kaleido_names_the_install_command_that_brings_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No stepscope extra installs kaleido, so the command must name kaleido itself.
    monkeypatch.setitem(sys.modules, "kaleido", None)  # as where kaleido is not installed
    analysis = PT_dataloader_analysis(PandasFrame(hb.connect()))
    with pytest.raises(MissingDependencyError) as caught:
        analysis.plot_the_window(output=tmp_path / "window.png")
    assert str(caught.value).endswith("Install it with: pip install kaleido")


def test_an_output_named_as_an_image_or_as_nothing_known_is_not_an_html_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # window.svg and window.txt were HTML pages under those names
    monkeypatch.setitem(sys.modules, "kaleido", None)  # as where kaleido is not installed
    analysis = PT_dataloader_analysis(PandasFrame(hb.connect()))
    with pytest.raises(MissingDependencyError, match="plot_the_window to SVG"):
        analysis.plot_the_window(output=tmp_path / "window.svg")
    with pytest.raises(ConfigError, match=r"output must be a file name ending in \.html"):
        analysis.plot_the_window(output=tmp_path / "window.txt")
    assert list(tmp_path.iterdir()) == []


def test_each_kind_of_system_metric_has_its_own_axis(tmp_path: Path) -> None:
    # Throughputs in the millions on the axis of 0-100 % utilizations would flatten the latter.
    network = testing.system_table(
        timestamp_us=[hb.T0 + k * S for k in range(10)],
        type="network",
        name="TransmitBytesPerSecond",
        dimension="Algorithm",
        value=3e8,
    )
    system = pa.concat_tables([hb.system_table(), network])
    path = plot_the_window(
        hb.connect(system=system), hb.T0, hb.T0 + 9 * S, output=tmp_path / "w.html"
    )
    traces = _figure_data(path.read_text(encoding="utf-8"))
    axis = {t["name"]: t.get("yaxis", "y") for t in traces if t["type"] == "scattergl"}
    cpu, gpu = axis["algo-1 CPUUtilization cpu0"], axis["algo-1 GPUUtilization gpu0"]
    net = axis["algo-1 Algorithm TransmitBytesPerSecond"]
    assert len({cpu, gpu, net}) == 3
    assert axis["algo-1 I/OWaitPercentage cpu0"] == cpu
    bars = {t.get("yaxis", "y") for t in traces if t["type"] == "bar"}
    assert len(bars) == 1 and bars.isdisjoint(axis.values())


def test_events_are_selected_by_regex_and_clipped_to_the_window(tmp_path: Path) -> None:
    path = plot_the_window(
        hb.connect(),
        hb.T0 + 1 * S,
        hb.T0 + 3 * S,
        select_events=["DataLoaderWorker"],
        select_dimensions=["nothing-matches"],
        output=tmp_path / "w.html",
    )
    traces = _figure_data(path.read_text(encoding="utf-8"))
    assert [t["type"] for t in traces] == ["bar"]
    # Both workers span the window start; the long one is clipped to the window's 2 s.
    assert sorted(_values(traces[0]["x"])) == [1.5, 2.0]
    assert _values(traces[0]["base"]) == [0.0, 0.0]


def test_text_timestamps_and_a_default_file_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    pf = PandasFrame(hb.connect())
    system = pf.get_all_system_metrics()
    path = plot_the_window(pf, system["timestamp"].iloc[0], system["timestamp"].iloc[-1])
    assert path.name == f"stepscope-window-{hb.T0}-{hb.T0 + 9 * S}.html"
    assert (tmp_path / path).is_file()
    # the same times as pandas parses the text (numpy.datetime64 in its array)
    parsed = pd.to_datetime(system["timestamp"], format="%Y-%m-%dT%H:%M:%S:%f").to_numpy()
    again = plot_the_window(pf, parsed[0], parsed[-1], output=tmp_path / "again.html")
    assert _figure_data(again.read_text()) == _figure_data((tmp_path / path).read_text())


def test_without_bounds_the_window_is_the_whole_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the seed's call: pt_analysis.plot_the_window()
    monkeypatch.chdir(tmp_path)
    path = PT_dataloader_analysis(PandasFrame(hb.connect())).plot_the_window()
    # the data runs from the first system sample (0 s) to the last (9 s)
    assert path.name == f"stepscope-window-{hb.T0}-{hb.T0 + 9 * S}.html"
    traces = _figure_data((tmp_path / path).read_text(encoding="utf-8"))
    cpu = next(t for t in traces if t["name"] == "algo-1 CPUUtilization cpu0")
    assert _values(cpu["y"]) == [10.0 * k for k in range(10)]
    # one bound alone: the other is the data's
    path = plot_the_window(hb.connect(), hb.T0 + 5 * S, output=tmp_path / "late.html")
    cpu = next(
        t for t in _figure_data(path.read_text(encoding="utf-8")) if t["name"] == cpu["name"]
    )
    assert _values(cpu["y"]) == [10.0 * k for k in range(5, 10)]


def test_a_job_without_data_has_no_window_to_plot(tmp_path: Path) -> None:
    empty = hb.connect(system=hb.system_table().slice(0, 0), events=hb.events_table().slice(0, 0))
    with pytest.raises(
        ConfigError, match="start_timestamp must be a timestamp, got None. The job holds no data"
    ):
        plot_the_window(empty, output=tmp_path / "x.html")


def test_an_end_before_the_start_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="end_timestamp"):
        plot_the_window(hb.connect(), hb.T0 + S, hb.T0, output=tmp_path / "x.html")


def test_a_window_in_seconds_says_where_the_data_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    start_s, end_s = (hb.T0 + S) / 1e6, (hb.T0 + 4 * S) / 1e6  # seconds, not µs
    with caplog.at_level(logging.WARNING, logger="stepscope.analysis.window_plot"):
        plot_the_window(hb.connect(), start_s, end_s, output=tmp_path / "w.html")
    assert "holds none of the job's data" in caplog.text
    assert f"from {hb.T0} to " in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="stepscope.analysis.window_plot"):
        # a window with data, none of it selected: no warning
        plot_the_window(
            hb.connect(),
            hb.T0 + S,
            hb.T0 + 4 * S,
            select_events=["nothing-matches"],
            select_dimensions=["nothing-matches"],
            output=tmp_path / "w.html",
        )
    assert caplog.text == ""


def test_an_events_own_text_timestamps_plot_it(tmp_path: Path, shared_fixtures: Path) -> None:
    # a text timestamp stands for its whole µs, as in analyze_batchtime: an event shorter than
    # a µs has the same start and end text, and that window held it (it was refused as empty)
    pf = PandasFrame(shared_fixtures / "kineto" / "v100_single_ns_resolution.pt.trace.json.gz")
    framework = pf.get_all_framework_metrics()
    event = framework[framework["start_time"] == framework["end_time"]].iloc[0]
    path = plot_the_window(pf, event["start_time"], event["end_time"], output=tmp_path / "e.html")
    bars = [t for t in _figure_data(path.read_text(encoding="utf-8")) if t["type"] == "bar"]
    assert event["framework_metric"] in [name for t in bars for name in t["hovertext"]]
