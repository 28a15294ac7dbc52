"""Dataloader: too few or too many data-loading processes for the node's cores.

Reads the node's core count (distinct ``CPUUtilization`` names), the PyTorch data-loader events
(``DataLoaderWorker`` and ``DataLoaderIter`` GetNext, whose ``worker_id`` names the worker that
made the batch; without one, the event's process id) and
``DataLoaderIterInitialize`` (``num_workers``, ``pin_memory``). Per node and second of data time
it counts the distinct processes loading data: a process loads in every second one of its events
covers, so a worker whose ``DataLoaderWorker`` span lasts the epoch counts in each of its seconds,
not only when a batch of its arrives (with steps longer than a second, at most one batch arrives
per second however many workers prefetch). The rule keeps, per process, the runs of seconds it was
active, merged as spans arrive (a worker's span is written when it ends). A worker's batches
alone, seconds apart, leave one run each until its span arrives (for a persistent worker, at the
end of the job): past :data:`MAX_RUNS` runs of one process, the runs across its shortest gaps
are joined, so the state of a rule that runs for days stays bounded. The worker's span covers
those gaps when it comes, so the verdict is the same; only data without worker spans counts the
joined gaps as loading. It triggers once more
than ``patience`` seconds were seen and the median count is below ``min_threshold`` % or above
``max_threshold`` % of the cores. It also reports GetNext durations (how long the training loop waited for a batch) and
their share of step time: the mean wait per batch over the mean step time, because data-loader
profiling usually covers a few steps (SageMaker's default: step 7) while every step is recorded.
This is SageMaker's twelfth, undocumented rule, with its defaults.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from stepscope._natural import natural_key
from stepscope.rules.base import Rule, Verdict, undecided
from stepscope.rules.distribution import QuantileSketch
from stepscope.rules.parameters import Param, check_order
from stepscope.rules.window import ScanWindow, split_by

__all__ = ["MAX_RUNS", "Dataloader"]

#: The most runs of active seconds kept per loading process (16 bytes each); past it, the runs
#: across the shortest gaps are joined down to half as many.
MAX_RUNS = 1000

# A loading process: the worker a batch came from (GetNext's and DataLoaderWorker's worker_id,
# per rank), else the process id the event was recorded in.
_LOADER = (
    "CAST(rank AS VARCHAR) || ':' || coalesce("
    "'w' || CASE WHEN json_valid(args) THEN json_extract_string(args, '$.worker_id') END, "
    "'p' || CAST(coalesce(try_cast(CASE WHEN json_valid(args) THEN "
    "json_extract_string(args, '$.pid') END AS BIGINT), pid) AS VARCHAR))"
)

# One pass over the window's events: every data-loader event and every step (for the wait share).
_EVENTS_SQL = f"""
SELECT node, rank, category, name, dur_us,
    CAST(floor(start_us / 1e6) AS BIGINT) AS first_second,
    CAST(floor((start_us + dur_us) / 1e6) AS BIGINT) AS last_second,
    CASE WHEN category IN ('DataLoaderWorker', 'DataLoaderIter') THEN {_LOADER} ELSE '' END AS loader,
    CASE WHEN category = 'DataLoaderIterInitialize' THEN args ELSE '' END AS args
FROM {{events}}
WHERE category IN ('DataLoaderWorker', 'DataLoaderIter', 'DataLoaderIterInitialize')
    OR category LIKE 'Step:ModeKeys.%'
