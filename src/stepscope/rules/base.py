"""The rule family: the :class:`Rule` base class, what a rule concludes, and the result the engine writes.

A rule is a small object with incremental state. The engine calls :meth:`Rule.scan` once per time
window of new data (each sample belongs to exactly one window by its timestamp, each event by its end) and
:meth:`Rule.evaluate` whenever it needs the current verdict. Built-in and user rules are treated
alike: subclass :class:`Rule`, declare ``parameter_specs``, implement the two methods, and pass the
class to :func:`~stepscope.rules.run_rules`, :func:`~stepscope.rules.start_rule_engine` or
:meth:`~stepscope.rules.ProfilerRule.stepscope`; the engine gives it the same status file, report
JSON and report section as a built-in.

State must stay bounded (counters, histograms, sketches, a few buffers) and must not depend on how
the data was cut into windows: scanning a job in sixty one-minute windows or in one pass gives the
same verdict. The contract test in ``tests/rules`` checks every built-in for this.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from stepscope.rules.parameters import SCAN_INTERVAL, Param, validate_parameters

if TYPE_CHECKING:
    from stepscope.rules.window import ScanWindow

__all__ = ["Rule", "RuleResult", "RuleStatus", "Verdict", "undecided"]

#: What ``status.json`` says about a rule.
RuleStatus = Literal["InProgress", "IssuesFound", "NoIssuesFound", "Error", "NotApplicable"]


@dataclass
class Verdict:
    """What a rule concludes from the data seen so far (returned by :meth:`Rule.evaluate`).

    :param triggered: whether the rule's condition is met.
    :param violations: how many distinct problems were found (outlier steps, bottleneck
        snapshots, imbalanced GPUs ...), each counted once.
    :param datapoints: how many units were evaluated (snapshots, steps, samples ...).
    :param message: one sentence with the figures, for the terminal and the status file.
    :param recommendation: what to change, with the actual figures; empty when nothing to do.
    :param details: per-node / per-GPU figures for the report (JSON-serialisable).
    :param intervals: the violation time intervals, ``[start_us, end_us]`` pairs, in order.
    :param applicable: False when the data this rule needs does not exist (e.g. no GPU metrics).
    """

    triggered: bool = False
    violations: int = 0
    datapoints: int = 0
    message: str = ""
    recommendation: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    intervals: list[list[int]] = field(default_factory=list)
    applicable: bool = True


def undecided(needed: str, seen: str, *, ended: bool, **fields: Any) -> Verdict:
    """The verdict of a rule that has seen too little data to judge (``needed``, e.g. "more than
    1000 snapshots (patience)"; ``seen``, e.g. "240"): InProgress while the job runs, and
    NotApplicable once it ended, because a job too short to judge is no evidence that nothing is
    wrong. Every rule words it the same way; ``fields`` are the other :class:`Verdict` fields."""
    if ended:
        message = f"The job ended before the rule could decide: it needs {needed}, it saw {seen}."
    else:
        message = f"Waiting for {needed} before deciding ({seen} so far)."
    return Verdict(applicable=False, message=message, **fields)


@dataclass
class RuleResult:
    """A rule's verdict with its identity, as written to ``status.json`` and ``<Rule>.json``."""

    rule: str
    status: RuleStatus
    triggered: bool
    violations: int
    datapoints: int
    message: str
    description: str
    recommendation: str
    details: dict[str, Any]
    intervals: list[list[int]]
    parameters: dict[str, Any]
    updated_us: int

    @classmethod
    def from_verdict(
        cls, rule: Rule, verdict: Verdict, *, final: bool, updated_us: int | None = None
    ) -> RuleResult:
        """The result of ``rule`` for ``verdict``; ``final`` is True once the job has ended."""
        status: RuleStatus
        if not verdict.applicable:
            status = "NotApplicable" if final else "InProgress"
        elif verdict.triggered:
            status = "IssuesFound"
        else:
            status = "NoIssuesFound" if final else "InProgress"
        return cls(
            rule=rule.rule_name(),
            status=status,
            triggered=verdict.triggered and verdict.applicable,
            violations=verdict.violations,
            datapoints=verdict.datapoints,
            message=verdict.message,
            description=rule.description,
            recommendation=verdict.recommendation if verdict.triggered else "",
            details=verdict.details,
            intervals=verdict.intervals,
            parameters=dict(rule.parameters),
            updated_us=updated_us if updated_us is not None else int(time.time() * 1e6),
        )

    @classmethod
    def error(cls, rule: Rule, reason: str) -> RuleResult:
        """The result of a rule that raised: status Error, the reason as message."""
        return cls(
            rule=rule.rule_name(),
            status="Error",
            triggered=False,
            violations=0,
            datapoints=0,
            message=reason,
            description=rule.description,
            recommendation="",
            details={},
            intervals=[],
            parameters=dict(rule.parameters),
            updated_us=int(time.time() * 1e6),
        )

    def to_status(self) -> dict[str, Any]:
        """``rule-output/<Rule>/status.json``."""
        return {
            "rule": self.rule,
            "status": self.status,
            "message": self.message,
            "updated_us": self.updated_us,
            "triggered": self.triggered,
            "violations": self.violations,
            "datapoints": self.datapoints,
        }

    def to_report(self) -> dict[str, Any]:
        """``rule-output/profiler-reports/<Rule>.json``: SageMaker's keys, then ours.

        ``RuleTriggered`` is the number of violations when the rule triggered, else 0, so sorting
        the rules summary by it ranks the rules by how much they found.
        """
        return {
            "RuleTriggered": self.violations if self.triggered else 0,
            "Violations": self.violations,
            "Details": self.details,
            "Datapoints": self.datapoints,
            "RuleParameters": "\n".join(f"{k}:{v}" for k, v in self.parameters.items()),
            "Rule": self.rule,
            "Status": self.status,
            "Triggered": self.triggered,
            "Message": self.message,
            "Description": self.description,
            "Recommendation": self.recommendation,
            "Intervals": self.intervals,
            "Parameters": self.parameters,
            "UpdatedUs": self.updated_us,
        }

    @classmethod
    def from_report(cls, report: Mapping[str, Any]) -> RuleResult:
        """Read back what :meth:`to_report` wrote (the HTML report reads results this way)."""
        return cls(
            rule=str(report.get("Rule", "")),
            status=report.get("Status", "NoIssuesFound"),
            triggered=bool(report.get("Triggered", report.get("RuleTriggered", 0))),
            violations=int(report.get("Violations", 0)),
            datapoints=int(report.get("Datapoints", 0)),
            message=str(report.get("Message", "")),
            description=str(report.get("Description", "")),
            recommendation=str(report.get("Recommendation", "")),
            details=dict(report.get("Details") or {}),
            intervals=list(report.get("Intervals") or []),
            parameters=dict(report.get("Parameters") or {}),
            updated_us=int(report.get("UpdatedUs", 0)),
        )


class Rule:
    """Base class of every profiler rule, built-in or user-written.

    Subclasses set ``description`` (one paragraph: what the rule checks and why it matters) and
    ``parameter_specs`` (``scan_interval_us`` is added for every rule), and implement
    :meth:`scan` and :meth:`evaluate`. The class name is the rule name, the folder under
    ``rule-output/`` and the key of its report JSON, unless ``name`` is set.

    :param parameters: parameter values; unknown names, wrong types and out-of-range values raise
        :class:`~stepscope.errors.ConfigError` listing the valid parameters.
    :ivar ended: the job's last window has been scanned: no more data will come (set by the
        engine before that window's :meth:`scan`).
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    parameter_specs: ClassVar[Mapping[str, Param]] = {}

    def __init__(self, **parameters: Any) -> None:
        self.parameters: dict[str, Any] = validate_parameters(
            self.rule_name(), self.all_parameter_specs(), parameters
        )
        self.ended = False

    @classmethod
    def rule_name(cls) -> str:
        """The rule's name: ``name`` when set, else the class name."""
        return cls.name or cls.__name__

    @classmethod
    def parameter_key(cls, name: str) -> str:
        """What two spellings of one parameter have in common: the name itself (names are
        case-sensitive, as in SageMaker); ProfilerReport's ``<Rule>_<param>`` keys match the
        rule name in any case."""
        return name

    @classmethod
    def all_parameter_specs(cls) -> dict[str, Param]:
        """The rule's own parameters plus ``scan_interval_us``."""
        return {**cls.parameter_specs, "scan_interval_us": SCAN_INTERVAL}

    def subrules(self) -> list[Rule]:
        """Rules this one runs (ProfilerReport's eleven); the engine scans and reports each."""
        return []

    def scan(self, window: ScanWindow) -> None:
        """Consume the samples and events of ``window`` (see ScanWindow); update the state only."""
        raise NotImplementedError

    def evaluate(self) -> Verdict:
        """The verdict on everything scanned so far; must not change the state."""
        raise NotImplementedError

    def evaluate_from(self, subverdicts: Mapping[str, Verdict]) -> Verdict:
        """The verdict of a rule with :meth:`subrules`, given their current verdicts by name (a
        sub-rule whose evaluation failed is missing).

        The engine evaluates every rule once per update and calls this rather than
        :meth:`evaluate` on a rule with sub-rules, so they are not evaluated twice. The default
        ignores them and evaluates the rule.
        """
        return self.evaluate()

    def __repr__(self) -> str:
        specs = self.all_parameter_specs()
        # a rule may hold parameters it passes on (ProfilerReport's <Rule>_<parameter> keys)
        changed = {
            k: v for k, v in self.parameters.items() if k not in specs or v != specs[k].default
        }
        args = ", ".join(f"{k}={v!r}" for k, v in changed.items())
        return f"{self.rule_name()}({args})"
