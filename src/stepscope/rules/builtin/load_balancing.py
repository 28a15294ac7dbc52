"""LoadBalancing: GPUs of the job carry different workloads.

Reads ``GPUUtilization`` per (node, GPU) into a histogram of 50 bins of 2 % over the full range
0-100 % (100 % included; SageMaker's bins stopped at 98 % and dropped busier samples). Each GPU's
first ``patience`` samples are skipped. Every pair of GPUs, within a node and across nodes, is
compared with the Jensen-Shannon distance (base-2 logarithm, so 0 = same workload, 1 = disjoint);
a pair further apart than ``threshold`` is a violation. GPUs linked by closer pairs form groups
of similar workload; the GPUs outside a group larger than any other are *imbalanced* (with one
GPU at 30 % and seven at 80 % only the first is named), and with no such majority (four at 30 %,
four at 80 %) the message describes the groups. SageMaker's loop never compared two different
GPUs (its inner loop was mis-indented), so it never fired. Defaults: threshold 0.5 and patience
10, as the AWS documentation says (the original code used 0.2 and 1000).
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np

from stepscope._natural import natural_key
from stepscope.rules.base import Rule, Verdict, undecided
from stepscope.rules.parameters import Param
from stepscope.rules.window import ScanWindow, split_by

__all__ = ["LoadBalancing", "js_distance"]

#: 50 bins of 2 % over 0-100; numpy's last bin includes its right edge, so 100 % is counted.
BIN_EDGES_PCT = np.linspace(0.0, 100.0, 51)


def js_distance(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon distance between two histograms (normalised here), base 2, in [0, 1]."""
    p = p / p.sum()
    q = q / q.sum()
    m = 0.5 * (p + q)

    def kl(a: np.ndarray) -> float:
        mask = a > 0
        return float(np.sum(a[mask] * np.log2(a[mask] / m[mask])))

    return float(np.sqrt(max(0.0, 0.5 * kl(p) + 0.5 * kl(q))))


