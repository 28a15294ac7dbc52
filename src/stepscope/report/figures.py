"""Plotly figure specifications for the report, as plain dicts (no plotly Python objects).

Each function returns ``{"data": [...], "layout": {...}}`` for ``Plotly.newPlot``, or None when
there is nothing to draw, so a section never shows an empty chart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "bar_histogram",
    "box_plots",
    "intervals_chart",
    "line_chart",
    "pie",
    "stacked_histograms",
]

Figure = dict[str, Any]

_FONT = {"family": "-apple-system, BlinkMacSystemFont, 'Segoe UI', Roboto, sans-serif", "size": 12}


def _layout(title: str, **extra: Any) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "title": {"text": title, "font": {"size": 14}, "x": 0, "xanchor": "left"},
        "font": _FONT,
        "margin": {"l": 56, "r": 16, "t": 40, "b": 48},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "height": 320,
        **extra,
    }
    for axis in ("xaxis", "yaxis"):
        layout[axis] = {"automargin": True, **layout.get(axis, {})}
    return layout


def pie(title: str, values: Mapping[str, float]) -> Figure | None:
    """A pie of the positive ``values`` (label -> amount)."""
    items = [(str(k), float(v)) for k, v in values.items() if v and float(v) > 0]
    if not items:
        return None
    return {
        "data": [
            {
                "type": "pie",
                "labels": [k for k, _ in items],
                "values": [v for _, v in items],
                "hole": 0.45,
                "sort": False,
                "textinfo": "percent",
            }
        ],
        "layout": _layout(title, showlegend=True, legend={"orientation": "h", "y": -0.05}),
    }


def bar_histogram(
    title: str, edges: Sequence[float], counts: Sequence[int], x_title: str
) -> Figure | None:
    """A histogram from precomputed bin ``edges`` (n + 1) and ``counts`` (n)."""
    if not counts or sum(counts) == 0 or len(edges) != len(counts) + 1:
        return None
    centers = [(a + b) / 2 for a, b in zip(edges[:-1], edges[1:], strict=True)]
    widths = [b - a for a, b in zip(edges[:-1], edges[1:], strict=True)]
    return {
        "data": [
            {
                "type": "bar",
                "x": centers,
                "y": list(counts),
                "width": widths,
                "marker": {"color": "#4c78a8"},
            }
        ],
        "layout": _layout(
            title,
            xaxis={"title": {"text": x_title}},
            yaxis={"title": {"text": "count"}},
            bargap=0.02,
        ),
    }


def stacked_histograms(
    title: str, edges: Sequence[float], series: Mapping[str, Sequence[float]], x_title: str
) -> Figure | None:
    """One line per series over shared bins (e.g. a utilization histogram per GPU), as shares."""
    traces = []
    centers = [(a + b) / 2 for a, b in zip(edges[:-1], edges[1:], strict=True)]
    for name, counts in series.items():
        total = float(sum(counts))
        if total <= 0:
            continue
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": name,
                "x": centers,
                "y": [100.0 * c / total for c in counts],
                "line": {"shape": "hvh", "width": 1.5},
            }
        )
    if not traces:
        return None
    return {
        "data": traces,
        "layout": _layout(
            title, xaxis={"title": {"text": x_title}}, yaxis={"title": {"text": "% of samples"}}
        ),
    }


def box_plots(title: str, boxes: Mapping[str, Mapping[str, float]], y_title: str) -> Figure | None:
    """Box plots from precomputed figures (``p25, p50, p75, lower, upper, min, max``) per name."""
    traces = []
    for name, box in boxes.items():
        if not box or not box.get("count"):
            continue
        traces.append(
            {
                "type": "box",
                "name": name,
                "q1": [box["p25"]],
                "median": [box["p50"]],
                "q3": [box["p75"]],
                "lowerfence": [box["lower"]],
                "upperfence": [box["upper"]],
                "x": [name],
                "boxpoints": False,
                "marker": {"color": "#4c78a8"},
            }
        )
    if not traces:
        return None
    return {
        "data": traces,
        "layout": _layout(title, showlegend=False, yaxis={"title": {"text": y_title}}),
    }


def line_chart(
    title: str,
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    x_title: str,
    y_title: str,
) -> Figure | None:
    """One line per series: name -> (x values, y values)."""
    traces = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": name,
            "x": list(x),
            "y": list(y),
            "line": {"width": 1.5},
        }
        for name, (x, y) in series.items()
        if len(x)
    ]
    if not traces:
        return None
    return {
        "data": traces,
        "layout": _layout(
            title, xaxis={"title": {"text": x_title}}, yaxis={"title": {"text": y_title}}
        ),
    }


def intervals_chart(
    title: str, rows: Mapping[str, Sequence[Sequence[float]]], origin_us: float
) -> Figure | None:
    """Horizontal bars, one row per name, for ``[start_us, end_us]`` intervals (seconds since
    ``origin_us``); zero-length intervals get a visible minimum width."""
    traces = []
    names = [name for name, intervals in rows.items() if intervals]
    for name in names:
        starts = [(a - origin_us) / 1e6 for a, _ in rows[name]]
        widths = [max((b - a) / 1e6, 0.5) for a, b in rows[name]]
        traces.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": name,
                "y": [name] * len(starts),
                "base": starts,
                "x": widths,
                "marker": {"color": "#b35900"},
                "showlegend": False,
                "hovertemplate": "%{base:.1f} s + %{x:.1f} s<extra>%{y}</extra>",
            }
        )
    if not traces:
        return None
    layout = _layout(
        title, barmode="overlay", xaxis={"title": {"text": "seconds since the job's first data"}}
    )
    layout["height"] = 120 + 36 * len(names)
    return {"data": traces, "layout": layout}
