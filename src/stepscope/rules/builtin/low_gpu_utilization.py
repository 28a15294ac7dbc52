"""LowGPUUtilization: a GPU is underused (low p95) or fluctuates (high p95, very low p5).

Reads every ``GPUUtilization`` sample per (node, GPU). After skipping each GPU's first
``patience`` samples, the series is cut into consecutive blocks of ``window`` samples and each
block is judged once: *underused* when its p95 is below ``threshold_p95``, *fluctuating* when its
p95 is above ``threshold_p95`` and its p5 below ``threshold_p5`` (as the AWS documentation says;
a p95 exactly at ``threshold_p95`` is neither). A violation is one judged
block; the rule triggers on the first one. Once the job has ended, a last partial block of at
least half a window is judged too, so a short job is not left unjudged by a few samples (while it
runs, that block's samples are still coming). SageMaker re-judged
the last ``window`` samples on every scan, so its counts depended on the scan interval; blocks
make the verdict the same live and offline. Box-plot figures are over all samples of each GPU.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from stepscope._natural import natural_key
from stepscope.rules.base import Rule, Verdict, undecided
from stepscope.rules.distribution import box_stats
from stepscope.rules.gpu_blocks import GpuBlocks, GpuKey
from stepscope.rules.parameters import Param, check_order
from stepscope.rules.window import ScanWindow

__all__ = ["LowGPUUtilization"]


class LowGPUUtilization(Rule):
    description = (
        "Checks each GPU for low or fluctuating utilization: in each block of window samples, a "
        "95th percentile below threshold_p95 means the GPU is underused, and a 95th percentile "
        "above threshold_p95 with a 5th percentile below threshold_p5 means its load fluctuates "
        "(typically a GPU that alternates between work and waiting for data or other workers)."
    )
    parameter_specs = {
        "threshold_p95": Param(
            70, float, "p95 utilization (%) below which a GPU is underused.", 0, 100
        ),
        "threshold_p5": Param(
            10, float, "p5 utilization (%) below which a busy GPU fluctuates.", 0, 100
        ),
        "window": Param(500, int, "Samples per judged block.", minimum=1),
        "patience": Param(1000, int, "Samples of each GPU skipped at the start.", minimum=0),
    }

    def __init__(self, **parameters: object) -> None:
        super().__init__(**parameters)
        p = self.parameters
        # with threshold_p5 above threshold_p95, a GPU steady between them would fluctuate
        check_order("LowGPUUtilization", parameters, p, "threshold_p5", "threshold_p95")
        self.gpus = GpuBlocks(
            "util_pct", window=p["window"], patience=p["patience"], judge=self._record
        )
        self.judged: dict[GpuKey, dict[str, Any]] = {}

    def scan(self, window: ScanWindow) -> None:
        self.gpus.scan(window)

    def _record(self, key: GpuKey, block: np.ndarray) -> bool:
        entry = self.judged.setdefault(key, {"blocks": 0, "underused": 0, "fluctuating": 0})
        return bool(self._judge(entry, block))

    def _judge(self, entry: dict[str, Any], block: np.ndarray) -> str:
        """Judge one block into ``entry``: the counts, and the figures of the last flagged block
        (those a message quotes; the GPU's overall figures may look fine)."""
        p = self.parameters
        p95, p5 = np.percentile(block[:, 1], [95, 5])
        kind = ""
        if p95 < p["threshold_p95"]:
            kind = "underused"
        elif p95 > p["threshold_p95"] and p5 < p["threshold_p5"]:
            kind = "fluctuating"
        entry["blocks"] += 1
        entry["last_p95"], entry["last_p5"] = round(float(p95), 2), round(float(p5), 2)
        if kind:
            entry[kind] += 1
            entry["flagged_p95"], entry["flagged_p5"] = entry["last_p95"], entry["last_p5"]
        return kind

    def evaluate(self) -> Verdict:
        sketches = self.gpus.sketches
        if not sketches:
            return Verdict(applicable=False, message="No GPU utilization metrics.")
        p = self.parameters
        gpus: dict[str, Any] = {}
        violations = datapoints = 0
        flagged = []
        intervals = copy.deepcopy(self.gpus.intervals)
        for key in sorted(sketches, key=lambda key: natural_key("/".join(key))):
            entry = dict(self.judged.get(key, {"blocks": 0, "underused": 0, "fluctuating": 0}))
            tail = self.gpus.blocks.last_block(key) if self.ended else None
            if tail is not None and self._judge(entry, tail):
                intervals.add([tail[0, 0]], [tail[-1, 0]])
            entry.update(box_stats(sketches[key]))
            gpus["/".join(key)] = entry
            datapoints += entry["blocks"]
            bad = entry["underused"] + entry["fluctuating"]
            violations += bad
            if bad:
                flagged.append((key, entry))
        details = {"gpus": gpus, "flagged": ["/".join(k) for k, _ in flagged]}
        if datapoints == 0:
            samples = max(self.gpus.blocks.total(k) for k in sketches)
            # once the job ended, a last partial block of half a window is judged too
            needed, block = (
                (self.gpus.blocks.last_size, "half a block")
                if self.ended
                else (p["window"], "a block")
            )
            return undecided(
                f"{p['patience']} + {needed} samples per GPU (patience + {block})",
                f"{samples}",
                ended=self.ended,
                details=details,
            )
        if not flagged:
            return Verdict(
                datapoints=datapoints,
                details=details,
                message=f"All {len(gpus)} GPUs were well used in {datapoints} judged blocks.",
            )
        parts = []
        for key, entry in flagged:
            what = "underused" if entry["underused"] >= entry["fluctuating"] else "fluctuating"
            parts.append(
                f"{'/'.join(key)} {what} (block p95 {entry['flagged_p95']:.0f} %, "
                f"p5 {entry['flagged_p5']:.0f} %; overall p50 {entry['p50']:.0f} %)"
            )
        names = ", ".join(parts[:8]) + (" ..." if len(parts) > 8 else "")
        message = (
            f"{len(flagged)} of {len(gpus)} GPUs had low or fluctuating utilization in blocks of "
            f"{p['window']} samples: {names}."
        )
        recommendation = (
            f"{names}. If only some GPUs are affected, check the work split between GPUs "
            "(LoadBalancing) and the data each rank gets; if all are, increase the batch size or "
            "the model work per step, or fix input stalls (Dataloader, IOBottleneck), or use "
            "fewer or smaller GPUs."
        )
        return Verdict(
            triggered=True,
            violations=violations,
            datapoints=datapoints,
            message=message,
            recommendation=recommendation,
            details=details,
            intervals=intervals.as_list(),
        )
