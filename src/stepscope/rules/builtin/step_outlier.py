"""StepOutlier: steps much slower (or faster) than the others of the same rank and phase.

Reads the job's steps (:mod:`stepscope.rules.steps`: ``Step:ModeKeys.<MODE>`` events, or a
trace's ``ProfilerStep#N`` ranges as TRAIN). Each rank is judged on its own steps, as SageMaker
did (it grouped by node id, ``<rank>-algo-<n>``): pooled with a slower rank of the same node, a
fast rank's spikes would hide inside the spread of the two ranks' step times. For
each (node, rank, mode) it keeps the count, sum and sum of squares of step durations, a duration sketch,
how many steps had each distinct duration (so every outlier is counted, however many there are)
and the 1,000 longest and shortest steps (the outliers it names). An outlier is a step whose
duration differs from the mean by more than ``stddev`` standard deviations (mean and deviation
over every step of that rank and mode seen so far); it triggers when there are more than
``n_outliers`` outliers.

Differences from SageMaker: each outlier is counted once (SageMaker re-added them all in every
window), ``mode`` filters (TRAIN, EVAL, PREDICT or GLOBAL; by default every mode, each judged
apart), TRAIN and EVAL details are kept apart, no hard 100-step minimum, durations in seconds and
labelled so. ``stddev`` defaults to 5 as the AWS documentation says (the code used 3).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from stepscope._natural import natural_key
from stepscope.config.validation import MODES
from stepscope.rules.base import Rule, Verdict, undecided
from stepscope.rules.distribution import IntervalList, QuantileSketch
from stepscope.rules.parameters import Param
from stepscope.rules.window import ScanWindow, split_by
from stepscope.store import layout

__all__ = ["StepOutlier"]

#: Longest and shortest steps kept per (node, rank, mode): the candidates for outliers.
_CANDIDATES = 1000

_STEPS_SQL = """
SELECT node, phase, step, rank, start_us, dur_us FROM (
    SELECT node, rank, start_us, dur_us,
        CASE WHEN category LIKE 'Step:ModeKeys.%' THEN replace(category, 'Step:ModeKeys.', '')
             ELSE 'TRAIN' END AS phase,
        CASE WHEN step >= 0 THEN step
             ELSE coalesce(try_cast(CASE WHEN json_valid(args) THEN json_extract_string(args, '$.step_num') END AS BIGINT),
                           try_cast(regexp_extract(name, '#(\\d+)$', 1) AS BIGINT), -1) END AS step
    FROM {events}
    WHERE ph = 'X' AND {steps}
)
ORDER BY node, rank, phase, start_us
"""


class StepOutlier(Rule):
    description = (
        "Checks for steps whose duration is an outlier: more than stddev standard deviations "
        "away from the mean duration of the steps of the same rank and mode (TRAIN and EVAL are "
        "judged apart). Sudden slow steps come from data stalls, checkpointing, evaluation, "
        "garbage collection, other processes or hardware throttling."
    )
    parameter_specs = {
        "stddev": Param(
            5,
            float,
            "Number of standard deviations from the mean that makes an outlier.",
            minimum=0,
        ),
        "mode": Param(
            None, str, "Only judge steps of this mode (default: every mode, apart).", choices=MODES
        ),
        "n_outliers": Param(10, int, "Outliers tolerated before the rule triggers.", minimum=0),
    }

    def __init__(self, **parameters: object) -> None:
        super().__init__(**parameters)
        self.series: dict[tuple[str, ...], dict[str, Any]] = {}
        #: the modes of steps left out by ``mode``, to name them when no step is left
        self.other_modes: set[str] = set()

    def scan(self, window: ScanWindow) -> None:
        steps = window.query(_STEPS_SQL)
        mode = self.parameters["mode"]
        for key, rows in split_by(steps, "node", "rank", "phase"):
            if mode is not None and key[2] != mode:
                self.other_modes.add(key[2])
                continue
            self._add(key, rows)

    def _add(self, key: tuple[str, ...], rows: dict[str, np.ndarray]) -> None:
        entry = self.series.setdefault(
            key,
            {
                "count": 0,
                "sum": 0.0,
                "sumsq": 0.0,
                "sketch": QuantileSketch(),
                "longest": np.empty((0, 4)),
                "shortest": np.empty((0, 4)),
                "durations": (np.empty(0), np.empty(0, np.int64)),
            },
        )
        dur_s = rows["dur_us"].astype(np.float64) / 1e6
        entry["durations"] = _tally(entry["durations"], dur_s)
        entry["count"] += dur_s.size
        entry["sum"] += float(dur_s.sum())
        entry["sumsq"] += float(np.square(dur_s).sum())
        entry["sketch"].add(dur_s)
        table = np.column_stack(
            [
                dur_s,
                rows["step"].astype(np.float64),
                rows["start_us"].astype(np.float64),
                rows["rank"].astype(np.float64),
            ]
        )
        entry["longest"] = _extreme(np.concatenate([entry["longest"], table]), longest=True)
        entry["shortest"] = _extreme(np.concatenate([entry["shortest"], table]), longest=False)

    def evaluate(self) -> Verdict:
        if not self.series:
            message = "No step events."
            if self.other_modes:
                message = (
                    f"No {self.parameters['mode']} steps (mode={self.parameters['mode']}); the "
                    f"job's steps are {', '.join(sorted(self.other_modes))}."
                )
            return Verdict(applicable=False, message=message)
        k = self.parameters["stddev"]
        # n durations lie at most sqrt(n - 1) population standard deviations from their mean
        # (Samuelson): a series of k² + 1 steps or fewer cannot hold an outlier
        needed = k * k + 1
        longest = max(entry["count"] for entry in self.series.values())
        if longest <= needed:
            return undecided(
                f"more than {needed:g} steps of one rank and mode (with fewer, no step can lie "
                f"beyond {k:g} standard deviations)",
                f"{longest}",
                ended=self.ended,
                datapoints=sum(entry["count"] for entry in self.series.values()),
            )
        details: dict[str, Any] = {}
        outliers_all: list[tuple[float, float, float, float]] = []
        datapoints = count = 0
        #: the (node id, mode) series too short to hold an outlier, beside longer ones
        unjudged: list[str] = []
        for (node, rank, phase), entry in sorted(
            self.series.items(),
            key=lambda item: (natural_key(item[0][0]), int(item[0][1]), item[0][2]),
        ):
            n = entry["count"]
            datapoints += n
            mean = entry["sum"] / n
            std = math.sqrt(max(0.0, entry["sumsq"] / n - mean * mean))
            high, low = mean + k * std, mean - k * std
            if n >= 2 and std > 0:
                slow = entry["longest"][entry["longest"][:, 0] > high]
                fast = entry["shortest"][entry["shortest"][:, 0] < low]
                found = np.concatenate([slow, fast])
                durations, counts = entry["durations"]
                beyond = int(counts[(durations > high) | (durations < low)].sum())
            else:
                found, beyond = np.empty((0, 4)), 0
            found = found[np.argsort(found[:, 2], kind="stable")]
            outliers_all.extend(map(tuple, found.tolist()))
            count += beyond
            sketch = entry["sketch"]
            if n <= needed:
                unjudged.append(f"{n} {phase} steps of {_node_id(node, int(rank))}")
            details.setdefault(_node_id(node, int(rank)), {})[phase] = {
                "judged": n > needed,
                "step_stats": {
                    "mean": round(mean, 6),
                    "std": round(std, 6),
                    "max": sketch.maximum,
                    "p99": round(sketch.quantile(0.99), 6),
                    "p95": round(sketch.quantile(0.95), 6),
                    "p50": round(sketch.quantile(0.5), 6),
                    "min": sketch.minimum,
                    "unit": "s",
                },
                "steps": n,
                "threshold_s": round(high, 6),
                "number_of_outliers": beyond,
                "outliers": [
                    {"step": int(s), "rank": int(r), "duration_s": round(d, 6), "start_us": int(t)}
                    for d, s, t, r in found.tolist()
                ],
                "histogram_s": sketch.histogram(),
            }
        outliers_all.sort(key=lambda row: row[2])
        intervals = IntervalList(join_gap_us=0)
        for d, _, t, _ in outliers_all:
            intervals.add([t], [t + d * 1e6])
        n_allowed = self.parameters["n_outliers"]
        triggered = count > n_allowed
        # every rank numbers its steps from 0: with several, a step is named with its rank
        several = len({key[:2] for key in self.series}) > 1

        def step_name(step: float, rank: float) -> str:
            return f"{int(step)} of rank {int(rank)}" if several else str(int(step))

        steps_text = ", ".join(step_name(s, r) for _, s, _, r in outliers_all[:12])
        if count > 12:
            steps_text += ", ..."
        message = (
            f"{count} outlier step(s) beyond {k:g} standard deviations in {datapoints} steps"
            + (f" (steps {steps_text})" if count else "")
            + f"; {n_allowed} tolerated."
        )
        if unjudged:
            message += (
                f" Not judged, too few steps (a rank and mode needs more than {needed:g}): "
                + ", ".join(unjudged[:4])
                + (", ..." if len(unjudged) > 4 else ".")
            )
        recommendation = ""
        if triggered:
            worst = max(outliers_all, key=lambda row: row[0])
            outliers = "1 step was an outlier" if count == 1 else f"{count} steps were outliers"
            recommendation = (
                f"{outliers}; the slowest, step {step_name(worst[1], worst[3])}, took "
                f"{worst[0]:.3f} s. Look at what runs at such steps (checkpoints, evaluation, "
                "logging, data-loader restarts, garbage collection) in the timeline, and move it "
                "off the training loop or make it asynchronous."
            )
        return Verdict(
            triggered=triggered,
            violations=count,
            datapoints=datapoints,
            message=message,
            recommendation=recommendation,
            details={"step_details": details},
            intervals=intervals.as_list(),
        )


def _node_id(node: str, rank: int) -> str:
    """The key of a rank's details: SageMaker's node id ``<rank>-<node>``; the node alone when
    the rank is unknown (-1), ``rank <r>`` when the node is (a trace that names no host)."""
    if rank < 0:
        return node
    return layout.node_id_for(rank, node) if node else f"rank {rank}"


def _tally(tally: tuple[np.ndarray, np.ndarray], new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``tally`` (the distinct durations and how many steps had each) with ``new`` added."""
    durations, counts = tally
    merged, inverse = np.unique(np.concatenate([durations, new]), return_inverse=True)
    weights = np.concatenate([counts, np.ones(new.size, np.int64)])
    return merged, np.bincount(inverse, weights=weights, minlength=merged.size).astype(np.int64)


def _extreme(table: np.ndarray, *, longest: bool) -> np.ndarray:
    """The ``_CANDIDATES`` rows with the largest (or smallest) duration, ties broken by start."""
    if len(table) <= _CANDIDATES:
        return table
    order = np.lexsort((table[:, 2], -table[:, 0] if longest else table[:, 0]))
    return table[order[:_CANDIDATES]]
