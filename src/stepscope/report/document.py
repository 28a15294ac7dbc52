"""The profiling report as one self-contained HTML file: sections, figures, CSS and plotly.js inlined.

The file opens from disk with no network access: plotly.js comes from the installed ``plotly``
package, the stylesheet and the chart script from this package's ``assets/``, and the figures are
embedded as JSON. Rule results are read from ``rule-output/`` (or computed when absent).
"""

from __future__ import annotations

import html
import logging
import os
import time
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from stepscope._atomic import refuse_folder, write_atomic
from stepscope._optional import require
from stepscope.errors import ConfigError
from stepscope.report.sections import SECTIONS, ReportContext
from stepscope.report.sections.base import paragraph
from stepscope.rules import BUILTIN_RULES, read_results, run_rules
from stepscope.rules.engine import (
    RuleSession,
    input_name,
    open_input,
    rule_output_dir,
    still_running,
)
from stepscope.rules.status import read_source
from stepscope.store.filesystem import local_output_path

__all__ = ["REPORT_NAME", "import_dependencies", "write_report"]

logger = logging.getLogger(__name__)

#: The report's file name inside ``rule-output/``.
REPORT_NAME = "profiler-report.html"


def import_dependencies() -> None:
    """Import what :func:`write_report` imports on its way (plotly, pandas, the store, the
    analyses), which takes longer than the writing of a short job's report: ``stepscope run``
    does it on a thread while the rules make their final pass, so that the report follows
    them sooner."""
    import pandas  # noqa: F401
    import plotly.offline  # noqa: F401

    import stepscope.analysis
    import stepscope.store.job  # noqa: F401


def write_report(job_or_path: Any, *, output: str | os.PathLike[str] | None = None) -> Path:
    """Write the HTML profiling report of a job and return its path.

    :param job_or_path: a job folder, SageMaker Debugger output, Kineto trace (anything
        ``open_job`` reads) or a ``JobData``.
    :param output: the HTML file to write; default ``<job>/rule-output/profiler-report.html``
        (required for read-only inputs). The rule results are the job's own, in its
        ``rule-output/`` (computed there first when there are none, or, while ``stepscope run``
        still runs the job and its live engine has written none, judged on the data so far
        without writing them), wherever the report goes; a
        read-only input (a trace, an ``s3://`` path) has none, so its results are read beside
        ``output``, in the same folder, and computed there first when there are none or when
        they are another input's.
    """
    plotly = require("plotly.offline", extra="ui", feature="the HTML profiling report")
    job = open_input(job_or_path)
    try:
        own_results_dir: Path | None = rule_output_dir(job, None)
    except ConfigError:  # a read-only input
        own_results_dir = None
    if output is not None:
        # before the rules run: a read-only input's results would be left beside the folder
        target = refuse_folder(local_output_path("output", output))
        results_dir = own_results_dir or target.parent
    elif own_results_dir is not None:
        results_dir = own_results_dir
        target = results_dir / REPORT_NAME
    else:
        raise ConfigError(
            "output",
            None,
            "an HTML file to write the report of a read-only input to",
            f"{job.path} is not a writable job folder.",
            missing=True,
        )
    results = read_results(results_dir)
    if own_results_dir is None and read_source(results_dir) not in (None, input_name(job)):
        # the folder holds another input's results (two traces' reports side by side)
        logger.info("%s holds another input's rule results; computing this one's", results_dir)
        results = {}
    if not results and own_results_dir is not None and still_running(job):
        # the live engine has not written its first verdicts: judge the data so far here,
        # leaving the job's rule-output to the engine
        session = RuleSession(job)
        session.advance()
        results = session.results()
    elif not results:
        # a job's own rule-output is found without a record of the input
        results = run_rules(job, output_dir=results_dir if own_results_dir is None else None)
    context = ReportContext(
        name=str(getattr(job, "name", "") or Path(str(job.path)).name),
        metadata=dict(getattr(job, "metadata", {}) or {}),
        results=_in_registry_order(results),
        job=job,
    )
    page = _page(context, plotly.get_plotlyjs())
    write_atomic(target, page)
    return target


def _in_registry_order(results: dict[str, Any]) -> dict[str, Any]:
    order = {name: i for i, name in enumerate(BUILTIN_RULES)}
    return dict(sorted(results.items(), key=lambda item: (order.get(item[0], len(order)), item[0])))


def _page(context: ReportContext, plotly_js: str) -> str:
    parts = []
    toc = []
    for section_class in SECTIONS:
        section = section_class()
        try:
            body = section.render(context)
        except Exception:
            logger.exception("report section %r failed; it is left out", section.title)
            continue
        if not body:
            # a rule presented here keeps its place, where links to it land, saying why there is
            # nothing to show ("No system metrics.")
            body = "".join(
                paragraph(context.results[rule].message)
                for rule in section.rules
                if rule in context.results
            )
        if not body:
            continue
        toc.append(f'<a href="#{section.anchor}">{html.escape(section.title)}</a>')
        targets = "".join(f'<span id="rule-{html.escape(rule)}"></span>' for rule in section.rules)
        parts.append(
            f'<section class="part" id="{section.anchor}">{targets}'
            f"<h2>{html.escape(section.title)}</h2>{body}</section>"
        )
    assets = resources.files("stepscope.report") / "assets"
    css = (assets / "report.css").read_text(encoding="utf-8")
    script = (assets / "report.js").read_text(encoding="utf-8")
    # NaN (a missing figure) becomes null, which plotly leaves out.
    figures = orjson.dumps(context.figures, option=orjson.OPT_SERIALIZE_NUMPY).decode()
    # every "<" as its JSON escape: "</script>" would end the script, and "<!--<script>" (in an
    # operator's name) would keep it open past its end tag, hiding plotly.js and every chart
    figures = figures.replace("<", "\\u003c")
    created = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    title = f"Profiling report · {context.name}"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{css}</style></head><body>"
        f'<header class="page"><h1>{html.escape(title)}</h1>'
        f"<p>Written by stepscope on {created}. Rules and figures cover the data recorded so far.</p>"
        f'<nav class="toc">{"".join(toc)}</nav></header>'
        f"<main>{''.join(parts)}</main>"
        "<footer>stepscope profiling report — every chart is drawn from data embedded in this file.</footer>"
        f'<script type="application/json" id="figures">{figures}</script>'
        f"<script>{plotly_js}</script><script>{script}</script></body></html>\n"
    )
