"""Training job summary: start, end, initialization, training loop and finalization (with a pie)."""

from __future__ import annotations

import time

from stepscope._natural import natural_key
from stepscope.report.figures import pie
from stepscope.report.sections.base import ReportContext, Section, paragraph, table

__all__ = ["JobSummary"]


def _when(us: float | None) -> str:
    if not us:
        return "–"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(us / 1e6))


class JobSummary(Section):
    title = "Training job summary"
    anchor = "summary"
    rules = ("MaxInitializationTime",)

    def render(self, context: ReportContext) -> str | None:
        d = context.details("MaxInitializationTime")
        meta = context.metadata
        start = d.get("job_start_us") or meta.get("start_time_us")
        end = d.get("job_end_us") or meta.get("end_time_us")
        if not start:
            return None
        rows = [
            ("Job", context.name),
            ("Status", meta.get("status", "–")),
            ("Start time", _when(start)),
            ("End time", _when(end)),
            ("Job duration (s)", d.get("job_duration_s")),
            ("Training loop start", _when(d.get("training_loop_start_us"))),
            ("Training loop end", _when(d.get("training_loop_end_us"))),
            ("Training loop duration (s)", d.get("training_loop_s")),
            ("Initialization time (s)", d.get("initialization_s")),
            ("Finalization time (s)", d.get("finalization_s")),
            ("Initialization (%)", d.get("initialization_pct")),
            ("Training loop (%)", d.get("training_loop_pct")),
            ("Finalization (%)", d.get("finalization_pct")),
            (_steps_label(d.get("step_ranks") or 1), d.get("steps")),
        ]
        hardware = meta.get("hardware") or {}
        for node, info in sorted(hardware.items(), key=lambda item: natural_key(item[0])):
            gpus = info.get("gpus") or []
            rows.append(
                (f"Hardware {node}", f"{info.get('cpu_count', '?')} cores, {len(gpus)} GPU(s)")
            )
        rows = [(k, v) for k, v in rows if v is not None]
        # without the job's start (no system metrics) the phases are not measured: a pie of the
        # training loop alone would read as a job that spent all its time training
        chart = (
            context.chart(
                pie(
                    "Job phases",
                    {
                        "Initialization": d["initialization_s"],
                        "Training loop": d.get("training_loop_s", 0),
                        "Finalization": d.get("finalization_s", 0),
                    },
                )
            )
            if "initialization_s" in d
            else ""
        )
        message = context.results.get("MaxInitializationTime")
        note = paragraph(message.message if message is not None else "")
        return f'<div class="split"><div>{table(["", ""], rows, numeric_from=2)}</div><div>{chart}</div></div>{note}'


def _steps_label(ranks: int) -> str:
    """Each rank records its own steps: with several ranks the count is theirs added up."""
    return "Steps" if ranks <= 1 else f"Steps (sum over {ranks} ranks)"
