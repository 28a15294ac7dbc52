"""Framework metrics summary: where the training loop's time went (pies; operator tables and pies)."""

from __future__ import annotations

from typing import Any

from stepscope.report.figures import pie
from stepscope.report.sections.base import ReportContext, Section, table, time_unit

__all__ = ["FrameworkMetrics"]


class FrameworkMetrics(Section):
    title = "Framework metrics summary"
    anchor = "framework"
    rules = ("OverallFrameworkMetrics",)

    def render(self, context: ReportContext) -> str | None:
        d = context.details("OverallFrameworkMetrics")
        if not d:
            return None
        charts = [
            context.chart(pie("Steps versus time between steps (s)", d.get("phase", {}))),
            context.chart(pie("Forward versus backward pass (s)", d.get("forward_backward", {}))),
            context.chart(pie("CPU versus GPU operators (s)", d.get("ratio", {}))),
            context.chart(pie("Other framework operations (s)", d.get("general", {}))),
            context.chart(pie(_collectives_title(d), d.get("horovod", {}))),
        ]
        grid = '<div class="grid">' + "".join(f"<div>{c}</div>" for c in charts if c) + "</div>"
        tables = []
        for key, title in (("CPU", "Overview: CPU operators"), ("GPU", "Overview: GPU operators")):
            operators = d.get(key, [])
            if not operators:
                continue
            unit, scale = time_unit(max(r["total_s"] for r in operators))
            rows = [(r["name"], r["count"], r["total_s"] * scale, r["pct"]) for r in operators]
            chart = context.chart(pie(f"{title} ({unit})", {r[0]: r[2] for r in rows}))
            tables.append(
                f'<h3>{title}</h3><div class="split"><div>'
                + table(["Operator", "Calls", f"Total ({unit})", "%"], rows)
                + f"</div><div>{chart}</div></div>"
            )
        return grid + "".join(tables)


def _collectives_title(details: dict[str, Any]) -> str:
    """The collectives pie's title, with the kind of time it shows (results written before the
    rule named it have none)."""
    time = details.get("collective_time")
    return f"Collective communication, {time} (s)" if time else "Collective communication (s)"
