"""``stepscope rules``: run the profiler rules over a recorded job, trace or SageMaker output."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import Any

from stepscope.errors import ConfigError

__all__ = ["add_arguments", "add_rule_arguments", "main", "rules_from_arguments"]

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path", help="job folder, SageMaker Debugger output folder (or s3:// URL), Kineto trace"
    )
    add_rule_arguments(parser)
    parser.add_argument(
        "--output-dir",
        help="where to write the results (default <job>/rule-output; required for a read-only "
        "input, such as a trace or s3://, and for a job that stepscope run still runs)",
    )


def add_rule_arguments(parser: argparse.ArgumentParser) -> None:
    """``--rule`` and ``--param``, which every command that runs rules takes alike (read by
    :func:`rules_from_arguments`)."""
    parser.add_argument(
        "--rule",
        action="append",
        dest="rules",
        metavar="NAME",
        help="a built-in rule by name, e.g. StepOutlier, or a custom Rule class as "
        "module:Class (repeatable; default ProfilerReport, which runs all the built-in ones)",
    )
    parser.add_argument(
        "--param",
        action="append",
        dest="params",
        default=[],
        metavar="RULE.PARAM=VALUE",
        help="set a rule parameter, e.g. StepOutlier.stddev=3 (repeatable; the others keep "
        "their defaults); one of a rule that ProfilerReport runs goes to ProfilerReport when "
        "that rule is not given to --rule",
    )


def rules_from_arguments(names: list[str] | None, params: list[str]) -> list[Any]:
    """ProfilerRule objects for ``--rule`` names and ``--param Rule.param=value`` settings.

    A parameter of a rule that ProfilerReport runs goes to ProfilerReport (as
    ``<Rule>_<param>``) when that rule is not selected on its own.
    """
    from stepscope.cli.run import naming_flags
    from stepscope.rules import ProfilerRule
    from stepscope.rules.configs import builtin_rule

    with naming_flags({"rule name": "--rule"}):
        classes = [_rule_class(name, builtin_rule) for name in (names or ["ProfilerReport"])]
    by_name = {cls.rule_name().lower(): cls for cls in classes}
    settings: dict[Any, dict[str, str]] = {cls: {} for cls in classes}
    #: (rule class, key) -> the --param that set it, to name both of a conflict
    typed: dict[tuple[Any, str], str] = {}
    for item in params:
        target, equals, value = item.partition("=")
        rule, dot, parameter = target.partition(".")
        if not equals or not dot or not rule or not parameter:
            raise ConfigError("--param", item, "RULE.PARAM=VALUE, e.g. StepOutlier.stddev=3")
        cls = by_name.get(rule.lower())
        if cls is not None:
            key = parameter
        elif "profilerreport" in by_name:
            with naming_flags({"rule name": "--param rule"}):
                sub_rule = builtin_rule(rule).rule_name()
            cls, key = by_name["profilerreport"], f"{sub_rule}_{parameter}"
        else:
            raise ConfigError(
                "--param rule",
                rule,
                "one of the selected rules: " + ", ".join(cls.rule_name() for cls in classes),
            )
        # rule names match whatever their case, so two spellings may set one parameter
        earlier = typed.setdefault((cls, key), item)
        if settings[cls].get(key, value) != value:
            raise ConfigError(
                "--param",
                item,
                f"the value of --param {earlier} or left out",
                "Both set the same parameter.",
            )
        settings[cls][key] = value
    rules = []
    for cls in classes:
        try:
            rules.append(ProfilerRule.stepscope(cls, settings[cls]))
        except ConfigError as exc:
            param = typed.get((cls, exc.value))
            if exc.parameter != "ProfilerReport parameter" or param is None:
                raise
            # ProfilerReport names its Python keyword (OverallFrameworkMetrics_scan_interval_us),
            # which the user did not type
            raise _report_param_error(param, [c.rule_name() for c in classes], exc.hint) from None
    return rules


def _report_param_error(item: str, selected: list[str], hint: str) -> ConfigError:
    """The error for a ``--param`` that ProfilerReport does not take, naming what was typed."""
    from stepscope.rules.builtin.profiler_report import ProfilerReport

    return ConfigError(
        "--param",
        item,
        "RULE.PARAM=VALUE with RULE one of the selected rules ("
        + ", ".join(selected)
        + ") or one whose parameters ProfilerReport sets ("
        + ", ".join(ProfilerReport.customisable_rules())
        + "); ProfilerReport's own PARAM is scan_interval_us",
        hint,
    )


def _rule_class(name: str, builtin_rule: Any) -> Any:
    from stepscope.rules import Rule

    if ":" not in name:
        return builtin_rule(name)
    module, _, attribute = name.partition(":")
    allowed = "a built-in rule name or module:Class naming a Rule subclass"
    if not module or not attribute:
        raise ConfigError("--rule", name, allowed)
    # The console script's import path holds its own folder, not the current one, where a
    # module beside the user (myrules.py) is. Added last, it shadows none of what stepscope
    # imports later (a pandas.py there would, first).
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        found = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError("--rule", name, allowed, str(exc)) from None
    except Exception as exc:
        # the module is the user's own, which failed as it was imported: what failed, and
        # where, is theirs to fix; -v shows the traceback
        logger.debug("importing %s failed", module, exc_info=True)
        raise ConfigError(
            "--rule", name, allowed, f"Importing {module} raised {type(exc).__name__}: {exc}"
        ) from None
    if not (isinstance(found, type) and issubclass(found, Rule)):
        raise ConfigError("--rule", name, allowed, f"{name} is {found!r}.")
    return found


def main(args: argparse.Namespace) -> int:
    from stepscope.cli.output import print_rule_status
    from stepscope.cli.run import naming_flags
    from stepscope.rules import run_rules

    rules = rules_from_arguments(args.rules, args.params)
    with naming_flags({"rules": "--rule", "output_dir": "--output-dir"}):
        results = run_rules(args.path, rules, output_dir=args.output_dir)
    for name, result in results.items():
        print_rule_status(name, result.to_status(), result=True)
    return 0
