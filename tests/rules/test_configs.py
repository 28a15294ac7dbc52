"""Configuring rules the SageMaker way: rule_configs, ProfilerRule, ProfilerReport keys, limits."""

from __future__ import annotations

import numpy as np
import pytest

from stepscope.errors import ConfigError
from stepscope.rules import MAX_RULES, ProfilerRule, Rule, Verdict, build_rules, rule_configs
from stepscope.rules.builtin import BUILTIN_RULES


def test_default_config_and_custom_parameters():
    rule = ProfilerRule.stepscope(rule_configs.CPUBottleneck())
    assert rule.name == "CPUBottleneck"
    assert rule.build().parameters["cpu_threshold"] == 90

    custom = ProfilerRule.stepscope(
        base_config=rule_configs.CPUBottleneck(), rule_parameters={"cpu_threshold": "80"}
    )
    assert custom.build().parameters["cpu_threshold"] == 80.0


def test_sagemaker_alias_is_the_same_method():
    rule = ProfilerRule.sagemaker(rule_configs.StepOutlier(), rule_parameters={"mode": "eval"})
    assert rule.build().parameters["mode"] == "EVAL"


def test_unknown_parameter_lists_the_valid_ones():
    with pytest.raises(ConfigError) as err:
        rule_configs.CPUBottleneck(cpu_treshold=80)
    message = str(err.value)
    for name in ("cpu_threshold", "gpu_threshold", "patience", "scan_interval_us", "threshold"):
        assert name in message


@pytest.mark.parametrize(
    ("rule", "parameter", "value"),
    [
        ("CPUBottleneck", "threshold", 150),
        ("CPUBottleneck", "patience", -1),
        ("CPUBottleneck", "patience", 2.5),
        ("LowGPUUtilization", "window", 0),
        ("LoadBalancing", "threshold", 1.5),
        ("StepOutlier", "mode", "TRAINING"),
        ("StepOutlier", "stddev", "five"),
        ("BatchSize", "cpu_threshold_p95", True),
        ("MaxInitializationTime", "scan_interval_us", 10),
    ],
)
def test_bad_values_name_the_parameter_and_what_is_allowed(rule, parameter, value):
    with pytest.raises(ConfigError) as err:
        rule_configs.by_name(rule)(**{parameter: value})
    assert err.value.parameter == f"{rule}.{parameter}"
    assert "must be" in str(err.value)


def test_numpy_numbers_are_accepted_as_parameter_values():
    # a threshold computed with numpy (a percentile, a count) is a number like any other
    rule = ProfilerRule.stepscope(
        rule_configs.StepOutlier(n_outliers=np.int64(3), stddev=np.float32(2.5))
    ).build()
    assert rule.parameters["n_outliers"] == 3 and type(rule.parameters["n_outliers"]) is int
    assert rule.parameters["stddev"] == 2.5 and type(rule.parameters["stddev"]) is float
    with pytest.raises(ConfigError):
        rule_configs.StepOutlier(n_outliers=np.bool_(True))


# the parameter named is the one given, as given: a max_threshold of 50 was reported as
# "Dataloader.min_threshold ... got 70.0", a default nobody wrote, in a float nobody typed
@pytest.mark.parametrize(
    ("config", "parameter", "value", "allowed"),
    [
        (lambda: rule_configs.Dataloader(min_threshold=300), "min_threshold", 300, "<= max"),
        (
            lambda: rule_configs.ProfilerReport(Dataloader_max_threshold=50),
            "max_threshold",
            50,
            ">= min_threshold (70)",
        ),
        (
            lambda: rule_configs.Dataloader(min_threshold="90", max_threshold="80"),
            "min_threshold",
            "90",
            "<= max_threshold (80)",
        ),
    ],
)
def test_dataloader_min_threshold_may_not_exceed_max_threshold(config, parameter, value, allowed):
    # a healthy range of 300-200 % of the cores is empty: every node would be flagged
    with pytest.raises(ConfigError) as err:
        config()
    assert (err.value.parameter, err.value.value) == (f"Dataloader.{parameter}", value)
    assert allowed in err.value.allowed
    assert rule_configs.Dataloader(min_threshold=200).rule_parameters == {"min_threshold": 200}


