"""OverallSystemUsage: per-node percentiles of CPU, GPU, memory, network and I/O wait; never triggers.

Per node and snapshot: GPU = mean utilization over the node's GPUs, CPU = mean over its cores,
CPU memory = MemoryUsedPercent, GPU memory = mean over its GPUs, network = sum of the training
container's receive and transmit bytes/s, I/O = mean I/O wait over its cores. Each series is
summarised by a quantile sketch (max, p99, p95, p50, min), as SageMaker's table was.
"""

from __future__ import annotations

from typing import Any

from stepscope._natural import natural_key
from stepscope.rules.base import Rule, Verdict
from stepscope.rules.distribution import QuantileSketch
from stepscope.rules.window import ScanWindow, split_by

__all__ = ["OverallSystemUsage"]

#: report label -> (per-snapshot column, unit)
METRICS: dict[str, tuple[str, str]] = {
    "CPU": ("cpu_mean_pct", "%"),
    "CPU memory": ("memory_pct", "%"),
    "GPU": ("gpu_mean_pct", "%"),
    "GPU memory": ("gpu_memory_mean_pct", "%"),
    "I/O": ("iowait_mean_pct", "%"),
    "Network": ("network_bytes_per_s", "bytes/s"),
}


class OverallSystemUsage(Rule):
    description = (
        "Summarises system usage per node: the max, p99, p95, p50 and min of CPU, GPU, CPU "
        "memory, GPU memory, network throughput and I/O wait. It never triggers; it tells "
        "whether the instance is too large or too small for the job."
    )

    def __init__(self, **parameters: object) -> None:
        super().__init__(**parameters)
        self.sketches: dict[tuple[str, str], QuantileSketch] = {}
        self.snapshots = 0
        self.hardware: dict[str, dict[str, int]] = {}

    def scan(self, window: ScanWindow) -> None:
        snapshots = window.snapshots()
        self.snapshots += len(snapshots["node"])
        for (node,), rows in split_by(snapshots, "node"):
            for label, (column, _) in METRICS.items():
                self.sketches.setdefault((node, label), QuantileSketch()).add(rows[column])
            seen = self.hardware.setdefault(node, {"cores": 0, "gpus": 0})
            seen["cores"] = max(seen["cores"], int(rows["cores"].max()))
            seen["gpus"] = max(seen["gpus"], int(rows["gpus"].max()))

    def evaluate(self) -> Verdict:
        if not self.snapshots:
            return Verdict(applicable=False, message="No system metrics.")
        nodes: dict[str, Any] = {}
        for (node, label), sketch in sorted(
            self.sketches.items(), key=lambda item: (natural_key(item[0][0]), item[0][1])
        ):
            if sketch.count:
                nodes.setdefault(node, {"hardware": self.hardware.get(node, {}), "metrics": {}})
                nodes[node]["metrics"][label] = {"unit": METRICS[label][1], **sketch.summary()}
        parts = []
        for node, entry in nodes.items():
            figures = [
                f"p95 {label} {entry['metrics'][label]['p95']:.0f} %"
                for label in ("CPU", "GPU")
                if label in entry["metrics"]
            ]
            parts.append(f"{node}: {', '.join(figures) or 'no CPU or GPU metrics'}")
        return Verdict(
            datapoints=self.snapshots,
            details={"nodes": nodes},
            message="; ".join(parts) + ".",
        )
