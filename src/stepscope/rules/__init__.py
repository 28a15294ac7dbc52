"""The rule engine (live and offline), the built-in profiler rules and ProfilerReport.

Interface to the other stages: configure rules with :data:`rule_configs` and
:class:`ProfilerRule`, run them with :func:`run_rules` (offline) or :func:`start_rule_engine`
(live), and read their :class:`RuleResult` back with :func:`read_results`. User rules subclass
:class:`Rule`.
"""

from __future__ import annotations

from stepscope.rules.base import Rule, RuleResult, RuleStatus, Verdict
from stepscope.rules.builtin import BUILTIN_RULES, SUB_RULES
from stepscope.rules.configs import MAX_RULES, ProfilerRule, RuleConfig, build_rules, rule_configs
from stepscope.rules.engine import RuleSession, run_rules
from stepscope.rules.live import RuleEngineHandle, start_rule_engine
from stepscope.rules.parameters import Param
from stepscope.rules.status import read_results, write_results
from stepscope.rules.window import ScanWindow

__all__ = [
    "BUILTIN_RULES",
    "MAX_RULES",
    "SUB_RULES",
    "Param",
    "ProfilerRule",
    "Rule",
    "RuleConfig",
    "RuleEngineHandle",
    "RuleResult",
    "RuleSession",
    "RuleStatus",
    "ScanWindow",
    "Verdict",
    "build_rules",
    "read_results",
    "rule_configs",
    "run_rules",
    "start_rule_engine",
    "write_results",
]
