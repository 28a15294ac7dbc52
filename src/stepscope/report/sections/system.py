"""System usage statistics per node: the percentile table, a narrative, utilization over time."""

from __future__ import annotations

from typing import Any, Literal

from stepscope._natural import natural_key
from stepscope.report.figures import line_chart
from stepscope.report.sections.base import ReportContext, Section, paragraph, table

__all__ = ["SystemUsage"]

#: The utilization kinds drawn over time, with their labels.
_KINDS: tuple[tuple[Literal["cpu", "gpu"], str], ...] = (("cpu", "CPU"), ("gpu", "GPU"))

#: p95 below this (CPU and GPU) suggests a smaller instance, as in SageMaker's report.
_LOW_PCT = 70


class SystemUsage(Section):
    title = "System usage statistics"
    anchor = "system"
    rules = ("OverallSystemUsage",)

    def render(self, context: ReportContext) -> str | None:
        nodes = context.details("OverallSystemUsage").get("nodes") or {}
        if not nodes:
            return None
        parts = []
        rows = []
        for node, entry in nodes.items():
            metrics: dict[str, Any] = entry.get("metrics", {})
            for label, m in metrics.items():
                rows.append(
                    (
                        node,
                        label,
                        m.get("unit"),
                        m.get("max"),
                        m.get("p99"),
                        m.get("p95"),
                        m.get("p50"),
                        m.get("min"),
                    )
                )
            parts.append(paragraph(_narrative(node, metrics)))
        out = "".join(parts) + table(
            ["Node", "Metric", "Unit", "max", "p99", "p95", "p50", "min"], rows, numeric_from=3
        )
        timeline = self._timeline(context)
        return out + timeline

    def _timeline(self, context: ReportContext) -> str:
        if context.job is None:
            return ""
        from stepscope.analysis import system_utilization_timeline

        frames = {
            kind: system_utilization_timeline(context.job, kind=kind, max_points=300)
            for kind, _ in _KINDS
        }
        # one time axis for both charts and the rules' intervals: each frame's own time_s counts
        # from its first sample, and GPU samples may start later than the CPU's
        origin = context.details("MaxInitializationTime").get("job_start_us") or min(
            (frame["timestamp_us"].min() for frame in frames.values() if len(frame)), default=0
        )
        charts = []
        for kind, label in _KINDS:
            series = {
                f"{node} {label}": (
                    ((group["timestamp_us"] - origin) / 1e6).round(3).tolist(),
                    group["utilization_pct"].round(2).tolist(),
                )
                for node, group in sorted(
                    frames[kind].groupby("node"), key=lambda item: natural_key(str(item[0]))
                )
            }
            charts.append(
                context.chart(
                    line_chart(
                        f"{label} utilization over time",
                        series,
                        "seconds since the job's first data",
                        "%",
                    )
                )
            )
        return f'<div class="split">{"".join(f"<div>{c}</div>" for c in charts if c)}</div>'


def _narrative(node: str, metrics: dict[str, Any]) -> str:
    cpu = metrics.get("CPU", {}).get("p95")
    gpu = metrics.get("GPU", {}).get("p95")
    if cpu is None and gpu is None:
        return f"{node}: no CPU or GPU metrics."
    if cpu is None:  # GPU records alone: their figure is still worth saying
        text = f"On {node} the 95th percentile of GPU utilization is {gpu:.0f} % (no CPU metrics)."
    else:
        text = f"On {node} the 95th percentile of CPU utilization is {cpu:.0f} %"
        if gpu is None:
            return text + " (no GPU metrics)."
        text += f" and of GPU utilization {gpu:.0f} %."
    if cpu is not None and cpu < _LOW_PCT and gpu < _LOW_PCT:
        text += " Both are low: the job could run on a smaller instance or with a larger batch."
    elif gpu < _LOW_PCT:
        text += " The GPUs are not fully used: see the bottleneck and data-loading rules below."
    return text
