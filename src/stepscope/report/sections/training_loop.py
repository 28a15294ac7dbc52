"""Analyzing the training loop: one subsection per rule with its charts and figures.

Built-in rules have a view in ``RULE_VIEWS``; any other rule (a user's) gets the generic view:
its message, recommendation and violation intervals.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

from stepscope.report.figures import bar_histogram, box_plots, pie, stacked_histograms
from stepscope.report.sections.base import (
    ReportContext,
    Section,
    entries_table,
    fmt,
    paragraph,
    table,
    time_unit,
)
from stepscope.store import layout

__all__ = ["RULE_VIEWS", "TrainingLoop"]

View = Callable[[ReportContext, Any], str]

#: Rules shown elsewhere (job summary, system usage, framework metrics) or aggregating others.
_ELSEWHERE = (
    "MaxInitializationTime",
    "OverallSystemUsage",
    "OverallFrameworkMetrics",
    "ProfilerReport",
)


def _rank_label(node_id: str) -> str:
    """``algo-1 · rank 0`` for the node id ``0-algo-1``; other ids as they are."""
    parsed = layout.parse_node_id(node_id)
    return node_id if parsed is None else f"{parsed[1]} · rank {parsed[0]}"


def _step_outlier(context: ReportContext, result: Any) -> str:
    out = []
    for node_id, phases in result.details.get("step_details", {}).items():
        node = _rank_label(node_id)
        for phase, d in phases.items():
            stats = d.get("step_stats", {})
            judged = d.get("judged", True)  # results written before the rule said so were
            out.append(
                f"<h4>{html.escape(node)} · {html.escape(phase)}: {d.get('steps', 0):,} steps</h4>"
            )
            figures = ("mean", "std", "max", "p99", "p95", "p50", "min")
            unit, scale = time_unit(stats.get("max") or 0.0)
            out.append(
                table(
                    [f"{name} ({unit})" for name in figures] + ["outliers"],
                    [
                        [_scaled(stats.get(name), scale) for name in figures]
                        + [d.get("number_of_outliers") if judged else None]
                    ],
                    numeric_from=0,
                )
            )
            if not judged:
                out.append(
                    paragraph(
                        f"Not judged: in {d.get('steps', 0):,} steps none can lie beyond "
                        f"{result.parameters.get('stddev', 5):g} standard deviations.",
                        "muted",
                    )
                )
            histogram = d.get("histogram_s", {})
            threshold = (
                f" (threshold {fmt(d.get('threshold_s', 0) * scale)} {unit})" if judged else ""
            )
            out.append(
                context.chart(
                    bar_histogram(
                        f"Step durations, {node} {phase}{threshold}",
                        [edge * scale for edge in histogram.get("edges", [])],
                        histogram.get("counts", []),
                        f"step duration ({unit})",
                    ),
                    wide=True,
                )
            )
            outliers = d.get("outliers", [])
            if outliers:
                rows = [(o["step"], o["rank"], o["duration_s"] * scale) for o in outliers[:50]]
                total = d.get("number_of_outliers", len(outliers))
                more = f" (first 50 of {total:,})" if total > 50 else ""
                out.append(
                    f"<h5>Outlier steps{more}</h5>"
                    + table(["Step", "Rank", f"Duration ({unit})"], rows, numeric_from=1)
                )
    return "".join(out)


def _scaled(seconds: float | None, scale: float) -> float | None:
    return None if seconds is None else seconds * scale


def _per_gpu(title: str, fields: dict[str, str]) -> View:
    """The view of a per-GPU rule: box plots of each GPU's samples, then its figures."""

    def view(context: ReportContext, result: Any) -> str:
        gpus = result.details.get("gpus", {})
        chart = context.chart(box_plots(title, gpus, "%"), wide=True)
        return chart + entries_table("GPU", gpus, fields)

    return view


_low_gpu = _per_gpu(
    "GPU utilization per GPU",
    {
        "Blocks": "blocks",
        "Underused": "underused",
        "Fluctuating": "fluctuating",
        "p5 %": "p5",
        "p50 %": "p50",
        "p95 %": "p95",
    },
)

_gpu_memory = _per_gpu(
    "GPU memory utilization per GPU",
    {
        "Blocks": "blocks",
        "Baseline %": "baseline_pct",
        "Last block %": "last_mean_pct",
        "Largest rise (points)": "max_increase_pct",
        "Violations": "violations",
    },
)


def _load_balancing(context: ReportContext, result: Any) -> str:
    d = result.details
    workloads = d.get("workloads", {})
    if len(workloads) < 2:
        return paragraph("Only one GPU: the workload cannot be unbalanced." if workloads else "")
    chart = context.chart(
        stacked_histograms(
            "Utilization histogram per GPU",
            d.get("bin_edges_pct", []),
            workloads,
            "GPU utilization (%)",
        ),
        wide=True,
    )
    medians = d.get("median_distance", {})
    means = d.get("mean_utilization_pct", {})
    rows = [
        (
            name,
            means.get(name),
            medians.get(name),
            "yes" if name in d.get("imbalanced", []) else "no",
        )
        for name in workloads
    ]
    return chart + table(
        ["GPU", "Mean utilization %", "Median JS distance", "Imbalanced"], rows, numeric_from=1
    )


