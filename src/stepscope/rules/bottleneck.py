"""Counting bottleneck snapshots: low GPU utilization while a host metric is high (CPU or I/O wait).

CPUBottleneck and IOBottleneck differ only in the host metric, so they share this tally.

**What "high" means.** A snapshot of one node is *high* when the **mean** of the metric over the
node's cores exceeds the threshold, and *low GPU* when the **mean** utilization over the node's
GPUs is below ``gpu_threshold``. SageMaker used "any single core" and "any single GPU": the Python
main thread keeps one core near 100 % in nearly every training loop, so any-core flagged almost
every snapshot of a CPU-light job, and an idle spare GPU flagged every snapshot. The mean answers
the rule's question -- is the host as a whole saturated while the GPUs wait -- and is what adding
workers or a bigger instance changes. The hottest core is still reported in the details.

Snapshots are grouped per node (see :mod:`stepscope.rules.window`), so several nodes' records
interleaving in time no longer break the count. Only snapshots that hold the host metric are
judged: a node without it (GPU records alone, no I/O wait records) is left out and named, rather
than counted as never bottlenecked, which diluted the share of the nodes that were; a job without
the metric at all is not judged.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stepscope._natural import natural_key
from stepscope.rules.base import Verdict, undecided
from stepscope.rules.distribution import IntervalList

__all__ = ["BottleneckTally"]


class BottleneckTally:
    """Per-node counts of snapshots, low-GPU snapshots and bottleneck snapshots.

    :param metric: the per-snapshot column of the host metric (``"cpu_mean_pct"`` or
        ``"iowait_mean_pct"``), see :meth:`ScanWindow.snapshots`.
    :param interval_gap_us: bottleneck snapshots closer than this form one violation interval.
    """

    def __init__(self, metric: str, interval_gap_us: int) -> None:
        self.metric = metric
        self.per_node: dict[str, dict[str, Any]] = {}
        self.intervals = IntervalList(interval_gap_us)

    def add(self, snapshots: dict[str, np.ndarray], high_pct: float, gpu_low_pct: float) -> None:
        """Count the snapshots of one window that have GPU metrics and the host metric."""
        if len(snapshots["node"]) == 0:
            return
        has_gpu = snapshots["gpus"] > 0
        judged = has_gpu & ~np.isnan(snapshots[self.metric])
        for node in np.unique(snapshots["node"][has_gpu & ~judged]).tolist():
            self._entry(node)["unmeasured"] += int(
                (has_gpu & ~judged & (snapshots["node"] == node)).sum()
            )
        nodes = snapshots["node"][judged]
        times = snapshots["snapshot_us"][judged]
        metric = snapshots[self.metric][judged]
        peak_column = "cpu_max_pct" if self.metric == "cpu_mean_pct" else "iowait_max_pct"
        peak = np.nan_to_num(snapshots[peak_column][judged], nan=0.0)
        low_gpu = snapshots["gpu_mean_pct"][judged] < gpu_low_pct
        bottleneck = low_gpu & (metric > high_pct)
        for node in np.unique(nodes).tolist():
            mine = nodes == node
            entry = self._entry(node)
            entry["cores"] = max(
                entry["cores"], int(snapshots["cores"][judged][mine].max(initial=0))
            )
            entry["gpus"] = max(entry["gpus"], int(snapshots["gpus"][judged][mine].max(initial=0)))
            entry["datapoints"] += int(mine.sum())
            entry["low_gpu"] += int((low_gpu & mine).sum())
            entry["high"] += int(((metric > high_pct) & mine).sum())
            entry["bottlenecks"] += int((bottleneck & mine).sum())
            entry["peak_core_pct"] = max(entry["peak_core_pct"], float(peak[mine].max()))
        hits = np.sort(times[bottleneck])
        self.intervals.add(hits, hits)

    def _entry(self, node: str) -> dict[str, Any]:
        """The counts of ``node``: ``datapoints`` judged snapshots, ``unmeasured`` ones with GPU
        metrics but not the host metric."""
        return self.per_node.setdefault(
            node,
            {
                "datapoints": 0,
                "unmeasured": 0,
                "low_gpu": 0,
                "high": 0,
                "bottlenecks": 0,
                "peak_core_pct": 0.0,
                "cores": 0,
                "gpus": 0,
            },
        )

    @property
    def datapoints(self) -> int:
        return sum(entry["datapoints"] for entry in self.per_node.values())

    @property
    def bottlenecks(self) -> int:
        return sum(entry["bottlenecks"] for entry in self.per_node.values())

    @property
    def low_gpu(self) -> int:
        return sum(entry["low_gpu"] for entry in self.per_node.values())

    def left_out(self) -> list[str]:
        """The nodes with GPU metrics but none of the host metric, which were not judged."""
        return sorted(
            (node for node, entry in self.per_node.items() if not entry["datapoints"]),
            key=natural_key,
        )

    def details(self) -> dict[str, Any]:
        """Per-node counts and percentages of the judged nodes, for the report (a node left out
        has no figures: its 0 % would read as measured)."""
        nodes = {}
        for node, entry in sorted(self.per_node.items(), key=lambda item: natural_key(item[0])):
            if not entry["datapoints"]:
                continue
            points = entry["datapoints"]
            nodes[node] = {
                **entry,
                "bottleneck_pct": round(100.0 * entry["bottlenecks"] / points, 2),
                "low_gpu_pct": round(100.0 * entry["low_gpu"] / points, 2),
            }
        return {
            "nodes": nodes,
            "left_out": self.left_out(),
            "datapoints": self.datapoints,
            "bottlenecks": self.bottlenecks,
            "low_gpu_utilization": self.low_gpu,
        }

    def verdict(
        self, parameters: dict[str, Any], label: str, high_parameter: str, *, ended: bool
    ) -> Verdict:
        """The verdict shared by CPUBottleneck and IOBottleneck (``label`` is "CPU" or "I/O
        wait"); ``ended``: the job's last window was counted, no more snapshots will come."""
        points, hits = self.datapoints, self.bottlenecks
        if not self.per_node:
            return Verdict(applicable=False, message="No GPU metrics.")
        if points == 0:
            return Verdict(applicable=False, message=f"No {label} metrics.")
        if points <= parameters["patience"]:
            return undecided(
                f"more than {parameters['patience']} snapshots (patience)",
                f"{points}",
                ended=ended,
                datapoints=points,
                details=self.details(),
            )
        pct = 100.0 * hits / points
        triggered = pct > parameters["threshold"]
        high = parameters[high_parameter]
        low = parameters["gpu_threshold"]
        message = (
            f"{hits} of {points} snapshots ({pct:.1f} %) had GPUs below {low:g} % while mean "
            f"{label} was above {high:g} % (threshold {parameters['threshold']:g} %)."
        )
        if self.left_out():
            message += f" Not judged, without {label} metrics: {', '.join(self.left_out())}."
        worst_node, worst = max(
            ((node, entry) for node, entry in self.per_node.items() if entry["datapoints"]),
            key=lambda item: item[1]["bottlenecks"] / max(item[1]["datapoints"], 1),
        )
        worst_pct = 100.0 * worst["bottlenecks"] / max(worst["datapoints"], 1)
        figures = (
            f"On {worst_node}, in {worst_pct:.0f} % of the snapshots its {worst['gpus']} GPU(s) "
            f"averaged below {low:g} % utilization while its {worst['cores']} cores averaged "
            f"above {high:g} % {label}."
        )
        if label == "CPU":
            recommendation = (
                f"{figures} The CPU cannot feed the GPUs: move data preprocessing to the GPU or "
                "precompute it, use lighter augmentations, or choose an instance with more CPU "
                "cores per GPU."
            )
        else:
            recommendation = (
                f"{figures} The input pipeline waits on storage: use faster storage or a local "
                "copy of the data, prefetch and cache it, read larger files (e.g. sharded record "
                "files), and raise the data loader's num_workers/prefetch_factor."
            )
        return Verdict(
            triggered=triggered,
            violations=hits,
            datapoints=points,
            message=message,
            recommendation=recommendation,
            details=self.details(),
            intervals=self.intervals.as_list(),
        )
