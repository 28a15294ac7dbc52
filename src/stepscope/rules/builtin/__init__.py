"""The built-in profiler rules: the one table of their names and classes.

Each name is SageMaker's rule name, the folder under ``rule-output/`` and the key of
``rule_configs``. The table is never mutated; it feeds the CLI choices, ProfilerReport's
``<Rule>_<param>`` keys, the docs and the contract tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from stepscope.rules.base import Rule
from stepscope.rules.builtin.batch_size import BatchSize
from stepscope.rules.builtin.cpu_bottleneck import CPUBottleneck
from stepscope.rules.builtin.dataloader import Dataloader
from stepscope.rules.builtin.gpu_memory_increase import GPUMemoryIncrease
from stepscope.rules.builtin.io_bottleneck import IOBottleneck
from stepscope.rules.builtin.load_balancing import LoadBalancing
from stepscope.rules.builtin.low_gpu_utilization import LowGPUUtilization
from stepscope.rules.builtin.max_initialization_time import MaxInitializationTime
from stepscope.rules.builtin.overall_framework_metrics import OverallFrameworkMetrics
from stepscope.rules.builtin.overall_system_usage import OverallSystemUsage
from stepscope.rules.builtin.profiler_report import ProfilerReport
from stepscope.rules.builtin.step_outlier import StepOutlier

__all__ = ["BUILTIN_RULES", "SUB_RULES"]

#: The eleven rules ProfilerReport runs, in the order SageMaker built them.
SUB_RULES: Mapping[str, type[Rule]] = MappingProxyType(
    {
        "CPUBottleneck": CPUBottleneck,
        "IOBottleneck": IOBottleneck,
        "LowGPUUtilization": LowGPUUtilization,
        "StepOutlier": StepOutlier,
        "GPUMemoryIncrease": GPUMemoryIncrease,
        "BatchSize": BatchSize,
        "MaxInitializationTime": MaxInitializationTime,
        "LoadBalancing": LoadBalancing,
        "OverallSystemUsage": OverallSystemUsage,
        "Dataloader": Dataloader,
        "OverallFrameworkMetrics": OverallFrameworkMetrics,
    }
)

#: Every built-in rule by name: ProfilerReport and the eleven.
BUILTIN_RULES: Mapping[str, type[Rule]] = MappingProxyType(
    {"ProfilerReport": ProfilerReport, **SUB_RULES}
)