ORDER BY start_us
"""


class Dataloader(Rule):
    description = (
        "Checks that the data loader runs enough parallel processes for the node: the median "
        "number of processes loading data at the same time should be between min_threshold % "
        "and max_threshold % of the CPU cores. Too few leaves cores idle while the GPU waits for "
        "batches; too many makes the processes compete for cores and memory."
    )
    parameter_specs = {
        "min_threshold": Param(
            70, float, "Lowest healthy share of cores loading data (%).", minimum=0
        ),
        "max_threshold": Param(
            200, float, "Highest healthy share of cores loading data (%).", minimum=0
        ),
        "patience": Param(
            10, int, "Seconds with data-loading activity before the rule may trigger.", minimum=0
        ),
    }

    def __init__(self, **parameters: object) -> None:
        super().__init__(**parameters)
        # an empty healthy range would flag every node
        check_order("Dataloader", parameters, self.parameters, "min_threshold", "max_threshold")
        #: per node and loading process: the runs of seconds it was active, ``[first, last]``
        self.active: dict[str, dict[str, np.ndarray]] = {}
        self.cores: dict[str, int] = {}
        self.gpus: dict[str, int] = {}
        self.getnext = QuantileSketch()
        #: per node: GetNext time and calls, step time and steps
        self.wait: dict[str, list[float]] = {}
        self.init: dict[str, dict[str, Any]] = {}
        self.ranks: dict[str, set[int]] = {}

    def scan(self, window: ScanWindow) -> None:
        for (node,), rows in split_by(window.snapshots(), "node"):
            self.cores[node] = max(self.cores.get(node, 0), int(rows["cores"].max()))
            self.gpus[node] = max(self.gpus.get(node, 0), int(rows["gpus"].max()))
        events = window.query(_EVENTS_SQL)
        category = events["category"]
        loading = (category == "DataLoaderWorker") | (category == "DataLoaderIter")
        getnext = category == "DataLoaderIter"
        steps = ~loading & (category != "DataLoaderIterInitialize")
        self.getnext.add(events["dur_us"][getnext] / 1e3)
        for node in np.unique(events["node"]).tolist():
            mine = events["node"] == node
            runs = self.active.setdefault(node, {})
            # the ranks that load data share the node's cores, whether or not their loader's
            # initialization was profiled (by default only a step in the epoch is)
            ranks = self.ranks.setdefault(node, set())
            ranks.update(int(rank) for rank in events["rank"][loading & mine].tolist())
            for loader in np.unique(events["loader"][loading & mine]).tolist():
                rows = loading & mine & (events["loader"] == loader)
                new = np.column_stack([events["first_second"][rows], events["last_second"][rows]])
                old = runs.get(loader)
                merged = new if old is None else np.concatenate([old, new])
                runs[loader] = _join_closest(_merge_runs(merged.astype(np.int64)))
            wait = self.wait.setdefault(node, [0.0, 0.0, 0.0, 0.0])
            wait[0] += float(events["dur_us"][getnext & mine].sum())
            wait[1] += float((getnext & mine).sum())
            wait[2] += float(events["dur_us"][steps & mine].sum())
            wait[3] += float((steps & mine).sum())
        init = np.flatnonzero(category == "DataLoaderIterInitialize")
        for index in init.tolist():
            node = str(events["node"][index])
            self.init[node] = {
                "name": str(events["name"][index]),
                **_args(str(events["args"][index])),
            }
            self.ranks.setdefault(node, set()).add(int(events["rank"][index]))

    def evaluate(self) -> Verdict:
        if not any(self.active.values()):
            return Verdict(applicable=False, message="No PyTorch data-loader events.")
        p = self.parameters
        nodes: dict[str, Any] = {}
        problems = []
        datapoints = 0
        for node, runs in sorted(self.active.items(), key=lambda item: natural_key(item[0])):
            if not runs:
                continue
            counts = _seconds_per_count(list(runs.values()))
            buckets = sum(counts.values())
            datapoints += buckets
            median = _median(counts)
            cores = self.cores.get(node, 0)
            init = self.init.get(node, {})
            getnext_us, getnexts, step_us, steps = self.wait.get(node, [0.0, 0.0, 0.0, 0.0])
            entry = {
                "cores": cores,
                "gpus": self.gpus.get(node, 0),
                "dataloaders": median,
                "seconds": buckets,
                "num_workers": init.get("num_workers"),
                "pin_memory": init.get("pin_memory"),
                "loader": init.get("name"),
                "getnext_share_of_step_pct": round(
                    100 * (getnext_us / getnexts) / (step_us / steps), 2
                )
                if getnexts and step_us
                else None,
                "min_dataloaders": round(cores * p["min_threshold"] / 100, 2),
                "max_dataloaders": round(cores * p["max_threshold"] / 100, 2),
            }
            nodes[node] = entry
            if cores and buckets > p["patience"]:
                if median < entry["min_dataloaders"] or median > entry["max_dataloaders"]:
                    problems.append(node)
        details: dict[str, Any] = {"nodes": nodes}
        if self.getnext.count:
            details["getnext_ms"] = {
                "p25": round(self.getnext.quantile(0.25), 3),
                "p50": round(self.getnext.quantile(0.5), 3),
                "p95": round(self.getnext.quantile(0.95), 3),
                "max": round(self.getnext.maximum, 3),
                "count": self.getnext.count,
                "histogram": self.getnext.histogram(),
            }
        if not any(entry["cores"] for entry in nodes.values()):
            return Verdict(
                applicable=False,
                details=details,
                datapoints=datapoints,
                message="No CPU metrics to compare the data-loader processes with.",
            )
        if not any(e["cores"] and e["seconds"] > p["patience"] for e in nodes.values()):
            return undecided(
                f"more than {p['patience']} seconds with data-loading activity on a node with "
                "CPU metrics (patience)",
                f"{max(e['seconds'] for e in nodes.values() if e['cores'])}",
                ended=self.ended,
                datapoints=datapoints,
                details=details,
            )
        summary = "; ".join(_summary(node, entry, p["patience"]) for node, entry in nodes.items())
        if not problems:
            return Verdict(datapoints=datapoints, details=details, message=summary + ".")
        return Verdict(
            triggered=True,
            violations=len(problems),
            datapoints=datapoints,
            details=details,
            message=summary
            + f" (healthy: {p['min_threshold']:g}-{p['max_threshold']:g} % of cores).",
            recommendation=" ".join(self._advice(node, nodes[node]) for node in problems),
        )

    def _advice(self, node: str, entry: dict[str, Any]) -> str:
        ranks = max(1, len(self.ranks.get(node, ())))
        workers = entry["num_workers"]
        cores = entry["cores"]
        wait = entry["getnext_share_of_step_pct"]
        waiting = f" and the loop waited on GetNext for {wait:.0f} % of step time" if wait else ""
        if entry["dataloaders"] < entry["min_dataloaders"]:
            target = max(1, math.ceil(entry["min_dataloaders"] / ranks))
            idle = max(0, cores - int(entry["dataloaders"]))
            verb = "raise"
            text = f"{node}: {idle} of {cores} cores did not load data{waiting}: "
        else:
            target = max(0, math.floor(entry["max_dataloaders"] / ranks))
            verb = "lower"
            text = (
                f"{node}: a median of {entry['dataloaders']:g} processes loaded data on {cores} "
                "cores: "
            )
        # without the loader's initialization profiled, its num_workers is not known
        text += (
            f"{verb} num_workers from {workers} to {target}"
            if workers is not None
            else f"set the DataLoader's num_workers to {target}"
        )
        text += f" per rank ({ranks} rank(s) on the node)." if ranks > 1 else "."
        if entry["pin_memory"] is False and entry["gpus"]:  # nothing to pin for on a CPU node
            text += " Set pin_memory=True to copy batches to the GPU faster."
        return text


def _summary(node: str, entry: dict[str, Any], patience: int) -> str:
    """What one node's data loading was, and why the node was not judged when it was not."""
    text = f"{node}: median {entry['dataloaders']:g} data-loading processes"
    if not entry["cores"]:
        return text + ", not judged (no CPU metrics)"
    text += f" on {entry['cores']} cores"
    if entry["seconds"] <= patience:
        text += f", not judged ({entry['seconds']} seconds of data loading, patience {patience})"
    return text


