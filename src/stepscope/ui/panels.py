"""The dashboard's panels: one table from panel name to the aggregate it sends the browser.

Every panel is computed on the server from a loaded job and returns a small JSON-ready dict of
bounded size (a pie has at most ``MAX_K`` + 1 slices, a line at most ``MAX_POINTS`` points per
node, a histogram ``HISTOGRAM_BINS`` bins), so the browser never receives raw events. Payload
kinds, which the front end draws with plotly:

* ``pies``: ``{"pies": [{"title", "labels", "values", "hover", "pct"}], "unit"}``;
* ``lines``: ``{"series": [{"name", "x", "y"}], "start_us", "x_title", "y_title"}``, ``x`` in
  seconds since ``start_us``, the job's time origin, shared by all of its lines charts;
* ``histogram``: ``{"series": [{"name", "counts", "stats"}], "edges", "unit"}``;
* ``bars`` (stacked): ``{"categories", "series": [{"name", "values", "hover"}], "unit"}``.

A panel without data returns ``{"empty": true, "message": ...}`` saying so plainly. A panel that
fails is logged with its traceback and reported as such, and the other panels go on.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any  # Any: the JSON values of an answer

import numpy as np
import pandas as pd

from stepscope import analysis
from stepscope._natural import natural_key
from stepscope.analysis.kernels import KernelOrder
from stepscope.analysis.utilization import DeviceKind
from stepscope.rules.steps import step_conditions_of
from stepscope.store.kineto import is_unix_time
from stepscope.ui.profiles import ProfileJob

__all__ = [
    "DEFAULT_K",
    "HISTOGRAM_BINS",
    "MAX_ANNOTATION_CHARS",
    "MAX_K",
    "MAX_POINTS",
    "PANELS",
    "Panel",
    "PanelQuery",
    "annotation_names",
    "compute_panel",
    "empty",
    "histogram",
]

logger = logging.getLogger(__name__)

DEFAULT_K = 15
MAX_K = 100
#: The longest annotation name a histogram can be asked for (it travels in the URL).
MAX_ANNOTATION_CHARS = 1000
MAX_POINTS = 600
HISTOGRAM_BINS = 40
_LABEL_CHARS = 80
_HOVER_CHARS = 300
_MAX_GROUPS = 8
#: A line's samples this many times further apart than usual leave a gap in it.
_GAP_FACTOR = 10


@dataclass(frozen=True)
class PanelQuery:
    """The validated parameters of one panel request.

    :param k: number of kernels shown as their own slice (1..``MAX_K``).
    :param annotation: the annotation name of a custom histogram.
    """

    k: int = DEFAULT_K
    annotation: str = ""


@dataclass(frozen=True)
class Panel:
    """One dashboard panel: its title, what it computes, and which parameters it reads."""

    title: str
    compute: Callable[[ProfileJob, PanelQuery], dict[str, Any]]
    uses_k: bool = False
    uses_annotation: bool = False


def empty(message: str) -> dict[str, Any]:
    """The payload of a panel with nothing to show, and why."""
    return {"empty": True, "message": message}


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _distinct(labels: list[str]) -> list[str]:
    """``labels`` with a number after each repeat (``name… (2)``): plotly draws the slices of
    one label as one, so kernels whose shortened names match would be summed into one slice."""
    seen: Counter[str] = Counter()
    numbered = []
    for label in labels:
        seen[label] += 1
        numbered.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    return numbered


def _seconds(seconds: float) -> str:
    """Seconds for a hover: 4 decimals, or 4 significant digits below a second, since the
    kernels of a short trace run for microseconds and 4 decimals showed them all as 0."""
    if abs(seconds) >= 1:
        return f"{seconds:,.4f}"
    return str(
        np.format_float_positional(seconds, precision=4, unique=False, fractional=False, trim="-")
    )


def _launches(count: int) -> str:
    """``count`` launches, in the singular for one (a rare kernel is launched once)."""
    return f"{count:,} launch" if count == 1 else f"{count:,} launches"


def _floats(column: pd.Series) -> list[float]:
    """A numeric column as Python floats (a pandas row types its values as any scalar)."""
    values: list[float] = column.astype(float).tolist()
    return values


def _ints(column: pd.Series) -> list[int]:
    """A count column as Python ints."""
    values: list[int] = column.astype("int64").tolist()
    return values


def _pie(
    title: str, labels: list[str], values: list[float], hover: list[str], pct: list[float]
) -> dict[str, Any]:
    """One pie; ``pct`` is each slice's share of the whole the pie describes (shown on it)."""
    return {
        "title": title,
        "labels": labels,
        "values": values,
        "hover": hover,
        "pct": [round(p, 3) for p in pct],
    }


