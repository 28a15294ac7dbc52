"""BatchSize: CPU, GPU and GPU memory are all lightly used, so the batch could be larger.

Reads, per (node, GPU) and snapshot, the GPU's utilization and memory utilization and the node's
mean CPU utilization. After each GPU's first ``patience`` snapshots the series is cut into blocks
of ``window`` snapshots; a block is a violation when the p95 of CPU, GPU and GPU memory are all
below their thresholds. A GPU without memory metrics is judged on CPU and utilization alone.
Differences from SageMaker: the memory box plot uses the memory quartiles (SageMaker used the
utilization p25 for its IQR), blocks are judged once each, and ``patience`` defaults to 100 as
the AWS documentation says (the code used 1000).
"""

from __future__ import annotations

from typing import Any

import numpy as np

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
            for block in self.blocks.feed((node, gpu), series):
                self._judge((node, gpu), block)
        snapshots = window.snapshots()
        for (node,), rows in split_by(snapshots, "node"):
            self._sketch(f"{node}/CPU").add(rows["cpu_mean_pct"])

    def _sketch(self, name: str) -> QuantileSketch:
        return self.sketches.setdefault(name, QuantileSketch())

    def _judge(self, key: tuple[str, ...], block: np.ndarray) -> None:
        p = self.parameters
        util95, mem95, cpu95 = (_p95(block[:, i]) for i in (1, 2, 3))
        light = (
            cpu95 < p["cpu_threshold_p95"]
            and util95 < p["gpu_threshold_p95"]
            and (np.isnan(mem95) or mem95 < p["gpu_memory_threshold_p95"])
        )
        entry = self.judged.setdefault(key, {"blocks": 0, "violations": 0})
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
            self.intervals.add([block[0, 0]], [block[-1, 0]])

    def evaluate(self) -> Verdict:
        gpu_keys = sorted(self.judged)
        if not any(not name.endswith(("_memory", "/CPU")) for name in self.sketches):
            return Verdict(applicable=False, message="No GPU utilization metrics.")
        boxes = {
            name: box_stats(sketch)
            for name, sketch in sorted(self.sketches.items())
            if sketch.count
        }
        datapoints = sum(e["blocks"] for e in self.judged.values())
        violations = sum(e["violations"] for e in self.judged.values())
        flagged = [k for k in gpu_keys if self.judged[k]["violations"]]
        details = {
            "boxes": boxes,
            "gpus": {"/".join(k): self.judged[k] for k in gpu_keys},
            "flagged": ["/".join(k) for k in flagged],
        }
        if datapoints == 0:
            p = self.parameters
            return undecided(
                f"{p['patience']} + {p['window']} snapshots per GPU (patience + a block)",
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
        first = self.judged[flagged[0]]  # figures of its last light block
        memory = first["light_memory_p95"]
        figures = (
            f"p95 GPU utilization {first['light_gpu_p95']:.0f} %, "
            + (f"GPU memory {memory:.0f} %, " if np.isfinite(memory) else "")
            + f"CPU {first['light_cpu_p95']:.0f} %"
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
            intervals=self.intervals.as_list(),
        )


def _p95(values: np.ndarray) -> float:
    values = values[~np.isnan(values)]
    return float(np.percentile(values, 95)) if values.size else float("nan")


def _r(value: float) -> float:
    return round(value, 2) if np.isfinite(value) else float("nan")
