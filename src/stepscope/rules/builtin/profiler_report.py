"""ProfilerReport: runs every built-in rule and summarises their verdicts for the report.

``ProfilerReport(CPUBottleneck_cpu_threshold=90, IOBottleneck_threshold=90)`` customises the
sub-rules: each keyword is split at its first ``_``; the part before is a rule name (matched
case-insensitively; OverallFrameworkMetrics is not customisable, as in SageMaker), the rest one
of that rule's parameters, validated like any rule parameter. ``scan_interval_us`` applies to
every sub-rule.
The engine scans the sub-rules itself, so a crashing sub-rule is marked Error and the others go on
(SageMaker's error branch crashed the whole report). It triggers when any sub-rule triggered.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from stepscope.errors import ConfigError
from stepscope.rules.base import Rule, Verdict
from stepscope.rules.parameters import SCAN_INTERVAL
from stepscope.rules.window import ScanWindow

__all__ = ["ProfilerReport"]

logger = logging.getLogger(__name__)

#: Sub-rules whose parameters cannot be customised through ProfilerReport (as in SageMaker).
NOT_CUSTOMISABLE = ("OverallFrameworkMetrics",)


class ProfilerReport(Rule):
    description = (
        "Runs all built-in profiler rules with their default or customised parameters and "
        "writes the profiling report, updated while the job trains."
    )

    def __init__(self, **parameters: Any) -> None:
        from stepscope.rules.builtin import SUB_RULES

        own = {
            "scan_interval_us": SCAN_INTERVAL.coerce(
                "ProfilerReport.scan_interval_us",
                parameters.pop("scan_interval_us", SCAN_INTERVAL.default),
            )
        }
        customisable = {name.lower(): name for name in self.customisable_rules()}
        per_rule: dict[str, dict[str, Any]] = {name: {} for name in SUB_RULES}
        #: (rule, parameter) -> the key that set it, to name both keys of a conflict
        keys: dict[tuple[str, str], str] = {}
        for key, value in parameters.items():
            prefix, _, parameter = key.partition("_")
            rule = customisable.get(prefix.lower())
            if rule is None or not parameter:
                raise ConfigError(
                    "ProfilerReport parameter",
                    key,
                    "<RuleName>_<parameter> with RuleName one of "
                    + ", ".join(customisable.values()),
                    "OverallFrameworkMetrics is not customised through ProfilerReport (as in "
                    "SageMaker): ProfilerReport's own scan_interval_us applies to it."
                    if prefix.lower() == "overallframeworkmetrics"
                    else "",
                )
            earlier = keys.setdefault((rule, parameter), key)
            if earlier != key and per_rule[rule][parameter] != value:
                # rule names match whatever their case: two spellings are one parameter
                raise ConfigError(
                    f"ProfilerReport parameter {key}",
                    value,
                    f"the value of {earlier} ({per_rule[rule][parameter]!r}) or left out",
                    f"{earlier} and {key} set the same parameter, {rule}.{parameter}.",
                )
            per_rule[rule][parameter] = value
        self.parameters = {**own, **parameters}
        self.rules: list[Rule] = []
        for name, rule_class in SUB_RULES.items():
            rule_parameters = {"scan_interval_us": own["scan_interval_us"], **per_rule[name]}
            self.rules.append(rule_class(**rule_parameters))

    @classmethod
    def customisable_rules(cls) -> list[str]:
        """The sub-rules that ``<RuleName>_<parameter>`` keys customise, sorted by name."""
        from stepscope.rules.builtin import SUB_RULES

        return sorted(name for name in SUB_RULES if name not in NOT_CUSTOMISABLE)

    @classmethod
    def parameter_key(cls, name: str) -> str:
        prefix, underscore, parameter = name.partition("_")
        return prefix.lower() + underscore + parameter

    @classmethod
    def all_parameter_specs(cls) -> dict[str, Any]:
        return {"scan_interval_us": SCAN_INTERVAL}

    def subrules(self) -> list[Rule]:
        return list(self.rules)

    def scan(self, window: ScanWindow) -> None:
        """Nothing: the engine scans the sub-rules, each guarded on its own."""

    def evaluate(self) -> Verdict:
        verdicts: dict[str, Verdict] = {}
        for rule in self.rules:
            try:
                verdicts[rule.rule_name()] = rule.evaluate()
            except Exception:
                logger.exception("rule %s failed to evaluate", rule.rule_name())
        return self.evaluate_from(verdicts)

    def evaluate_from(self, subverdicts: Mapping[str, Verdict]) -> Verdict:
        triggered, failed, pending = [], [], 0
        statuses: dict[str, Any] = {}
        for rule in self.rules:
            verdict = subverdicts.get(rule.rule_name())
            if verdict is None:
                failed.append(rule.rule_name())
                statuses[rule.rule_name()] = "Error"
                continue
            statuses[rule.rule_name()] = (
                "IssuesFound"
                if verdict.triggered
                else "NoIssuesFound"
                if verdict.applicable
                else "NotApplicable"
            )
            if verdict.triggered:
                triggered.append(rule.rule_name())
            pending += 0 if verdict.applicable else 1
        message = f"{len(triggered)} of {len(self.rules)} rules found issues"
        message += f": {', '.join(triggered)}." if triggered else "."
        if failed:
            message += f" Failed: {', '.join(failed)}."
        return Verdict(
            triggered=bool(triggered),
            violations=len(triggered),
            datapoints=len(self.rules),
            message=message,
            recommendation="See the rules summary of the profiling report." if triggered else "",
            details={"rules": statuses},
        )
