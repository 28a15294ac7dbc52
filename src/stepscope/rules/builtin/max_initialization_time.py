"""MaxInitializationTime: the first training step comes too late.

Keeps the first and last data timestamps (system samples and events), the start of the first
step and the end of the last one. Triggers when the first step started more than ``threshold``
minutes after the job's first data, or when no step has started ``threshold`` minutes into the
job. Its details (initialization, training loop and finalization times) feed the report's job
summary. The job's start is its first system sample (the monitor starts with the job): without
system metrics (a PyTorch profiler trace, framework data alone) the first recorded event may be
the first step itself, so the initialization is not measured, and the rule says so rather than
report a zero; it still triggers when the first step came more than ``threshold`` minutes after
the first event, a lower bound of the initialization. Unlike SageMaker's, it fires under
ProfilerReport too: the engine gives every rule the same windows and nothing depends on a rule's
private clock.
"""

from __future__ import annotations

import math
from typing import Any

from stepscope.rules.base import Rule, Verdict, undecided
from stepscope.rules.parameters import Param
from stepscope.rules.window import ScanWindow

__all__ = ["MaxInitializationTime"]

_STEP = "ph = 'X' AND {steps}"

_SYSTEM_SQL = "SELECT min(timestamp_us), max(timestamp_us) FROM {system}"

_RANKS_SQL = f"SELECT DISTINCT node, rank FROM {{events}} WHERE {_STEP}"

_EVENTS_SQL = f"""
SELECT min(start_us), max(start_us + dur_us),
    min(start_us) FILTER (WHERE {_STEP}), max(start_us + dur_us) FILTER (WHERE {_STEP}),
    count(*) FILTER (WHERE {_STEP})
FROM {{events}}
"""


class MaxInitializationTime(Rule):
    description = (
        "Checks how long the job takes to start training: the time from the job's first "
        "recorded data to the first training step must stay below threshold minutes. Long "
        "initialization usually comes from downloading or preprocessing data, loading a large "
        "checkpoint, or compiling the model before the loop."
    )
    parameter_specs = {
        "threshold": Param(20, float, "Minutes allowed before the first step.", minimum=0),
    }

    def __init__(self, **parameters: object) -> None:
        super().__init__(**parameters)
        self.bounds: dict[str, float] = {}
        self.steps = 0
        #: the (node, rank) pairs that ran steps: the step count adds up all of them
        self.ranks: set[tuple[str, int]] = set()

    def scan(self, window: ScanWindow) -> None:
        system = window.query_row(_SYSTEM_SQL.format(system=window.system_sql()))
        events = window.query_row(_EVENTS_SQL)
        names = ("sys_first", "sys_last", "ev_first", "ev_last", "step_first", "step_last")
        row = (*system, *events[:-1])
        values = {
            name: math.nan if v is None else float(v) for name, v in zip(names, row, strict=True)
        }
        self.steps += int(events[-1] or 0)
        if events[-1]:
            ranks = window.query(_RANKS_SQL)
            self.ranks.update(zip(ranks["node"].tolist(), ranks["rank"].tolist(), strict=True))
        for name in ("sys_first", "ev_first", "step_first"):
            self._keep(name, values[name], min)
        for name in ("sys_last", "ev_last", "step_last"):
            self._keep(name, values[name], max)

    def _keep(self, name: str, value: float, pick: Any) -> None:
        if math.isnan(value):
            return
        self.bounds[name] = pick(self.bounds.get(name, value), value)

    def evaluate(self) -> Verdict:
        b = self.bounds
        starts = [b[k] for k in ("sys_first", "ev_first") if k in b]
        ends = [b[k] for k in ("sys_last", "ev_last") if k in b]
        if not starts:
            return Verdict(applicable=False, message="No data.")
        limit_us = self.parameters["threshold"] * 60e6
        job_start, job_end = min(starts), max(ends)
        details: dict[str, Any] = {
            "job_start_us": int(job_start),
            "job_end_us": int(job_end),
            "job_duration_s": round((job_end - job_start) / 1e6, 3),
            "steps": self.steps,
            "step_ranks": len(self.ranks),
        }
        if "step_first" not in b:
            waited_min = (job_end - job_start) / 60e6
            if waited_min * 60e6 <= limit_us:
                return undecided(
                    f"a training step, or more than {self.parameters['threshold']:g} min without "
                    "one",
                    f"{waited_min:.1f} min without one",
                    ended=self.ended,
                    details=details,
                )
            return Verdict(
                triggered=True,
                violations=1,
                datapoints=1,
                details=details,
                intervals=[[int(job_start), int(job_end)]],
                message=f"No training step after {waited_min:.1f} min "
                f"(threshold {self.parameters['threshold']:g} min).",
                recommendation=_ADVICE,
            )
        first, last = b["step_first"], b["step_last"]
        total = max(job_end - job_start, 1.0)
        init, loop, final = first - job_start, last - first, max(0.0, job_end - last)
        details.update(
            training_loop_start_us=int(first),
            training_loop_end_us=int(last),
            training_loop_s=round(loop / 1e6, 3),
        )
        measured = "sys_first" in b
        if not measured and init <= limit_us:
            return Verdict(
                applicable=False,
                details=details,
                message="Initialization not measured: without system metrics the job's start "
                "is not recorded.",
            )
        details.update(
            initialization_s=round(init / 1e6, 3),
            finalization_s=round(final / 1e6, 3),
            initialization_pct=round(100 * init / total, 2),
            training_loop_pct=round(100 * loop / total, 2),
            finalization_pct=round(100 * final / total, 2),
        )
        triggered = init > limit_us
        message = (
            f"The first step started {'' if measured else 'at least '}{init / 60e6:.2f} min "
            f"after the job's first data (threshold {self.parameters['threshold']:g} min)."
        )
        return Verdict(
            triggered=triggered,
            violations=int(triggered),
            datapoints=1,
            details=details,
            intervals=[[int(job_start), int(first)]] if triggered else [],
            message=message,
            recommendation=f"Initialization took {init / 60e6:.1f} min. {_ADVICE}"
            if triggered
            else "",
        )


_ADVICE = (
    "Stream the data instead of downloading it all first (or cache it on local disk), "
    "preprocess it once offline, and load checkpoints lazily."
)