class LoadBalancing(Rule):
    description = (
        "Checks whether all GPUs carry the same workload: the utilization histogram of every GPU "
        "is compared with every other GPU's, within each node and across nodes, using the "
        "Jensen-Shannon distance (0 = identical, 1 = disjoint). A pair further apart than "
        "threshold is a violation; a GPU whose median distance to the others exceeds threshold "
        "is named as imbalanced."
    )
    parameter_specs = {
        "threshold": Param(
            0.5, float, "Jensen-Shannon distance above which two GPUs differ.", 0, 1
        ),
        "patience": Param(10, int, "Samples of each GPU skipped at the start.", minimum=0),
    }

    def __init__(self, **parameters: object) -> None:
        super().__init__(**parameters)
        self.histograms: dict[str, np.ndarray] = {}
        self.seen: dict[str, int] = {}

    def scan(self, window: ScanWindow) -> None:
        for (node, gpu), rows in split_by(window.gpu_samples(), "node", "gpu"):
            util = rows["util_pct"]
            util = util[~np.isnan(util)]
            name = f"{node}/{gpu}"
            seen = self.seen.get(name, 0)
            self.seen[name] = seen + util.size
            util = np.clip(util[max(0, self.parameters["patience"] - seen) :], 0.0, 100.0)
            counts, _ = np.histogram(util, bins=BIN_EDGES_PCT)
            self.histograms[name] = self.histograms.get(name, np.zeros(50, np.int64)) + counts

    def evaluate(self) -> Verdict:
        threshold = self.parameters["threshold"]
        gpus = sorted(
            (name for name, hist in self.histograms.items() if hist.sum() > 0), key=natural_key
        )
        workloads = {name: self.histograms[name].tolist() for name in gpus}
        details: dict[str, Any] = {
            "bin_edges_pct": BIN_EDGES_PCT.tolist(),
            "workloads": workloads,
            "mean_utilization_pct": {
                name: round(
                    float(np.dot(self.histograms[name], BIN_EDGES_PCT[:-1] + 1.0))
                    / float(self.histograms[name].sum()),
                    2,
                )
                for name in gpus
            },
        }
        if len(gpus) < 2 <= len(self.seen):
            return undecided(
                f"more than {self.parameters['patience']} samples of at least two GPUs (patience)",
                f"{max(self.seen.values())}",
                ended=self.ended,
                details=details,
            )
        if len(gpus) < 2:
            message = "Only one GPU: nothing to balance." if gpus else "No GPU utilization metrics."
            return Verdict(applicable=False, message=message, details=details)
        distances: dict[str, float] = {}
        per_gpu: dict[str, list[float]] = {name: [] for name in gpus}
        for a, b in combinations(gpus, 2):
            d = js_distance(self.histograms[a].astype(float), self.histograms[b].astype(float))
            distances[f"{a}|{b}"] = d  # judged as it is; rounded only in the details
            per_gpu[a].append(d)
            per_gpu[b].append(d)
        median = {name: float(np.median(values)) for name, values in per_gpu.items()}
        over = [pair for pair, d in distances.items() if d > threshold]
        groups = _workload_groups(gpus, distances, threshold)
        if len(groups) > 1 and len(groups[0]) > len(groups[1]):
            # a majority shares one workload: the others are the odd ones out
            imbalanced = sorted(set(gpus) - set(groups[0]), key=natural_key)
        elif len(groups) > 1:
            imbalanced = list(gpus)  # no majority: every GPU is on one side of the split
        else:
            imbalanced = [name for name in gpus if median[name] > threshold]
        rounded = {pair: round(d, 4) for pair, d in distances.items()}
        details.update(
            distances=rounded,
            median_distance={name: round(d, 4) for name, d in median.items()},
            imbalanced=imbalanced,
            groups=groups,
            within_node_max={
                node: max(
                    (
                        d
                        for pair, d in rounded.items()
                        if pair.split("|")[0].split("/")[0]
                        == node
                        == pair.split("|")[1].split("/")[0]
                    ),
                    default=0.0,
                )
                for node in sorted({g.split("/")[0] for g in gpus}, key=natural_key)
            },
            across_nodes_max=max(
                (
                    d
                    for pair, d in rounded.items()
                    if pair.split("|")[0].split("/")[0] != pair.split("|")[1].split("/")[0]
                ),
                default=0.0,
            ),
        )
        means = details["mean_utilization_pct"]
        if not over:
            return Verdict(
                violations=0,
                datapoints=len(distances),
                details=details,
                message=f"The {len(gpus)} GPUs have similar workloads "
                f"(largest distance {max(rounded.values()):.2f} <= {threshold:g}).",
            )
        head = f"{len(over)} of {len(distances)} GPU pairs differ by more than {threshold:g} "
        if len(groups) > 1 and imbalanced == gpus:
            split = [
                f"{_names(group)} average{'s' if len(group) == 1 else ''} "
                f"{np.mean([means[g] for g in group]):.0f} %"
                for group in groups
            ]
            message = f"{head}(Jensen-Shannon); the GPUs form {len(groups)} groups of similar "
            message += f"workload, none a majority: {'; '.join(split[:4])}."
            finding = "; ".join(split)
        else:
            named = imbalanced or sorted(
                {g for pair in over for g in pair.split("|")}, key=natural_key
            )
            others = [means[g] for g in gpus if g not in named]
            typical = f" while the other GPUs average {np.median(others):.0f} %" if others else ""
            listing = ", ".join(f"{g} averages {means[g]:.0f} %" for g in named[:8])
            if len(named) > 8:
                listing += f" and {len(named) - 8} more"
            message = f"{head}(Jensen-Shannon); imbalanced: {_names(named)}."
            finding = f"{listing}{typical}"
        return Verdict(
            triggered=True,
            violations=len(over),
            datapoints=len(distances),
            message=message,
            recommendation=f"{finding}. Check that every "
            "rank gets the same amount of data and work (sampler, uneven shards, rank-0-only "
            "work such as logging or evaluation), and that collectives are not waiting on one rank.",
            details=details,
        )


def _workload_groups(
    gpus: list[str], distances: dict[str, float], threshold: float
) -> list[list[str]]:
    """The GPUs in groups of similar workload (linked by pairs at most ``threshold`` apart),
    largest first, so that four GPUs at 30 % and four at 80 % read as two groups rather than
    eight imbalanced GPUs."""
    group_of = {name: {name} for name in gpus}
    for pair, d in distances.items():
        a, b = pair.split("|")
        if d <= threshold and group_of[a] is not group_of[b]:
            merged = group_of[a] | group_of[b]
            for name in merged:
                group_of[name] = merged
    unique = {id(group): sorted(group, key=natural_key) for group in group_of.values()}.values()
    return sorted(unique, key=lambda group: (-len(group), [natural_key(g) for g in group]))


def _names(group: list[str]) -> str:
    """At most eight GPU names (a group, the imbalanced ones) and how many more, for a message."""
    return ", ".join(group[:8]) + (f" and {len(group) - 8} more" if len(group) > 8 else "")
