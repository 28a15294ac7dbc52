"""Rules summary: every rule's verdict, sorted by how much it found."""

from __future__ import annotations

import html

from stepscope.report.figures import intervals_chart
from stepscope.report.sections.base import ReportContext, Section, fmt

__all__ = ["RulesSummary"]

#: Summaries, not checks: shown in their own sections, not in the summary (as in SageMaker).
_NOT_CHECKS = ("OverallSystemUsage", "OverallFrameworkMetrics", "ProfilerReport")


class RulesSummary(Section):
    title = "Rules summary"
    anchor = "rules"
    rules = ("ProfilerReport",)

    def render(self, context: ReportContext) -> str | None:
        results = [r for name, r in context.results.items() if name not in _NOT_CHECKS]
        if not results:
            return None
        results.sort(key=lambda r: (-(r.violations if r.triggered else 0), r.rule))
        found = sum(1 for r in results if r.triggered)
        rows = []
        for r in results:
            parameters = "<br>".join(
                f"{html.escape(k)}: {_parameter(v)}" for k, v in r.parameters.items()
            )
            recommendation = html.escape(r.recommendation) if r.recommendation else "–"
            rows.append(
                f'<tr class="{r.status}"><td><a href="#rule-{r.rule}">{html.escape(r.rule)}</a>'
                f'<div class="badge {r.status}">{r.status}</div></td>'
                f'<td>{html.escape(r.description)}<div class="muted">{html.escape(r.message)}</div></td>'
                f"<td>{recommendation}</td>"
                f'<td class="num">{fmt(r.violations if r.triggered else 0)}</td>'
                f'<td class="num">{fmt(r.datapoints)}</td>'
                f'<td class="params">{parameters}</td></tr>'
            )
        head = (
            "<thead><tr><th>Rule</th><th>Description</th><th>Recommendation</th>"
            '<th class="num">Triggers</th><th class="num">Datapoints</th><th>Parameters</th></tr></thead>'
        )
        intro = f"<p>{found} of the {len(results)} rules below found issues.</p>"
        origin = context.details("MaxInitializationTime").get("job_start_us") or min(
            (i[0] for r in results for i in r.intervals), default=0
        )
        timeline = context.chart(
            intervals_chart(
                "When the rules found issues",
                {r.rule: r.intervals for r in results if r.triggered},
                origin,
            ),
            wide=True,
        )
        return f'{intro}<table class="rules">{head}<tbody>{"".join(rows)}</tbody></table>{timeline}'


def _parameter(value: object) -> str:
    """A parameter as it was set: all its digits (a threshold of 0.125 is not 0.12), a whole
    number without decimals whether given as 90 or 90.0."""
    return f"{value:,.10g}" if isinstance(value, float) else fmt(value)