def _dataloader(context: ReportContext, result: Any) -> str:
    d = result.details
    out = entries_table(
        "Node",
        d.get("nodes", {}),
        {
            "Cores": "cores",
            "Parallel loaders (median)": "dataloaders",
            "num_workers": "num_workers",
            "pin_memory": "pin_memory",
            "GetNext share of step %": "getnext_share_of_step_pct",
        },
    )
    getnext = d.get("getnext_ms")
    if getnext:
        histogram = getnext.get("histogram", {})
        out += context.chart(
            bar_histogram(
                f"Data loading time per batch (p50 {getnext['p50']:.1f} ms, p95 {getnext['p95']:.1f} ms)",
                histogram.get("edges", []),
                histogram.get("counts", []),
                "GetNext duration (ms)",
            ),
            wide=True,
        )
    return out


def _batch_size(context: ReportContext, result: Any) -> str:
    boxes = result.details.get("boxes", {})
    cpu = {k: v for k, v in boxes.items() if k.endswith("/CPU")}
    gpu = {k: v for k, v in boxes.items() if not k.endswith(("/CPU", "_memory"))}
    memory = {k.removesuffix("_memory"): v for k, v in boxes.items() if k.endswith("_memory")}
    charts = [
        context.chart(box_plots("CPU utilization", cpu, "%")),
        context.chart(box_plots("GPU utilization", gpu, "%")),
        context.chart(box_plots("GPU memory utilization", memory, "%")),
    ]
    return '<div class="grid">' + "".join(f"<div>{c}</div>" for c in charts if c) + "</div>"


def _bottleneck(context: ReportContext, result: Any) -> str:
    d = result.details
    points = d.get("datapoints", 0)
    hits = d.get("bottlenecks", 0)
    low = d.get("low_gpu_utilization", 0)
    chart = context.chart(
        pie(
            "Snapshots",
            {
                "Bottleneck (low GPU, busy host)": hits,
                "Low GPU, other cause": max(0, low - hits),
                "GPU busy": max(0, points - low),
            },
        )
    )
    nodes = entries_table(
        "Node",
        d.get("nodes", {}),
        {
            "Snapshots": "datapoints",
            "Low GPU": "low_gpu",
            "High host": "high",
            "Bottlenecks": "bottlenecks",
            "Bottleneck %": "bottleneck_pct",
            "Hottest core %": "peak_core_pct",
        },
    )
    return f'<div class="pie-row">{chart}</div>' + nodes


#: Sections of rules that found something come first, rules that could not apply last.
_STATUS_ORDER = {
    "IssuesFound": 0,
    "Error": 1,
    "InProgress": 2,
    "NoIssuesFound": 3,
    "NotApplicable": 4,
}

#: rule name -> the view that draws its details
RULE_VIEWS: dict[str, View] = {
    "StepOutlier": _step_outlier,
    "LowGPUUtilization": _low_gpu,
    "LoadBalancing": _load_balancing,
    "Dataloader": _dataloader,
    "BatchSize": _batch_size,
    "CPUBottleneck": _bottleneck,
    "IOBottleneck": _bottleneck,
    "GPUMemoryIncrease": _gpu_memory,
}


class TrainingLoop(Section):
    title = "Analyzing the training loop"
    anchor = "training-loop"

    def render(self, context: ReportContext) -> str | None:
        parts = []
        ordered = sorted(
            context.results.items(), key=lambda item: _STATUS_ORDER.get(item[1].status, 9)
        )
        for name, result in ordered:
            if name in _ELSEWHERE:
                continue
            view = RULE_VIEWS.get(name)
            # an undecided rule (too little data) still shows what it measured
            body = (
                view(context, result)
                if view is not None and result.status != "Error" and result.details
                else ""
            )
            badge = f'<span class="badge {result.status}">{result.status}</span>'
            recommendation = (
                f'<div class="recommendation"><strong>Recommendation.</strong> {html.escape(result.recommendation)}</div>'
                if result.recommendation
                else ""
            )
            intervals = ""
            if result.intervals:
                intervals = paragraph(f"{len(result.intervals)} violation interval(s).", "muted")
            parts.append(
                f'<section class="rule" id="rule-{html.escape(name)}"><h3>{html.escape(name)} {badge}</h3>'
                f"{paragraph(result.description, 'muted')}{paragraph(result.message)}{recommendation}{body}{intervals}</section>"
            )
        return "".join(parts) or None