@pytest.mark.parametrize(
    ("config", "parameter", "value"),
    [
        (lambda: rule_configs.LowGPUUtilization(threshold_p5=90), "threshold_p5", 90),
        (
            lambda: rule_configs.ProfilerReport(LowGPUUtilization_threshold_p95=5),
            "threshold_p95",
            5,
        ),
    ],
)
def test_low_gpu_utilization_threshold_p5_may_not_exceed_threshold_p95(config, parameter, value):
    # with p5 at 90 and p95 at 70, a GPU steady at 80 % was flagged as fluctuating
    with pytest.raises(ConfigError) as err:
        config()
    assert (err.value.parameter, err.value.value) == (f"LowGPUUtilization.{parameter}", value)
    assert rule_configs.LowGPUUtilization(threshold_p5=70).rule_parameters == {"threshold_p5": 70}


def test_unknown_rule_name_lists_the_built_in_rules():
    with pytest.raises(ConfigError) as err:
        rule_configs.by_name("CPUBottleneckk")
    for name in BUILTIN_RULES:
        assert name in str(err.value)
    with pytest.raises(AttributeError):
        _ = rule_configs.NoSuchRule


def test_profiler_report_customises_sub_rules_as_in_the_docs():
    report = rule_configs.ProfilerReport(CPUBottleneck_cpu_threshold=90, IOBottleneck_threshold=90)
    rule = ProfilerRule.stepscope(report).build()
    subrules = {sub.rule_name(): sub for sub in rule.subrules()}
    assert len(subrules) == 11
    assert subrules["CPUBottleneck"].parameters["cpu_threshold"] == 90
    assert subrules["IOBottleneck"].parameters["threshold"] == 90
    assert subrules["IOBottleneck"].parameters["io_threshold"] == 50  # untouched default


def test_profiler_report_keys_match_rule_names_case_insensitively():
    rule = rule_configs.ProfilerReport(stepoutlier_n_outliers=0, LOWGPUUTILIZATION_window=10)
    built = ProfilerRule.stepscope(rule).build()
    subrules = {sub.rule_name(): sub for sub in built.subrules()}
    assert subrules["StepOutlier"].parameters["n_outliers"] == 0
    assert subrules["LowGPUUtilization"].parameters["window"] == 10


def test_profiler_report_keys_of_one_parameter_in_two_cases_must_agree():
    # the last spelling silently won over the first
    with pytest.raises(ConfigError) as caught:
        rule_configs.ProfilerReport(cpubottleneck_threshold=10, CPUBottleneck_threshold=90).build()
    message = str(caught.value)
    assert "cpubottleneck_threshold" in message and "CPUBottleneck_threshold" in message
    assert "CPUBottleneck.threshold" in message
    rule = rule_configs.ProfilerReport(cpubottleneck_threshold=10, CPUBottleneck_threshold=10)
    subrules = {sub.rule_name(): sub for sub in ProfilerRule.stepscope(rule).build().subrules()}
    assert subrules["CPUBottleneck"].parameters["threshold"] == 10
    # rule_parameters override the base config's, however either spells the rule
    rule = ProfilerRule.stepscope(rule, rule_parameters={"CPUBOTTLENECK_threshold": "90"})
    subrules = {sub.rule_name(): sub for sub in rule.build().subrules()}
    assert subrules["CPUBottleneck"].parameters["threshold"] == 90


def test_a_customised_profiler_report_shows_its_customisation_when_printed():
    # a notebook cell ending in the rules list prints them: that must not raise
    rule = ProfilerRule.stepscope(rule_configs.ProfilerReport(CPUBottleneck_cpu_threshold=90))
    assert repr(rule) == "ProfilerRule(ProfilerReport(CPUBottleneck_cpu_threshold=90))"
    quick = ProfilerRule.stepscope(rule_configs.ProfilerReport(scan_interval_us=5_000_000))
    assert repr(quick) == "ProfilerRule(ProfilerReport(scan_interval_us=5000000))"


