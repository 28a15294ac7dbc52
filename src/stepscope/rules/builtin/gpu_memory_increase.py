"""GPUMemoryIncrease: a GPU's memory use grows by more than ``increase`` percentage points.

Reads ``GPUMemoryUtilization`` per (node, GPU). After each GPU's first ``patience`` samples, the
series is cut into blocks of ``window`` samples; a block is a violation when its mean exceeds the
lowest earlier block mean of that GPU (its baseline) by more than ``increase`` points. Once the
job has ended, a last partial block of at least half a window is compared too, so a job that ends
mid-block is not left unjudged for its last minutes (while it runs, that block's samples are still
coming). SageMaker compared a window with the same window shifted by one sample, so it only
caught sharp jumps and never a slow leak; comparing with the baseline catches both. Defaults
follow the AWS documentation (increase 10, patience 100, window 500; the original code used 5,
1000 and 10).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from stepscope._natural import natural_key
from stepscope.rules.base import Rule, Verdict, undecided
from stepscope.rules.distribution import box_stats
from stepscope.rules.gpu_blocks import GpuBlocks, GpuKey
from stepscope.rules.parameters import Param
from stepscope.rules.window import ScanWindow

__all__ = ["GPUMemoryIncrease"]


class GPUMemoryIncrease(Rule):
    description = (
        "Checks whether GPU memory use keeps growing: the mean memory utilization of each block "
        "of window samples is compared with the GPU's lowest earlier block mean, and a rise of "
        "more than increase percentage points is a violation. Growing memory often means tensors "
        "kept alive across steps (losses accumulated with their graph, caches) and ends in an "
        "out-of-memory error."
    )
    parameter_specs = {
        "increase": Param(
            10,
            float,
            "Rise of mean memory utilization (percentage points) that is a violation.",
            0,
            100,
        ),
        "patience": Param(100, int, "Samples of each GPU skipped at the start.", minimum=0),
        "window": Param(500, int, "Samples per compared block.", minimum=1),
    }

    def __init__(self, **parameters: object) -> None:
        super().__init__(**parameters)
        p = self.parameters
        self.gpus = GpuBlocks(
            "memory_pct", window=p["window"], patience=p["patience"], judge=self._record
        )
        self.state: dict[GpuKey, dict[str, Any]] = {}

    def scan(self, window: ScanWindow) -> None:
        self.gpus.scan(window)

    def _record(self, key: GpuKey, block: np.ndarray) -> bool:
        return self._compare(self.state.setdefault(key, _new_entry()), block)

    def _compare(self, entry: dict[str, Any], block: np.ndarray) -> bool:
        """Compare one block with the baseline in ``entry`` and update it; True on a violation."""
        mean = float(block[:, 1].mean())
        violation = False
        entry["blocks"] += 1
        baseline = entry["baseline_pct"]
        if baseline is not None:
            rise = mean - baseline
            if rise > entry["max_increase_pct"]:  # the largest rise, from and to what
                entry["max_increase_pct"] = round(rise, 2)
                entry["rise_from_pct"], entry["rise_to_pct"] = round(baseline, 2), round(mean, 2)
            violation = rise > self.parameters["increase"]
            entry["violations"] += violation
        entry["baseline_pct"] = mean if baseline is None else min(baseline, mean)
        entry["last_mean_pct"] = round(mean, 2)
        return violation

    def evaluate(self) -> Verdict:
        sketches = self.gpus.sketches
        if not sketches:
            return Verdict(applicable=False, message="No GPU memory metrics.")
        p = self.parameters
        gpus: dict[str, Any] = {}
        flagged = []
        intervals = copy.deepcopy(self.gpus.intervals)
        for key in sorted(sketches, key=lambda key: natural_key("/".join(key))):
            entry = dict(self.state.get(key, _new_entry()))
            tail = self.gpus.blocks.last_block(key) if self.ended else None
            if tail is not None and self._compare(entry, tail):
                intervals.add([tail[0, 0]], [tail[-1, 0]])
            if entry["baseline_pct"] is not None:
                entry["baseline_pct"] = round(entry["baseline_pct"], 2)
            if entry["blocks"] < 2:  # no block compared yet: a rise of 0 would read as measured
                entry["max_increase_pct"] = None
            entry.update(box_stats(sketches[key]))
            gpus["/".join(key)] = entry
            if entry["violations"]:
                flagged.append(("/".join(key), entry))
        violations = sum(e["violations"] for _, e in flagged)
        datapoints = sum(e["blocks"] for e in gpus.values())
        details = {"gpus": gpus, "flagged": [name for name, _ in flagged]}
        if not any(entry["blocks"] >= 2 for entry in gpus.values()):
            samples = max(self.gpus.blocks.total(key) for key in sketches)
            # once the job ended, a last partial block of half a window is compared too
            needed = (
                f"{p['window']} + {self.gpus.blocks.last_size} samples per GPU (patience + a "
                "block and half a block"
                if self.ended
                else f"2 x {p['window']} samples per GPU (patience + two blocks"
            )
            return undecided(
                f"{p['patience']} + {needed} to compare)",
                f"{samples}",
                ended=self.ended,
                datapoints=datapoints,
                details=details,
            )
        if not flagged:
            return Verdict(
                datapoints=datapoints,
                details=details,
                message=f"No GPU memory rise above {p['increase']:g} points in {datapoints} blocks.",
            )
        worst_name, worst = max(flagged, key=lambda item: item[1]["max_increase_pct"])
        message = (
            f"GPU memory grew on {len(flagged)} GPU(s); {worst_name} rose "
            f"{worst['max_increase_pct']:.1f} points above its baseline of "
            f"{worst['rise_from_pct']:.1f} % (limit {p['increase']:g})."
        )
        recommendation = (
            f"Memory on {worst_name} rose from {worst['rise_from_pct']:.1f} % to "
            f"{worst['rise_to_pct']:.1f} %. Look for tensors kept across steps (e.g. "
            "accumulating a loss without .item() or .detach()), growing caches or lists of "
            "outputs; if the growth is expected, make sure the peak fits in memory."
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


def _new_entry() -> dict[str, Any]:
    """A GPU's comparisons before its first block."""
    return {"blocks": 0, "violations": 0, "baseline_pct": None, "max_increase_pct": 0.0}
