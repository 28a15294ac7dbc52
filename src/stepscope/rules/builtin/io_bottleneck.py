"""IOBottleneck: the GPUs wait while the cores wait on I/O.

Same counting as :mod:`~stepscope.rules.builtin.cpu_bottleneck` with the mean
``I/OWaitPercentage`` of the node's cores as the host metric. ``gpu_threshold`` defaults to 70 as
the AWS documentation says (the original code used 10; with 10 the rule almost never fires on a
starved loader, because a starved GPU still shows short bursts of work).
"""

from __future__ import annotations

from stepscope.rules.base import Rule, Verdict
from stepscope.rules.bottleneck import BottleneckTally
from stepscope.rules.parameters import Param
from stepscope.rules.window import ScanWindow

__all__ = ["IOBottleneck"]


class IOBottleneck(Rule):
    description = (
        "Checks whether the GPUs sit idle because data input is slow: a snapshot is an I/O "
        "bottleneck when the node's GPUs average below gpu_threshold % utilization while its "
        "cores spend on average more than io_threshold % of their time waiting on I/O. The rule "
        "triggers when such snapshots exceed threshold % of all snapshots (after patience)."
    )
    parameter_specs = {
        "threshold": Param(
            50, float, "Percentage of bottleneck snapshots above which the rule triggers.", 0, 100
        ),
        "gpu_threshold": Param(
            70, float, "Mean GPU utilization (%) below which a snapshot is low-GPU.", 0, 100
        ),
        "io_threshold": Param(
            50, float, "Mean I/O wait (%) above which a snapshot is high-I/O.", 0, 100
        ),
        "patience": Param(1000, int, "Snapshots to see before the rule may trigger.", minimum=0),
    }

    def __init__(self, **parameters: object) -> None:
        super().__init__(**parameters)
        self.tally = BottleneckTally("iowait_mean_pct", interval_gap_us=5_000_000)

    def scan(self, window: ScanWindow) -> None:
        p = self.parameters
        self.tally.add(window.snapshots(), p["io_threshold"], p["gpu_threshold"])

    def evaluate(self) -> Verdict:
        return self.tally.verdict(self.parameters, "I/O wait", "io_threshold", ended=self.ended)