def test_profiler_report_scan_interval_reaches_every_sub_rule():
    built = ProfilerRule.stepscope(rule_configs.ProfilerReport(scan_interval_us=5_000_000)).build()
    assert {sub.parameters["scan_interval_us"] for sub in built.subrules()} == {5_000_000}


@pytest.mark.parametrize(
    "key",
    [
        "OverallFrameworkMetrics_scan_interval_us",
        "NoRule_threshold",
        "CPUBottleneck",
        "cpu_threshold",
    ],
)
def test_profiler_report_rejects_unknown_keys_with_the_valid_rule_names(key):
    with pytest.raises(ConfigError) as err:
        rule_configs.ProfilerReport(**{key: 1})
    assert "CPUBottleneck" in str(err.value) and "StepOutlier" in str(err.value)


def test_profiler_report_validates_the_sub_rule_parameter():
    with pytest.raises(ConfigError) as err:
        rule_configs.ProfilerReport(CPUBottleneck_cpu_threshold=900)
    assert err.value.parameter == "CPUBottleneck.cpu_threshold"
    with pytest.raises(ConfigError):
        rule_configs.ProfilerReport(CPUBottleneck_cpu_treshold=90)


class Limit(Rule):
    """A user rule: any class with a distinct name."""

    def scan(self, window):
        pass

    def evaluate(self):
        return Verdict()


def test_at_most_twenty_rules_per_job():
    classes = [type(f"Custom{i}", (Limit,), {}) for i in range(MAX_RULES + 1)]
    assert len(build_rules(classes[:MAX_RULES])) == MAX_RULES
    with pytest.raises(ConfigError) as err:
        build_rules(classes)
    assert "at most 20" in str(err.value)


def test_a_rule_may_not_run_twice():
    with pytest.raises(ConfigError) as err:
        build_rules([rule_configs.ProfilerReport(), rule_configs.CPUBottleneck()])
    assert "CPUBottleneck" in str(err.value)


@pytest.mark.parametrize(
    "rules",
    [
        "StepOutlier",
        ProfilerRule.stepscope(rule_configs.StepOutlier()),
        rule_configs.StepOutlier(),
    ],
    ids=["name", "profiler-rule", "rule-config"],
)
def test_one_rule_given_alone_is_asked_for_in_a_list(rules):
    # a name was read letter by letter ("got 'S'"), a rule object failed as "not iterable"
    with pytest.raises(ConfigError) as err:
        build_rules(rules)
    assert err.value.parameter == "rules"
    assert "a list of rules" in str(err.value) and "rules=[...]" in str(err.value)
    assert len(build_rules([rules])) == 1


def test_rule_parameters_that_are_no_mapping_are_a_config_error():
    # "stddev=3" failed with ValueError: dictionary update sequence element #0 has length 1
    for configure in (
        lambda: ProfilerRule.stepscope(rule_configs.StepOutlier(), rule_parameters="stddev=3"),
        lambda: ProfilerRule(rule_configs.StepOutlier().rule_class, "stddev=3"),
    ):
        with pytest.raises(ConfigError) as err:
            configure()
        assert err.value.parameter == "ProfilerRule rule_parameters"
        assert "a mapping of parameter names to values" in str(err.value)


def test_a_parameter_given_without_its_name_is_named_by_the_rule_config():
    with pytest.raises(TypeError, match=r"^rule_configs\.StepOutlier\(\) takes 0 positional"):
        rule_configs.StepOutlier(3)


def test_default_rules_are_profiler_report():
    (rule,) = build_rules(None)
    assert rule.rule_name() == "ProfilerReport"


def test_custom_rules_declare_validated_parameters():
    from stepscope.rules import Param

    class StepCount(Limit):
        parameter_specs = {"limit": Param(10, int, "Steps allowed.", minimum=1)}

    assert ProfilerRule.stepscope(StepCount, {"limit": "3"}).build().parameters["limit"] == 3
    with pytest.raises(ConfigError):
        ProfilerRule.stepscope(StepCount, {"limit": 0})
    with pytest.raises(ConfigError):
        ProfilerRule.stepscope(object)  # type: ignore[arg-type]
