"""SageMaker's rule configuration API: ``rule_configs.<Rule>(...)`` and ``ProfilerRule``.

::

    from stepscope import ProfilerRule, rule_configs
    rules = [
        ProfilerRule.stepscope(rule_configs.CPUBottleneck(cpu_threshold=90)),
        ProfilerRule.stepscope(base_config=rule_configs.StepOutlier(),
                               rule_parameters={"stddev": "3"}),
        ProfilerRule.stepscope(MyRule, rule_parameters={"limit": 5}),   # a user Rule subclass
    ]
    # or every built-in rule, each customised through ProfilerReport (not beside it)
    rules = [ProfilerRule.stepscope(rule_configs.ProfilerReport(CPUBottleneck_cpu_threshold=90))]

``ProfilerRule.sagemaker`` is the same method, so SageMaker code ports by changing the import.
Parameters are validated when the rule is configured, not when the job has run for an hour.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stepscope.errors import ConfigError
from stepscope.rules.base import Rule

__all__ = ["MAX_RULES", "ProfilerRule", "RuleConfig", "build_rules", "rule_configs"]

#: At most this many rules per job (SageMaker's limit; ProfilerReport counts as one).
MAX_RULES = 20


@dataclass(frozen=True)
class RuleConfig:
    """What ``rule_configs.<Rule>(...)`` returns: a rule class and its parameters."""

    rule_class: type[Rule]
    rule_parameters: Mapping[str, Any] = field(default_factory=dict)

    @property
    def rule_name(self) -> str:
        return self.rule_class.rule_name()


class _RuleConfigs:
    """``rule_configs``: one factory per built-in rule, named after it (see the registry)."""

    def __getattr__(self, name: str) -> Callable[..., RuleConfig]:
        from stepscope.rules.builtin import BUILTIN_RULES

        if name.startswith("__") or name not in BUILTIN_RULES:
            raise AttributeError(
                f"rule_configs has no rule {name!r}; built-in rules: {', '.join(BUILTIN_RULES)}"
            )
        return self.by_name(name)

    def by_name(self, name: str) -> Callable[..., RuleConfig]:
        """The factory of the built-in rule ``name`` (case-insensitive)."""
        rule_class = builtin_rule(name)

        def factory(**rule_parameters: Any) -> RuleConfig:
            rule_class(**rule_parameters)  # validate now
            return RuleConfig(rule_class, dict(rule_parameters))

        factory.__name__ = rule_class.rule_name()
        # what Python's own errors name it by (a value passed without its name: "takes 0
        # positional arguments"), not _RuleConfigs.by_name.<locals>.factory
        factory.__qualname__ = f"rule_configs.{factory.__name__}"
        factory.__doc__ = rule_class.description
        return factory

    def __dir__(self) -> list[str]:
        from stepscope.rules.builtin import BUILTIN_RULES

        return [*BUILTIN_RULES, "by_name"]


rule_configs = _RuleConfigs()


def builtin_rule(name: str) -> type[Rule]:
    """The built-in rule class called ``name`` (case-insensitive), or a ConfigError listing them."""
    from stepscope.rules.builtin import BUILTIN_RULES

    for known, rule_class in BUILTIN_RULES.items():
        if known.lower() == name.lower():
            return rule_class
    raise ConfigError("rule name", name, "one of " + ", ".join(BUILTIN_RULES))


class ProfilerRule:
    """A configured rule for a job: a rule class and validated parameters.

    :param rule_class: a built-in or user :class:`~stepscope.rules.Rule` subclass.
    :param rule_parameters: its parameters (values may be strings, as SageMaker sends them).
    """

    def __init__(self, rule_class: type[Rule], rule_parameters: Mapping[str, Any] | None = None):
        if not (isinstance(rule_class, type) and issubclass(rule_class, Rule)):
            raise ConfigError(
                "ProfilerRule rule", rule_class, "a Rule subclass or a rule_configs.<Rule>() config"
            )
        self.rule_class = rule_class
        self.rule_parameters = _parameters(rule_parameters)
        self.build()  # validate now

    @property
    def name(self) -> str:
        return self.rule_class.rule_name()

    @classmethod
    def stepscope(
        cls,
        base_config: RuleConfig | type[Rule],
        rule_parameters: Mapping[str, Any] | None = None,
    ) -> ProfilerRule:
        """Configure a rule: ``base_config`` from ``rule_configs`` (or a Rule subclass), with
        ``rule_parameters`` overriding the config's own parameters, however either spells them
        (see :meth:`Rule.parameter_key`)."""
        if isinstance(base_config, RuleConfig):
            overrides = _parameters(rule_parameters)
            key = base_config.rule_class.parameter_key
            replaced = {key(name) for name in overrides}
            kept = {n: v for n, v in base_config.rule_parameters.items() if key(n) not in replaced}
            return cls(base_config.rule_class, {**kept, **overrides})
        return cls(base_config, rule_parameters)

    sagemaker = stepscope

    def build(self) -> Rule:
        """A fresh rule instance with fresh state."""
        return self.rule_class(**self.rule_parameters)

    def __repr__(self) -> str:
        return f"ProfilerRule({self.build()!r})"


def _parameters(rule_parameters: Mapping[str, Any] | None) -> dict[str, Any]:
    """``rule_parameters`` as a dict (a string or a list of pairs is no mapping of names)."""
    if not isinstance(rule_parameters, Mapping | None):
        raise ConfigError(
            "ProfilerRule rule_parameters",
            rule_parameters,
            "a mapping of parameter names to values, e.g. {'stddev': 3}",
        )
    return dict(rule_parameters or {})


#: what each item of a job's ``rules`` may be
_RULE_ITEM = "a ProfilerRule, rule_configs.<Rule>(), a Rule subclass or a rule name"


def build_rules(rules: Sequence[Any] | None) -> list[Rule]:
    """Fresh rule instances for ``rules``; ``None`` means ``[ProfilerReport()]``.

    Each item may be a :class:`ProfilerRule`, a :class:`RuleConfig`, a Rule subclass, a Rule
    instance or a built-in rule name.

    :raises ConfigError: more than :data:`MAX_RULES` rules, the same rule twice, an item that
        is none of the above, or one of them given alone, not in a list.
    """
    from stepscope.rules.builtin.profiler_report import ProfilerReport

    if isinstance(rules, str) or not isinstance(rules, Sequence | None):
        # a name went through letter by letter ("got 'S'"), a rule object as "not iterable"
        raise ConfigError(
            "rules",
            rules,
            "a list of rules, each " + _RULE_ITEM,
            "Give a single rule in a list: rules=[...].",
        )
    items = list(rules) if rules else [ProfilerReport]
    if len(items) > MAX_RULES:
        raise ConfigError(
            "rules",
            f"{len(items)} rules",
            f"at most {MAX_RULES} rules per job",
            "ProfilerReport runs every built-in rule and counts as one.",
        )
    built: list[Rule] = []
    for item in items:
        if isinstance(item, ProfilerRule):
            built.append(item.build())
        elif isinstance(item, RuleConfig):
            built.append(item.rule_class(**item.rule_parameters))
        elif isinstance(item, Rule):
            # a fresh one with its parameters: an instance that ran before holds that run's state
            built.append(type(item)(**item.parameters))
        elif isinstance(item, type) and issubclass(item, Rule):
            built.append(item())
        elif isinstance(item, str):
            built.append(builtin_rule(item)())
        else:
            raise ConfigError("rules item", item, _RULE_ITEM)
    names = [name for rule in built for name in _names(rule)]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ConfigError(
            "rules",
            duplicates,
            "each rule at most once",
            "ProfilerReport already runs every built-in rule; customise them through it.",
        )
    return built


def _names(rule: Rule) -> list[str]:
    return [rule.rule_name(), *(sub.rule_name() for sub in rule.subrules())]
