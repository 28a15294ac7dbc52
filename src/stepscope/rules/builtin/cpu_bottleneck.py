"""CPUBottleneck: the GPUs wait while the host CPU is saturated.

Reads the per-snapshot mean CPU and GPU utilization of each node (see
:mod:`stepscope.rules.bottleneck` for why the mean and not "any core"). Triggers when more than
``patience`` snapshots were seen and more than ``threshold`` % of them are bottlenecks (mean GPU
utilization below ``gpu_threshold`` while mean CPU utilization is above ``cpu_threshold``).
Differences from SageMaker: mean instead of any core or GPU, snapshots grouped per node, each
snapshot counted once, NotApplicable without GPU metrics; ``patience`` defaults to 100 as the AWS
documentation says (the original code used 1000).
"""

from __future__ import annotations

from stepscope.rules.base import Rule, Verdict
from stepscope.rules.bottleneck import BottleneckTally
from stepscope.rules.parameters import Param
from stepscope.rules.window import ScanWindow

__all__ = ["CPUBottleneck"]


class CPUBottleneck(Rule):
    description = (
        "Checks whether the GPUs sit idle because the CPU cannot feed them: a snapshot is a CPU "
        "bottleneck when the node's GPUs average below gpu_threshold % utilization while its "
        "cores average above cpu_threshold %. The rule triggers when such snapshots exceed "
        "threshold % of all snapshots (after patience snapshots)."
    )
    parameter_specs = {
        "threshold": Param(
            50, float, "Percentage of bottleneck snapshots above which the rule triggers.", 0, 100
        ),
        "gpu_threshold": Param(
            10, float, "Mean GPU utilization (%) below which a snapshot is low-GPU.", 0, 100
        ),
        "cpu_threshold": Param(
            90, float, "Mean CPU utilization (%) above which a snapshot is high-CPU.", 0, 100
        ),
        "patience": Param(100, int, "Snapshots to see before the rule may trigger.", minimum=0),
    }

    def __init__(self, **parameters: object) -> None:
        super().__init__(**parameters)
        self.tally = BottleneckTally("cpu_mean_pct", interval_gap_us=5_000_000)

    def scan(self, window: ScanWindow) -> None:
        p = self.parameters
        self.tally.add(window.snapshots(), p["cpu_threshold"], p["gpu_threshold"])

    def evaluate(self) -> Verdict:
        return self.tally.verdict(self.parameters, "CPU", "cpu_threshold", ended=self.ended)