def _merge_runs(runs: np.ndarray) -> np.ndarray:
    """Inclusive ``[first, last]`` runs of seconds, sorted and joined where they overlap or touch."""
    runs = runs[np.argsort(runs[:, 0], kind="stable")]
    reach = np.maximum.accumulate(runs[:, 1])
    fresh = np.ones(len(runs), dtype=bool)
    fresh[1:] = runs[1:, 0] > reach[:-1] + 1
    return _joined(runs, fresh)


def _join_closest(runs: np.ndarray) -> np.ndarray:
    """Sorted, merged runs, at most :data:`MAX_RUNS` of them: past that, the runs across the
    shortest gaps are joined until half as many are left (so that this happens rarely)."""
    if len(runs) <= MAX_RUNS:
        return runs
    joins = len(runs) - MAX_RUNS // 2
    gaps = runs[1:, 0] - runs[:-1, 1]
    fresh = np.ones(len(runs), dtype=bool)
    fresh[np.argpartition(gaps, joins - 1)[:joins] + 1] = False
    return _joined(runs, fresh)


def _joined(runs: np.ndarray, fresh: np.ndarray) -> np.ndarray:
    """Sorted ``runs`` joined into the ones before them, but for those ``fresh`` marks: each
    fresh run starts a joined one, which reaches as far as the furthest of its runs."""
    starts = np.flatnonzero(fresh)
    return np.column_stack([runs[starts, 0], np.maximum.reduceat(runs[:, 1], starts)])


def _seconds_per_count(runs: list[np.ndarray]) -> dict[int, int]:
    """How many seconds had each number (at least 1) of processes active, given each process's
    merged runs of seconds."""
    table = np.concatenate(runs)
    bounds, at = np.unique(np.concatenate([table[:, 0], table[:, 1] + 1]), return_inverse=True)
    change = np.concatenate([np.ones(len(table)), -np.ones(len(table))])
    active = np.cumsum(np.bincount(at, weights=change))[:-1].round().astype(np.int64)
    seconds = np.bincount(active, weights=np.diff(bounds))
    return {count: int(n) for count, n in enumerate(seconds.tolist()) if count and n}


def _median(counts: dict[int, int]) -> float:
    """The median of a value -> occurrences histogram."""
    values = sorted(counts)
    cumulative = np.cumsum([counts[value] for value in values])

    def at(rank: int) -> int:
        return values[int(np.searchsorted(cumulative, rank, side="right"))]

    total = int(cumulative[-1])
    return (at((total - 1) // 2) + at(total // 2)) / 2


def _args(text: str) -> dict[str, Any]:
    """``num_workers`` and ``pin_memory`` from a DataLoaderIterInitialize event's args."""
    try:
        args = json.loads(text) if text else {}
    except ValueError:
        return {}
    out: dict[str, Any] = {}
    if "num_workers" in args:
        try:
            out["num_workers"] = int(args["num_workers"])
        except (TypeError, ValueError):
            out["num_workers"] = args["num_workers"]
    if "pin_memory" in args:
        out["pin_memory"] = str(args["pin_memory"]).lower() in ("true", "1")
    return out
