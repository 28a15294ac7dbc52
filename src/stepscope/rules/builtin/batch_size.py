"""BatchSize: CPU, GPU and GPU memory are all lightly used, so the batch could be larger.

Reads, per (node, GPU) and snapshot, the GPU's utilization and memory utilization and the node's
mean CPU utilization. After each GPU's first ``patience`` snapshots the series is cut into blocks
of ``window`` snapshots; a block is a violation when the p95 of CPU, GPU and GPU memory are all
below their thresholds. A GPU without memory metrics is judged on CPU and utilization alone, and
one on a node without CPU metrics on its utilization and memory alone.
Once the job has ended, a last partial block of at least half a window is judged too, so a job
that ends mid-block is not left unjudged for its last minutes (while it runs, that block's
snapshots are still coming).
Differences from SageMaker: the memory box plot uses the memory quartiles (SageMaker used the
utilization p25 for its IQR), blocks are judged once each, and ``patience`` defaults to 100 as
the AWS documentation says (the code used 1000).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from stepscope._natural import natural_key
from stepscope.rules.base import Rule, Verdict, undecided
from stepscope.rules.distribution import IntervalList, QuantileSketch, SampleBlocks, box_stats
from stepscope.rules.parameters import Param
from stepscope.rules.window import ScanWindow, split_by

__all__ = ["BatchSize"]

_METRICS = ("util_pct", "memory_pct", "cpu_mean_pct")


class BatchSize(Rule):
    description = (
        "Checks whether the GPUs could take a larger batch: when the 95th percentiles of CPU "
        "utilization, GPU utilization and GPU memory utilization all stay below their "
        "thresholds, the job could run with a bigger batch size or on a smaller instance. "
        "Not meaningful for frameworks that reserve most GPU memory up front."
    )
    parameter_specs = {
        "cpu_threshold_p95": Param(
            70, float, "p95 CPU utilization (%) below which CPU is light.", 0, 100
        ),
        "gpu_threshold_p95": Param(
            70, float, "p95 GPU utilization (%) below which a GPU is light.", 0, 100
        ),
        "gpu_memory_threshold_p95": Param(
            70, float, "p95 GPU memory utilization (%) below which memory is light.", 0, 100
        ),
        "patience": Param(100, int, "Snapshots of each GPU skipped at the start.", minimum=0),
        "window": Param(500, int, "Snapshots per judged block.", minimum=1),
    }

    def __init__(self, **parameters: object) -> None:
        super().__init__(**parameters)
        p = self.parameters
        self.blocks = SampleBlocks(p["window"], p["patience"])
        self.sketches: dict[str, QuantileSketch] = {}
        self.judged: dict[tuple[str, ...], dict[str, Any]] = {}
        self.intervals = IntervalList(join_gap_us=0)

    def scan(self, window: ScanWindow) -> None:
        for (node, gpu), rows in split_by(window.gpu_samples(), "node", "gpu"):
            if np.isnan(rows["util_pct"]).all():
                continue
            self._sketch(f"{node}/{gpu}").add(rows["util_pct"])
            self._sketch(f"{node}/{gpu}_memory").add(rows["memory_pct"])
            series = np.column_stack([rows["snapshot_us"], *(rows[m] for m in _METRICS)])
            entry = self.judged.setdefault((node, gpu), {"blocks": 0, "violations": 0})
            for block in self.blocks.feed((node, gpu), series):
                if self._judge(entry, block):
                    self.intervals.add([block[0, 0]], [block[-1, 0]])
        snapshots = window.snapshots()
        for (node,), rows in split_by(snapshots, "node"):
            self._sketch(f"{node}/CPU").add(rows["cpu_mean_pct"])

    def _sketch(self, name: str) -> QuantileSketch:
        return self.sketches.setdefault(name, QuantileSketch())

    def _judge(self, entry: dict[str, Any], block: np.ndarray) -> bool:
        """Judge one block into ``entry``: the counts, and the figures of the last light block
        (those a message quotes); True when the block is light."""
        p = self.parameters
        util95, mem95, cpu95 = (_p95(block[:, i]) for i in (1, 2, 3))
        light = (
            (np.isnan(cpu95) or cpu95 < p["cpu_threshold_p95"])
            and util95 < p["gpu_threshold_p95"]
            and (np.isnan(mem95) or mem95 < p["gpu_memory_threshold_p95"])
        )
        entry["blocks"] += 1
        entry.update(
            {"last_cpu_p95": _r(cpu95), "last_gpu_p95": _r(util95), "last_memory_p95": _r(mem95)}
        )
        if light:
            entry["violations"] += 1
            entry.update(
                {
                    "light_cpu_p95": _r(cpu95),
                    "light_gpu_p95": _r(util95),
                    "light_memory_p95": _r(mem95),
                }
            )
        return bool(light)

    def evaluate(self) -> Verdict:
        if not any(not name.endswith(("_memory", "/CPU")) for name in self.sketches):
            return Verdict(applicable=False, message="No GPU utilization metrics.")
        judged = {key: dict(entry) for key, entry in self.judged.items()}
        intervals = copy.deepcopy(self.intervals)
        for key, entry in judged.items():
            tail = self.blocks.last_block(key) if self.ended else None
            if tail is not None and self._judge(entry, tail):
                intervals.add([tail[0, 0]], [tail[-1, 0]])
        gpu_keys = sorted(
            (key for key, entry in judged.items() if entry["blocks"]),
            key=lambda key: natural_key("/".join(key)),
        )
        boxes = {
            name: box_stats(sketch)
            for name, sketch in sorted(self.sketches.items(), key=lambda item: natural_key(item[0]))
            if sketch.count
        }
        datapoints = sum(e["blocks"] for e in judged.values())
        violations = sum(e["violations"] for e in judged.values())
        flagged = [k for k in gpu_keys if judged[k]["violations"]]
        details = {
            "boxes": boxes,
            "gpus": {"/".join(k): judged[k] for k in gpu_keys},
            "flagged": ["/".join(k) for k in flagged],
        }
        if datapoints == 0:
            p = self.parameters
            # once the job ended, a last partial block of half a window is judged too
            needed, block = (
                (self.blocks.last_size, "half a block") if self.ended else (p["window"], "a block")
            )
            return undecided(
                f"{p['patience']} + {needed} snapshots per GPU (patience + {block})",
                f"{max(self.blocks.seen.values(), default=0)}",
                ended=self.ended,
                details=details,
            )
        if not flagged:
            return Verdict(
                datapoints=datapoints,
                details=details,
                message=f"No block with CPU, GPU and GPU memory all light ({datapoints} blocks).",
            )
        first = judged[flagged[0]]  # figures of its last light block
        figures = ", ".join(
            f"{label} {first[key]:.0f} %"
            for label, key in (
                ("p95 GPU utilization", "light_gpu_p95"),
                ("GPU memory", "light_memory_p95"),
                ("CPU", "light_cpu_p95"),
            )
            if np.isfinite(first[key])  # a metric the job did not record
        )
        return Verdict(
            triggered=True,
            violations=violations,
            datapoints=datapoints,
            message=f"{len(flagged)} GPU(s) lightly used in {violations} blocks ({figures} on "
            f"{'/'.join(flagged[0])}).",
            recommendation=f"With {figures}, the job can likely double its batch size (scale "
            "the learning rate with it) or run on a smaller instance. Watch the data loader: a "
            "bigger batch needs more preprocessing per step.",
            details=details,
            intervals=intervals.as_list(),
        )


def _p95(values: np.ndarray) -> float:
    values = values[~np.isnan(values)]
    return float(np.percentile(values, 95)) if values.size else float("nan")


def _r(value: float) -> float:
    return round(value, 2) if np.isfinite(value) else float("nan")