# --- system metrics ----------------------------------------------------------------------------


def _by_node(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame``'s rows with nodes in natural order (``algo-2`` before ``algo-10``), stable."""
    return frame.sort_values(
        "node", key=lambda nodes: nodes.astype(str).map(natural_key), kind="stable"
    )


def _active_time(
    kind: DeviceKind, label: str
) -> Callable[[ProfileJob, PanelQuery], dict[str, Any]]:
    def compute(job: ProfileJob, query: PanelQuery) -> dict[str, Any]:
        frame = analysis.system_active_time(job, kind=kind)
        if frame.empty:
            if kind == "gpu":
                return _kernel_active_time(job)
            return empty(f"No {label} utilization was recorded for this job.")
        frame = _by_node(frame)
        pies = []
        for node, active_s, idle_s, active_n, idle_n, active_pct, samples, devices in zip(
            frame["node"].astype(str),
            _floats(frame["active_device_s"]),
            _floats(frame["idle_device_s"]),
            _ints(frame["active_samples"]),
            _ints(frame["idle_samples"]),
            _floats(frame["active_pct"]),
            _ints(frame["samples"]),
            _ints(frame["devices"]),
            strict=True,
        ):
            values = [active_s, idle_s]
            counts = [active_n, idle_n]
            pct = [active_pct, 100.0 - active_pct]
            hover = [
                f"{state}: {values[i]:,.1f} {label}-seconds ({pct[i]:.1f} %)\n"
                f"{counts[i]:,} of {samples:,} samples, {devices} {label}s"
                for i, state in enumerate(("Active", "Idle"))
            ]
            pies.append(_pie(node, ["Active", "Idle"], values, hover, pct))
        return {"kind": "pies", "pies": pies, "unit": f"{label}-seconds"}

    return compute


def _kernel_active_time(job: ProfileJob) -> dict[str, Any]:
    """GPU active time from kernel activity, for traces without sampled GPU utilization."""
    frame = analysis.gpu_active_time(job)
    if frame.empty:
        return empty("No GPU utilization or GPU kernel activity was recorded for this job.")
    by_rank = frame.groupby("rank", sort=True)[["active_us", "idle_us"]].sum()
    if len(by_rank) > _MAX_GROUPS:
        by_rank = by_rank.sum().to_frame("all ranks").T
    pies = []
    for rank, active_us, idle_us in zip(
        by_rank.index, _floats(by_rank["active_us"]), _floats(by_rank["idle_us"]), strict=True
    ):
        total_us = (active_us + idle_us) or 1.0
        values = [active_us / 1e6, idle_us / 1e6]
        pct = [100.0 * v * 1e6 / total_us for v in values]
        hover = [
            f"{state}: {_seconds(values[i])} GPU-seconds ({pct[i]:.1f} %)"
            for i, state in enumerate(("Active", "Idle"))
        ]
        title = rank if isinstance(rank, str) else f"rank {int(rank)}"
        pies.append(_pie(title, ["Active", "Idle"], values, hover, pct))
    return {
        "kind": "pies",
        "pies": pies,
        "unit": "GPU-seconds",
        "note": "From GPU kernel activity in the trace (the job has no sampled GPU utilization).",
    }


def _time_origin_us(job: ProfileJob) -> float:
    """Where every time axis of the job starts: its start (job.json) or its first record,
    whichever is earlier, so that one x is one instant on all of the job's charts (each chart
    measured from its own first sample, and the GPU line started 200 s after the CPU one at 0)."""
    ((first_sample_us, first_event_us),) = (
        job.connect()
        .execute(
            "SELECT (SELECT min(timestamp_us) FROM system), (SELECT min(start_us) FROM events)"
        )
        .fetchall()
    )
    start_us = job.metadata.get("start_time_us") if isinstance(job.metadata, Mapping) else None
    known = [
        float(t)
        for t in (start_us, first_sample_us, first_event_us)
        if isinstance(t, (int, float)) and not isinstance(t, bool)
    ]
    # a trace cut short keeps its own clock, which is no date: the job's dates come first
    dated = [t for t in known if is_unix_time(t)]
    return min(dated or known) if known else 0.0


def _utilization(
    kind: DeviceKind, label: str
) -> Callable[[ProfileJob, PanelQuery], dict[str, Any]]:
    def compute(job: ProfileJob, query: PanelQuery) -> dict[str, Any]:
        frame = analysis.system_utilization_timeline(job, kind=kind, max_points=MAX_POINTS)
        if frame.empty:
            if kind == "gpu":
                return _kernel_utilization(job)
            return empty(f"No {label} utilization was recorded for this job.")
        origin_us = _time_origin_us(job)
        series = [
            {
                "name": str(node),
                **_broken_at_gaps(
                    [round((float(t) - origin_us) / 1e6, 3) for t in group["timestamp_us"]],
                    [round(float(v), 2) for v in group["utilization_pct"]],
                ),
            }
            for node, group in _by_node(frame).groupby("node", sort=False)
        ]
        return {
            "kind": "lines",
            "series": series,
            "start_us": origin_us,
            "x_title": "time since start (s)",
            "y_title": f"mean {label} utilization (%)",
        }

    return compute


def _broken_at_gaps(x: list[float], y: list[float]) -> dict[str, list[Any]]:
    """A line's ``x`` and ``y``, with a ``None`` in ``y`` where its samples stop for more than
    ``_GAP_FACTOR`` times their usual interval (a monitor that stopped, a job resumed later):
    the chart breaks the line there instead of drawing values nobody measured across the gap."""
    steps = np.diff(x)
    if len(steps) < 2:
        return {"x": x, "y": y}
    gap = _GAP_FACTOR * float(np.median(steps))
    xs: list[float] = [x[0]]
    ys: list[float | None] = [y[0]]
    for i, step in enumerate(steps, start=1):
        if step > gap:
            xs.append(round((x[i - 1] + x[i]) / 2, 3))
            ys.append(None)
        xs.append(x[i])
        ys.append(y[i])
    return {"x": xs, "y": ys}


def _kernel_utilization(job: ProfileJob) -> dict[str, Any]:
    """Mean kernel-busy share of each rank's GPUs over time, at most ``MAX_POINTS`` per rank."""
    frame = analysis.gpu_utilization_timeline(job)
    if frame.empty:
        return empty("No GPU utilization or GPU kernel activity was recorded for this job.")
    t0_us = float(frame["start_us"].min())
    width_us = max(1.0, (float(frame["end_us"].max()) - t0_us) / MAX_POINTS)
    frame = frame.assign(bin=((frame["start_us"] - t0_us) // width_us).astype("int64"))
    if frame["rank"].nunique() > _MAX_GROUPS:
        frame = frame.assign(rank=-1)  # too many ranks for one chart: their mean instead
    means = frame.groupby(["rank", "bin"], sort=True)["utilization"].mean().reset_index()
    origin_us = _time_origin_us(job)
    series = [
        {
            "name": f"rank {rank}" if rank >= 0 else "mean of all ranks",
            "x": [round((t0_us + float(b) * width_us - origin_us) / 1e6, 4) for b in group["bin"]],
            "y": [round(float(u) * 100.0, 2) for u in group["utilization"]],
        }
        for rank, group in means.groupby(means["rank"].astype(int), sort=True)
    ]
    return {
        "kind": "lines",
        "series": series,
        "start_us": origin_us,
        "x_title": "time since start (s)",
        "y_title": "GPU kernel busy time (%)",
        "note": "From GPU kernel activity in the trace (the job has no sampled GPU utilization).",
    }


# --- kernels -----------------------------------------------------------------------------------


def _kernel_pie(
    order_by: KernelOrder, *, with_others: bool
) -> Callable[[ProfileJob, PanelQuery], dict[str, Any]]:
    """Kernel time (``order_by="total"``) or launch counts (``"count"``) as one pie.

    Percentages are of all kernels (time or launches), also when only the top kernels are shown,
    as SageMaker Profiler computes them.
    """

    def compute(job: ProfileJob, query: PanelQuery) -> dict[str, Any]:
        top_k = query.k if with_others else DEFAULT_K
        frame = analysis.kernel_summary(job, top_k=top_k, order_by=order_by)
        frame = frame[frame["count"] > 0]
        if frame.empty:
            return empty("This job has no GPU kernels.")
        column = "total_us" if order_by == "total" else "count"
        grand_total = float(frame[column].sum())
        is_others = frame["name"].astype(str) == "others"
        if not with_others:
            frame, is_others = frame[~is_others], is_others[~is_others]
        labels: list[str] = []
        values: list[float] = []
        hover: list[str] = []
        shares: list[float] = []
        for raw_name, amount, count, kernel_us, others in zip(
            frame["name"].astype(str),
            _floats(frame[column]),
            _ints(frame["count"]),
            _floats(frame["total_us"]),
            is_others,
            strict=True,
        ):
            name = "others" if others else raw_name
            pct = 100.0 * amount / grand_total if grand_total else 0.0
            shares.append(pct)
            labels.append(_short(name, _LABEL_CHARS))
            # the slice's measure and its share, then the other measure
            if order_by == "total":
                values.append(amount / 1e6)
                detail = f"{_seconds(amount / 1e6)} s ({pct:.2f} % of all kernel time)"
                other = _launches(count)
            else:
                values.append(int(amount))
                detail = f"{_launches(int(amount))} ({pct:.2f} % of all launches)"
                other = f"{_seconds(kernel_us / 1e6)} s"
            hover.append(f"{_short(name, _HOVER_CHARS)}\n{detail}\n{other}")
        unit = "s" if order_by == "total" else "launches"
        return {
            "kind": "pies",
            "pies": [_pie("", _distinct(labels), values, hover, shares)],
            "unit": unit,
        }

    return compute


def _share_pie(
    function: Callable[[ProfileJob], pd.DataFrame], label_column: str, what: str
) -> Callable[[ProfileJob, PanelQuery], dict[str, Any]]:
    """A pie of time per category from an analysis returning ``count, total_us, pct``."""

    def compute(job: ProfileJob, query: PanelQuery) -> dict[str, Any]:
        frame = function(job)
        frame = frame[frame["total_us"] > 0]
        if frame.empty:
            return empty(f"This job has no {what} data.")
        total_us = float(frame["total_us"].sum())
        hover: list[str] = []
        shares: list[float] = []
        sizes = _ints(frame["bytes"]) if "bytes" in frame.columns else [None] * len(frame)
        for label, part_us, count, size in zip(
            frame[label_column],
            _floats(frame["total_us"]),
            _ints(frame["count"]),
            sizes,
            strict=True,
        ):
            extra = f", {size:,} bytes" if size is not None else ""
            shares.append(100.0 * part_us / total_us)
            hover.append(
                f"{label}\n{_seconds(part_us / 1e6)} s ({shares[-1]:.2f} %)\n{count:,} events{extra}"
            )
        labels = [str(v) for v in frame[label_column]]
        values = [float(v) / 1e6 for v in frame["total_us"]]
        return {"kind": "pies", "pies": [_pie("", labels, values, hover, shares)], "unit": "s"}

    return compute


# --- steps and annotations ---------------------------------------------------------------------

#: Each step once, in its mode: a trace's ``ProfilerStep#N`` ranges are TRAIN steps on a rank
#: without Step events, and repeat steps a Step event counts on a rank with both (as the rules
#: count them, :mod:`stepscope.rules.steps`).
_STEP_DURATIONS_SQL = """
SELECT CASE WHEN category LIKE 'Step:%' THEN category ELSE 'Step:ModeKeys.TRAIN' END AS series,
       dur_us
FROM events
WHERE ph = 'X' AND dur_us > 0 AND {steps}
"""


def histogram(
    series: dict[str, np.ndarray], *, unit_us: float = 1e3, unit: str = "ms"
) -> dict[str, Any]:
    """Histogram payload of durations (µs) per series, on shared bin edges, in ``unit``."""
    values = [v for v in series.values() if len(v)]
    if not values:
        return empty("No durations to show.")
    everything = np.concatenate(values) / unit_us
    lo, hi = float(everything.min()), float(everything.max())
    if hi <= lo:
        hi = lo + max(abs(lo) * 0.01, 1e-6)
    edges = np.linspace(lo, hi, HISTOGRAM_BINS + 1)
    out = []
    for name, durations_us in series.items():
        if not len(durations_us):
            continue
        scaled = durations_us / unit_us
        counts, _ = np.histogram(scaled, bins=edges)
        out.append(
            {
                "name": name,
                "counts": [int(c) for c in counts],
                "stats": {
                    "count": int(len(scaled)),
                    "mean": float(scaled.mean()),
                    "median": float(np.median(scaled)),
                    "p95": float(np.percentile(scaled, 95)),
                    "min": float(scaled.min()),
                    "max": float(scaled.max()),
                },
            }
        )
    return {"kind": "histogram", "edges": [float(e) for e in edges], "series": out, "unit": unit}


def _step_time(job: ProfileJob, query: PanelQuery) -> dict[str, Any]:
    con = job.connect()
    steps = step_conditions_of(con, "events")["steps"]
    frame = con.execute(_STEP_DURATIONS_SQL.format(steps=steps)).df()
    if frame.empty:
        return empty(
            "This job has no steps: the step time distribution appears once the training "
            "script's steps are recorded."
        )
    groups = {
        str(name).removeprefix("Step:ModeKeys."): group["dur_us"].to_numpy(dtype=float)
        for name, group in frame.groupby("series", sort=True)
    }
    return histogram(groups)


def _annotation_histogram(job: ProfileJob, query: PanelQuery) -> dict[str, Any]:
    frame = analysis.annotation_durations(job, query.annotation)
    if frame.empty:
        return empty(f"No '{query.annotation}' annotations were recorded.")
    payload = histogram({query.annotation: frame["dur_us"].to_numpy(dtype=float)})
    payload["annotation"] = query.annotation
    return payload


def annotation_names(job: ProfileJob) -> list[str]:
    """Names for the custom histogram's drop-down, largest total time first (at most 500).

    Only names a histogram can be asked for: not empty, at most :data:`MAX_ANNOTATION_CHARS`.
    """
    names = (str(name) for name in analysis.annotation_names(job)["name"])
    return [name for name in names if 0 < len(name) <= MAX_ANNOTATION_CHARS][:500]


# step_time_breakdown's identifying columns; every other column is a category of the step
_BREAKDOWN_KEYS = {"rank", "step", "start_us", "duration_us"}


def _step_breakdown(job: ProfileJob, query: PanelQuery) -> dict[str, Any]:
    frame = analysis.step_time_breakdown(job)
    if frame.empty:
        return empty("This job has no steps with kernel-level data to break down.")
    components = [
        c
        for c in frame.columns
        if c not in _BREAKDOWN_KEYS
        and isinstance(dtype := frame[c].dtype, np.dtype)  # an extension dtype is not a step time
        and np.issubdtype(dtype, np.number)
    ]
    means = frame.groupby("rank", sort=True)[components].mean()
    step_us = means.sum(axis=1)
    series = []
    for component in components:
        values_ms = [float(v) / 1e3 for v in means[component]]
        hover = [
            f"rank {rank}: {component} {v:,.3f} ms per step "
            f"({100.0 * v * 1e3 / total if total else 0.0:.1f} %)"
            for rank, v, total in zip(means.index, values_ms, step_us, strict=True)
        ]
        series.append({"name": component.removesuffix("_us"), "values": values_ms, "hover": hover})
    return {
        "kind": "bars",
        "categories": [f"rank {int(r)}" for r in means.index],
        "series": series,
        "unit": "ms per step (mean)",
    }


PANELS: dict[str, Panel] = {
    "gpu_active_time": Panel("GPU active time", _active_time("gpu", "GPU")),
    "gpu_utilization": Panel("GPU utilization over time", _utilization("gpu", "GPU")),
    "cpu_active_time": Panel("CPU active time", _active_time("cpu", "CPU")),
    "cpu_utilization": Panel("CPU utilization over time", _utilization("cpu", "CPU")),
    "kernel_time_all": Panel(
        "Time spent by all GPU kernels", _kernel_pie("total", with_others=True), uses_k=True
    ),
    "kernel_time_top": Panel(
        "Time spent by the top 15 GPU kernels", _kernel_pie("total", with_others=False)
    ),
    "kernel_launches_all": Panel(
        "Launch counts of all GPU kernels", _kernel_pie("count", with_others=True), uses_k=True
    ),
    "kernel_launches_top": Panel(
        "Launch counts of the top 15 GPU kernels", _kernel_pie("count", with_others=False)
    ),
    "step_time": Panel("Step time distribution", _step_time),
    "kernel_precision": Panel(
        "Kernel precision distribution",
        _share_pie(analysis.kernel_precision, "precision", "kernel precision"),
    ),
    "gpu_activity": Panel(
        "GPU activity distribution", _share_pie(analysis.gpu_activity, "activity", "GPU activity")
    ),
    "memory_operations": Panel(
        "GPU memory operations distribution",
        _share_pie(analysis.memory_operations, "kind", "GPU memory operation"),
    ),
    "step_breakdown": Panel("Step time breakdown per rank", _step_breakdown),
    "annotation_histogram": Panel(
        "Custom annotation histogram", _annotation_histogram, uses_annotation=True
    ),
}


def compute_panel(name: str, job: ProfileJob, query: PanelQuery) -> dict[str, Any]:
    """The payload of panel ``name`` for ``job``, titled, or an explanation when it failed."""
    panel = PANELS[name]
    try:
        payload = panel.compute(job, query)
    except Exception:  # one guard per panel: a failing panel must not blank the whole dashboard
        logger.exception("dashboard panel %s failed", name)
        payload = empty("This panel could not be computed; the server log has the details.")
    return {"panel": name, "title": panel.title, "empty": False, **payload}
