"""The report-section family: what a section receives, what it returns, and its HTML pieces.

A section is a :class:`Section` subclass with a ``title`` and one method, :meth:`Section.render`,
that returns an HTML fragment or None (nothing to show). Charts are registered on the
:class:`ReportContext`, which numbers them; the page script draws each one with plotly.js.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = ["ReportContext", "Section", "fmt", "paragraph", "table", "time_unit"]


@dataclass
class ReportContext:
    """What every section may read: the job, its rule results, and the charts drawn so far.

    :param name: the job's name.
    :param metadata: ``job.json`` contents (empty for traces and SageMaker outputs).
    :param results: rule results by rule name.
    :param job: the JobData, for sections that query data (kernel summaries); may be None.
    """

    name: str
    metadata: dict[str, Any]
    results: dict[str, Any]
    job: Any = None
    figures: list[dict[str, Any]] = field(default_factory=list)

    def chart(self, figure: dict[str, Any] | None, *, wide: bool = False) -> str:
        """A placeholder the page script fills with ``figure``; empty when there is no figure."""
        if figure is None:
            return ""
        self.figures.append(figure)
        css = "chart wide" if wide else "chart"
        return f'<div class="{css}" id="chart-{len(self.figures) - 1}"></div>'

    def details(self, rule: str) -> dict[str, Any]:
        result = self.results.get(rule)
        return dict(result.details) if result is not None else {}


class Section:
    """One part of the report; subclasses set ``title`` and implement :meth:`render`.

    ``rules`` names the rules whose verdict the section presents without a section of their own:
    links to ``#rule-<Rule>`` (the rules summary's, the UI's) land on it.
    """

    title: ClassVar[str] = ""
    anchor: ClassVar[str] = ""
    rules: ClassVar[tuple[str, ...]] = ()

    def render(self, context: ReportContext) -> str | None:
        raise NotImplementedError


def fmt(value: Any, digits: int = 2) -> str:
    """A number for a table cell: thousands separators, ``digits`` decimals, dash for missing."""
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return html.escape(str(value))


def time_unit(longest_s: float) -> tuple[str, float]:
    """The unit of a table of durations and its factor from seconds: milliseconds when every
    duration is under a second (a detailed window's operators, a small model's steps), so that
    they do not all read 0.00 s, and microseconds when every one is under a millisecond (the
    operators of a trace's excerpt), so that they do not all read 0.00 ms."""
    if longest_s < 1e-3:
        return ("µs", 1e6)
    return ("ms", 1e3) if longest_s < 1 else ("s", 1.0)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, numeric_from: int = 1) -> str:
    """An HTML table; cells from column ``numeric_from`` on are right-aligned numbers."""
    head = "".join(
        f'<th class="{"num" if i >= numeric_from else ""}">{html.escape(h)}</th>'
        for i, h in enumerate(headers)
    )
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{fmt(cell)}</td>' if i >= numeric_from else f"<td>{fmt(cell)}</td>"
            for i, cell in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    if not body:
        return ""
    thead = f"<thead><tr>{head}</tr></thead>" if any(headers) else ""
    return f"<table>{thead}<tbody>{''.join(body)}</tbody></table>"


def entries_table(
    entity: str, entries: Mapping[str, Mapping[str, Any]], fields: Mapping[str, str]
) -> str:
    """A table of one row per entry (a node, a GPU): its name, then ``fields`` (header -> key).

    Rule details keep per-entity figures as ``{name: {key: value}}``; this is how they are shown.
    """
    rows = [(name, *(entry.get(key) for key in fields.values())) for name, entry in entries.items()]
    return table([entity, *fields], rows)


def paragraph(text: str, css: str = "") -> str:
    if not text:
        return ""
    cls = f' class="{css}"' if css else ""
    return f"<p{cls}>{html.escape(text)}</p>"
