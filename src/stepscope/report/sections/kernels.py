"""Kernel-level summaries, when the job holds detailed (Kineto) traces."""

from __future__ import annotations

import logging

from stepscope.report.figures import pie
from stepscope.report.sections.base import ReportContext, Section, table

__all__ = ["Kernels"]

logger = logging.getLogger(__name__)


class Kernels(Section):
    title = "GPU kernels"
    anchor = "kernels"

    def render(self, context: ReportContext) -> str | None:
        if context.job is None:
            return None
        from stepscope.analysis import gpu_activity, kernel_precision, kernel_summary

        kernels = kernel_summary(context.job, top_k=15)
        if kernels.empty:
            return None
        rows = kernels[
            ["name", "count", "total_us", "avg_us", "med_us", "max_us", "pct"]
        ].itertuples(index=False)
        out = table(
            ["Kernel", "Count", "Total (µs)", "Mean (µs)", "Median (µs)", "Max (µs)", "%"],
            list(rows),
        )
        activity = gpu_activity(context.job)
        precision = kernel_precision(context.job)
        charts = [
            context.chart(
                pie(
                    "GPU time by activity (µs)",
                    dict(zip(activity["activity"], activity["total_us"], strict=True)),
                )
            ),
            context.chart(
                pie(
                    "Kernel time by precision (µs)",
                    dict(zip(precision["precision"], precision["total_us"], strict=True)),
                )
            ),
        ]
        return (
            '<div class="grid">' + "".join(f"<div>{c}</div>" for c in charts if c) + "</div>" + out
        )
