"""``plot_the_window``: a chart file of the system metrics and framework events in a time window.

SageMaker's version built a bokeh widget that only lived in a notebook. This one writes a file
that opens anywhere: a self-contained HTML page (plotly, with plotly.js inlined from the installed
package, so it works offline) or, when the output name ends in ``.png`` (or another of
:data:`IMAGE_SUFFIXES`) and kaleido is installed, an image. Each kind of system metric
(``cpu``, ``gpu``, ``memory``, ``i/o``, ``network``) has a panel of its own, since their units differ by orders of magnitude (percentages beside bytes per
second would read as flat lines at zero), with one line per metric (node, dimension, name),
averaged into at most :data:`MAX_POINTS_PER_LINE` time buckets; the bottom panel has one bar per
framework event, one row per phase, keeping the :data:`MAX_EVENTS` longest when there are more.
The x axis is seconds since the window start.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepscope._optional import require
from stepscope.analysis.pandas_frame import (
    connect_source,
    data_span_us,
    regex_any,
    to_epoch_us,
    warn_if_outside_the_data,
    window_bound_us,
)
from stepscope.errors import ConfigError

if TYPE_CHECKING:
    import duckdb

__all__ = ["IMAGE_SUFFIXES", "MAX_EVENTS", "MAX_POINTS_PER_LINE", "plot_the_window"]

logger = logging.getLogger(__name__)

#: Time buckets per system-metric line; longer windows are averaged down to this.
MAX_POINTS_PER_LINE = 2000
#: Framework events drawn; the longest are kept.
MAX_EVENTS = 20_000
#: Output names written as images (through kaleido); ``.html`` and ``.htm`` are HTML pages.
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".svg", ".pdf")
_HTML_SUFFIXES = (".html", ".htm")
#: The order of the system-metric panels, top down; other kinds follow by name.
_KIND_ORDER = {"cpu": 0, "gpu": 1, "memory": 2, "i/o": 3, "network": 4}


def plot_the_window(
    source: Any,
    start_timestamp: Any = None,
    end_timestamp: Any = None,
    *,
    select_events: Sequence[str] | str = (".*",),
    select_dimensions: Sequence[str] | str = (".*",),
    output: str | Path | None = None,
) -> Path:
    """Write the chart of ``[start_timestamp, end_timestamp]`` and return the file's path.

    :param source: a :class:`~stepscope.analysis.PandasFrame`, a job path, a ``JobData`` or a
        DuckDB connection with ``system`` and ``events`` views.
    :param start_timestamp: µs since the epoch, or a SageMaker text timestamp or a datetime
        (``datetime``, ``numpy.datetime64``, ``pandas.Timestamp``; standing for its whole µs); None means the first instant of the job's data (``plot_the_window()`` charts
        the whole job).
    :param end_timestamp: likewise, after the start; None means the last instant of the data.
    :param select_events: regular expressions; events whose name or phase matches are drawn.
    :param select_dimensions: regular expressions; system metrics whose dimension or name matches
        are drawn.
    :param output: the file to write (``.html``, or ``.png`` or another of
        :data:`IMAGE_SUFFIXES` with kaleido installed); default
        ``stepscope-window-<start_us>-<end_us>.html`` in the current folder.
    :raises ConfigError: the output's suffix is none of these (a page written under another
        name would not open as what it is called).
    """
    suffix = "" if output is None else Path(output).suffix.lower()
    if output is not None and suffix not in _HTML_SUFFIXES + IMAGE_SUFFIXES:
        raise ConfigError(
            "plot_the_window.output",
            str(output),
            "a file name ending in " + ", ".join(_HTML_SUFFIXES + IMAGE_SUFFIXES),
        )
    plotly = require("plotly", extra="ui", feature="plot_the_window")
    from plotly.subplots import make_subplots

    go = plotly.graph_objects
    con = connect_source(source)[1]
    start_us, end_us = _window_us(con, start_timestamp, end_timestamp)
    # what the window holds: a text timestamp stands for its whole µs (as in analyze_batchtime),
    # so an event's own start and end texts hold it even when it is shorter than a µs
    low_us, high_us = (
        float(us) if timestamp is None else window_bound_us(timestamp, parameter, end=end)
        for us, timestamp, parameter, end in (
            (start_us, start_timestamp, "plot_the_window.start_timestamp", False),
            (end_us, end_timestamp, "plot_the_window.end_timestamp", True),
        )
    )
    if high_us <= low_us:
        raise ConfigError(
            "plot_the_window.end_timestamp",
            end_timestamp,
            f"after the start ({start_us if start_timestamp is None else start_timestamp!r})",
        )
    path = (
        Path(output) if output is not None else Path(f"stepscope-window-{start_us}-{end_us}.html")
    )
    bucket_us = max(1.0, (high_us - low_us) // MAX_POINTS_PER_LINE)
    dimensions = regex_any(con, select_dimensions, "plot_the_window.select_dimensions")
    events = regex_any(con, select_events, "plot_the_window.select_events")
    system = con.sql(
        "SELECT type, node, dimension, name, "
        "(min(timestamp_us) - ?) / 1e6 AS t_s, avg(value) AS value FROM system "
        "WHERE timestamp_us BETWEEN ? AND ? AND (regexp_matches(dimension, ?) OR "
        "regexp_matches(name, ?)) GROUP BY type, node, dimension, name, (timestamp_us - ?) // ? "
        "ORDER BY node, dimension, name, t_s",
        params=[low_us, low_us, high_us, dimensions, dimensions, low_us, bucket_us],
    ).df()
    framework = con.sql(
        "SELECT category, name, (greatest(start_us, ?) - ?) / 1e6 AS t_s, "
        "(least(start_us + dur_us, ?) - greatest(start_us, ?)) / 1e6 AS dur_s FROM events "
        "WHERE ph <> 'C' AND start_us <= ? AND start_us + dur_us >= ? AND "
        "(regexp_matches(name, ?) OR regexp_matches(category, ?)) "
        "ORDER BY dur_us DESC LIMIT ?",
        params=[
            low_us,
            low_us,
            high_us,
            low_us,
            high_us,
            low_us,
            events,
            events,
            MAX_EVENTS + 1,
        ],
    ).df()
    if system.empty and framework.empty:
        warn_if_outside_the_data(con, start_timestamp, end_timestamp, low_us, high_us)
    if len(framework) > MAX_EVENTS:
        logger.warning(
            "More than %d framework events in the window: drawing the %d longest. "
            "Narrow the window or select_events to see them all.",
            MAX_EVENTS,
            MAX_EVENTS,
        )
        framework = framework.head(MAX_EVENTS)

    kinds = sorted(system["type"].unique(), key=lambda kind: (_KIND_ORDER.get(kind, 99), kind))
    events_row = len(kinds) + 1
    figure = make_subplots(
        rows=events_row,
        cols=1,
        shared_xaxes=True,
        row_heights=[0.55 / len(kinds)] * len(kinds) + [0.45] if kinds else None,
        vertical_spacing=0.06 / max(1, len(kinds)),
        subplot_titles=[f"System metrics: {kind}" for kind in kinds] + ["Framework events"],
    )
    for row, kind in enumerate(kinds, start=1):
        lines = system[system["type"] == kind].groupby(["node", "dimension", "name"], sort=True)
        for (node, dimension, name), line in lines:
            label = f"{node} {dimension} {name}".replace("  ", " ").strip()
            figure.add_trace(
                go.Scattergl(x=line["t_s"], y=line["value"], mode="lines", name=label),
                row=row,
                col=1,
            )
    for category, bars in framework.groupby("category", sort=True):
        figure.add_trace(
            go.Bar(
                base=bars["t_s"],
                x=bars["dur_s"],
                y=[category] * len(bars),
                orientation="h",
                name=str(category),
                hovertext=bars["name"],
                showlegend=False,
            ),
            row=events_row,
            col=1,
        )
    figure.update_layout(
        title=f"Window {start_us} .. {end_us} µs since the epoch "
        f"({(end_us - start_us) / 1e6:.3f} s)",
        barmode="overlay",
        height=360 + 220 * len(kinds),
    )
    figure.update_xaxes(title_text="seconds since the window start", row=events_row, col=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    if suffix in IMAGE_SUFFIXES:
        require("kaleido", extra=None, feature=f"plot_the_window to {suffix[1:].upper()}")
        figure.write_image(str(path))
    else:
        figure.write_html(str(path), include_plotlyjs=True, full_html=True)
    logger.info(
        "Wrote %s: %d system-metric lines, %d framework events.",
        path,
        system.groupby(["node", "dimension", "name"]).ngroups if len(system) else 0,
        len(framework),
    )
    return path


def _window_us(
    con: duckdb.DuckDBPyConnection, start_timestamp: Any, end_timestamp: Any
) -> tuple[int, int]:
    """The window's bounds in µs since the epoch; a bound that is None is the data's own."""
    bounds = []
    for parameter, timestamp in (
        ("start_timestamp", start_timestamp),
        ("end_timestamp", end_timestamp),
    ):
        if timestamp is not None:
            bounds.append(to_epoch_us(timestamp, f"plot_the_window.{parameter}"))
            continue
        span = data_span_us(con)
        if span is None:
            raise ConfigError(
                f"plot_the_window.{parameter}",
                None,
                "a timestamp",
                "The job holds no data to take the window from.",
            )
        bounds.append(math.floor(span[0]) if parameter == "start_timestamp" else math.ceil(span[1]))
    return bounds[0], bounds[1]
