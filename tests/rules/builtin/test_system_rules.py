"""The rules that read system metrics, each on data that must trigger it and data that must not."""

from __future__ import annotations

import re

import numpy as np

from stepscope.rules import RuleSession
from stepscope.rules.builtin import (
    BatchSize,
    CPUBottleneck,
    GPUMemoryIncrease,
    IOBottleneck,
    LoadBalancing,
    LowGPUUtilization,
    OverallSystemUsage,
)
from tests.rules.tablejob import T0_US, add_metric, machine, snapshot_times, verdict

EIGHT = [30.0] + [80.0] * 7


def test_one_gpu_at_30_and_seven_at_80_flags_that_gpu_only(job):
    machine(job, 300, gpu_util_pct=EIGHT, gpu_memory_pct=[50] * 8)
    low = verdict(job, LowGPUUtilization(patience=100, window=100))
    assert low.status == "IssuesFound"
    assert low.details["flagged"] == ["algo-1/gpu0"]
    assert low.details["gpus"]["algo-1/gpu0"]["underused"] == 5  # 500 samples after patience
    assert "algo-1/gpu0" in low.recommendation and "30 %" in low.recommendation

    balance = verdict(job, LoadBalancing())
    assert balance.status == "IssuesFound"
    assert balance.details["imbalanced"] == ["algo-1/gpu0"]
    assert balance.violations == 7  # gpu0 against each of the seven others
    assert balance.details["median_distance"]["algo-1/gpu1"] < 0.5


def test_well_used_gpus_trigger_neither(job):
    machine(job, 300, gpu_util_pct=[80.0] * 8, gpu_memory_pct=[50] * 8)
    assert verdict(job, LowGPUUtilization(patience=100, window=100)).status == "NoIssuesFound"
    balance = verdict(job, LoadBalancing())
    assert balance.status == "NoIssuesFound"
    assert balance.datapoints == 28


def test_fluctuating_gpu(job):
    machine(job, 100, gpu_util_pct=[0.0, 80.0], noise=0.0)
    # gpu0 alternates between idle and fully busy
    times = np.arange(200) * 500_000 + 1_700_000_000_000_000 + 150
    add_metric(job, "algo-1", times, "gpu", "gpu2", "GPUUtilization", np.tile([0.0, 100.0], 100))
    result = verdict(job, LowGPUUtilization(patience=0, window=50))
    gpus = result.details["gpus"]
    assert gpus["algo-1/gpu2"]["fluctuating"] == 4 and gpus["algo-1/gpu2"]["underused"] == 0
    assert gpus["algo-1/gpu0"]["underused"] == 4
    assert gpus["algo-1/gpu1"]["underused"] == gpus["algo-1/gpu1"]["fluctuating"] == 0


def test_low_gpu_quotes_the_figures_of_the_block_it_flagged(job):
    # busy at 80 % but for one idle block: "underused (p95 84 %, ...)" contradicted itself
    times = T0_US + np.arange(600) * 500_000
    values = np.concatenate([np.full(100, 80.0), np.full(100, 5.0), np.full(400, 80.0)])
    add_metric(job, "algo-1", times, "gpu", "gpu0", "GPUUtilization", values)
    result = verdict(job, LowGPUUtilization(patience=0, window=100))
    assert result.status == "IssuesFound"
    quoted = re.search(r"underused \(block p95 (\d+) %", result.message)
    assert quoted and int(quoted.group(1)) < 70, result.message


def test_a_partial_block_is_judged_only_when_the_job_has_ended(job):
    # 150 s at 20 % (say, a slow warm-up), then 250 s at 90 %: the first block of 400 samples
    # is well used. While the job ran, the idle samples scanned so far were judged as a partial
    # block and the rule reported IssuesFound, then took it back.
    times = T0_US + np.arange(800) * 500_000
    values = np.concatenate([np.full(300, 20.0), np.full(500, 90.0)])
    add_metric(job, "algo-1", times, "gpu", "gpu0", "GPUUtilization", values)
    session = RuleSession(job, [LowGPUUtilization(patience=0, window=400)])
    job.visible_until_us = T0_US + 270_000_000  # scans reach 150 s: 300 idle samples
    session.advance()
    assert session.results()["LowGPUUtilization"].status == "InProgress"
    job.visible_until_us = None
    session.advance(final=True)
    result = session.results()["LowGPUUtilization"]
    assert result.status == "NoIssuesFound" and result.datapoints == 2


def test_a_last_partial_block_judged_underused_has_its_interval(job):
    # 100 busy samples, then 60 idle ones: the last, partial block is judged once the job ended
    times = T0_US + np.arange(160) * 500_000
    values = np.concatenate([np.full(100, 90.0), np.full(60, 20.0)])
    add_metric(job, "algo-1", times, "gpu", "gpu0", "GPUUtilization", values)
    result = verdict(job, LowGPUUtilization(patience=0, window=100))
    assert result.status == "IssuesFound" and result.violations == 1
    assert result.intervals == [[T0_US + 50_000_000, T0_US + 79_500_000]]


def test_violation_intervals_cover_every_gpus_blocks_whatever_their_order(job):
    # gpu0 is idle in the second half, gpu1 in the first: gpu1's earlier blocks, judged after
    # gpu0's, were merged into gpu0's interval and the first half of the job was lost
    times = T0_US + np.arange(80) * 500_000
    first_half = np.arange(80) < 40
    add_metric(job, "algo-1", times, "gpu", "gpu0", "GPUUtilization", np.where(first_half, 90, 20))
    add_metric(job, "algo-1", times, "gpu", "gpu1", "GPUUtilization", np.where(first_half, 20, 90))
    result = verdict(job, LowGPUUtilization(patience=0, window=20))
    assert result.violations == 4
    seconds = [[(start - T0_US) / 1e6, (end - T0_US) / 1e6] for start, end in result.intervals]
    assert seconds == [[0.0, 9.5], [10.0, 19.5], [20.0, 29.5], [30.0, 39.5]]


def test_fluctuating_needs_a_p95_above_threshold_p95(job):
    # 10 idle samples and 90 at 70 % (gpu0) or 71 % (gpu1): p5 is 0, p95 70 or 71. The docs
    # call a GPU fluctuating when its p95 is above threshold_p95: at exactly 70 it is neither.
    times = np.arange(100) * 500_000 + 1_700_000_000_000_000
    for gpu, busy in (("gpu0", 70.0), ("gpu1", 71.0)):
        values = np.concatenate([np.zeros(10), np.full(90, busy)])
        add_metric(job, "algo-1", times, "gpu", gpu, "GPUUtilization", values)
    result = verdict(job, LowGPUUtilization(patience=0, window=100))
    gpus = result.details["gpus"]
    assert gpus["algo-1/gpu0"]["fluctuating"] == gpus["algo-1/gpu0"]["underused"] == 0
    assert gpus["algo-1/gpu1"]["fluctuating"] == 1
    assert result.details["flagged"] == ["algo-1/gpu1"]


def test_load_balancing_counts_samples_at_100_percent(job):
    machine(job, 60, gpu_util_pct=[100.0, 100.0], noise=0.0)
    result = verdict(job, LoadBalancing(patience=0))
    assert sum(result.details["workloads"]["algo-1/gpu0"]) == 120
    assert result.status == "NoIssuesFound"


def test_load_balancing_compares_gpus_across_nodes(job):
    machine(job, 120, gpu_util_pct=[80.0, 80.0])
    machine(job, 120, node="algo-2", gpu_util_pct=[20.0, 20.0], seed=3)
    result = verdict(job, LoadBalancing())
    assert result.triggered
    assert result.details["across_nodes_max"] > 0.9
    assert result.details["within_node_max"]["algo-1"] < 0.5
    assert result.violations == 4  # the four cross-node pairs


def test_load_balancing_advice_when_every_gpu_is_named(job):
    # two GPUs apart: both are named, and there are no "other GPUs" to compare them with
    machine(job, 120, gpu_util_pct=[30.0, 80.0])
    result = verdict(job, LoadBalancing())
    assert result.details["imbalanced"] == ["algo-1/gpu0", "algo-1/gpu1"]
    first_sentence = result.recommendation.split(". ")[0]
    assert first_sentence.startswith("algo-1/gpu0 averages 3")
    assert first_sentence.endswith(" %") and "other GPUs" not in first_sentence


def test_gpu_rules_are_not_applicable_without_gpus(job):
    machine(job, 120, cpu_pct=99.0)
    for rule in (
        CPUBottleneck(),
        IOBottleneck(),
        LowGPUUtilization(),
        LoadBalancing(),
        GPUMemoryIncrease(),
        BatchSize(),
    ):
        result = verdict(job, rule)
        assert result.status == "NotApplicable", rule
        assert not result.triggered


def test_load_balancing_with_one_gpu_is_not_applicable(job):
    machine(job, 60, gpu_util_pct=[10.0])
    result = verdict(job, LoadBalancing())
    assert result.status == "NotApplicable" and "one GPU" in result.message


def test_cpu_bottleneck_when_all_cores_are_busy_and_gpus_idle(job):
    machine(job, 120, cores=4, cpu_pct=96.0, gpu_util_pct=[4.0, 6.0], noise=1.0)
    result = verdict(job, CPUBottleneck())
    assert result.status == "IssuesFound"
    assert result.violations == result.datapoints == 240
    assert result.details["nodes"]["algo-1"]["bottleneck_pct"] == 100.0
    assert result.intervals  # one merged interval over the two minutes
    assert result.intervals[0][1] - result.intervals[0][0] > 100_000_000


def test_one_hot_core_is_not_a_cpu_bottleneck(job):
    # the Python main thread at 100 %, the other three cores nearly idle: mean 32 %
    machine(job, 120, cpu_pct=[100.0, 10.0, 10.0, 10.0], gpu_util_pct=[4.0], noise=0.5)
    result = verdict(job, CPUBottleneck())
    assert result.status == "NoIssuesFound"
    assert result.details["nodes"]["algo-1"]["peak_core_pct"] >= 99.0


def test_cpu_bottleneck_waits_for_patience(job):
    machine(job, 40, cpu_pct=96.0, gpu_util_pct=[4.0], noise=1.0)  # 80 snapshots
    result = verdict(job, CPUBottleneck())  # patience 100
    # the job has ended: no snapshot will come ("Waiting for 100 snapshots" said one might)
    assert not result.triggered and "Waiting" not in result.message
    assert "The job ended before the rule could decide" in result.message
    assert verdict(job, CPUBottleneck(patience=50)).triggered


def test_io_bottleneck(job):
    machine(job, 120, iowait_pct=65.0, gpu_util_pct=[30.0], noise=1.0)
    assert verdict(job, IOBottleneck(patience=100)).status == "IssuesFound"
    undecided = verdict(job, IOBottleneck(patience=1000))  # 240 snapshots
    assert undecided.status == "NotApplicable" and not undecided.triggered


def test_bottlenecks_judge_only_the_nodes_with_the_host_metric(job):
    # algo-2 records its GPUs only: its snapshots were counted as never bottlenecked, which
    # halved algo-1's 100 % of I/O-wait bottlenecks to 50 %, not above the threshold
    machine(job, 120, iowait_pct=65.0, cpu_pct=96.0, gpu_util_pct=[4.0], noise=1.0)
    times = snapshot_times(120)
    add_metric(job, "algo-2", times, "gpu", "gpu0", "GPUUtilization", np.full(len(times), 4.0))
    for rule, label in ((IOBottleneck(patience=100), "I/O wait"), (CPUBottleneck(), "CPU")):
        result = verdict(job, rule)
        assert result.status == "IssuesFound", result.message
        assert result.violations == result.datapoints == 240
        assert result.details["left_out"] == ["algo-2"]
        assert list(result.details["nodes"]) == ["algo-1"]  # no 0 % for a node not measured
        assert f"Not judged, without {label} metrics: algo-2." in result.message


def test_io_bottleneck_not_with_low_io_wait(job):
    machine(job, 120, iowait_pct=5.0, gpu_util_pct=[30.0], noise=1.0)
    assert verdict(job, IOBottleneck(patience=100)).status == "NoIssuesFound"


def test_gpu_memory_slow_leak_triggers(job):
    machine(job, 600, gpu_util_pct=[80.0, 80.0], gpu_memory_pct=[np.linspace(20, 50, 1200), 30.0])
    result = verdict(job, GPUMemoryIncrease())  # patience 100, window 500: two blocks
    assert result.status == "IssuesFound"
    assert result.details["flagged"] == ["algo-1/gpu0"]
    assert result.details["gpus"]["algo-1/gpu0"]["max_increase_pct"] > 10


def test_gpu_memory_advice_quotes_the_peak_not_the_last_block(job):
    # memory jumps from 20 to 50 % and comes back: "rose from 20.0 % to 20.0 %" said nothing
    memory = np.concatenate([np.full(600, 20.0), np.full(500, 50.0), np.full(500, 20.0)])
    machine(job, 800, gpu_util_pct=[80.0], gpu_memory_pct=[memory])
    result = verdict(job, GPUMemoryIncrease())
    assert result.status == "IssuesFound"
    assert "from 20.0 % to 50.0 %" in result.recommendation


def test_gpu_memory_flat_does_not_trigger(job):
    machine(job, 600, gpu_util_pct=[80.0], gpu_memory_pct=[30.0])
    result = verdict(job, GPUMemoryIncrease())
    assert result.status == "NoIssuesFound" and result.datapoints == 2


def test_gpu_memory_too_short_to_compare_says_so(job):
    # 4 minutes of a 20 -> 95 % climb do not fill a block of 500 samples and the half block a
    # rise is measured between, which "No GPU memory rise above 10 points in 0 blocks." did not
    # say
    machine(job, 240, gpu_util_pct=[80.0], gpu_memory_pct=[np.linspace(20, 95, 480)])
    result = verdict(job, GPUMemoryIncrease())
    assert result.status == "NotApplicable"
    assert "No GPU memory rise" not in result.message
    assert "it saw 480" in result.message and "100 + 500 + 250" in result.message


def test_batch_size_light_everything(job):
    machine(job, 300, cpu_pct=20.0, gpu_util_pct=[30.0, 90.0], gpu_memory_pct=[20.0, 20.0])
    result = verdict(job, BatchSize(patience=100, window=100))
    assert result.status == "IssuesFound"
    assert result.details["flagged"] == ["algo-1/gpu0"]
    memory = result.details["boxes"]["algo-1/gpu0_memory"]
    # memory is constant 20 %: its quartiles are its own, not the utilization's
    assert memory["p25"] == memory["p75"] == memory["p50"] == 20.0


def test_batch_size_not_when_memory_is_full(job):
    machine(job, 300, cpu_pct=20.0, gpu_util_pct=[30.0], gpu_memory_pct=[90.0])
    assert verdict(job, BatchSize(patience=100, window=100)).status == "NoIssuesFound"


def test_batch_size_quotes_the_figures_of_a_light_block(job):
    # light for 5 minutes, then busy: the figures quoted must be the light ones, not the last
    machine(job, 300, cpu_pct=20.0, gpu_util_pct=[30.0], gpu_memory_pct=[20.0])
    machine(
        job, 300, cpu_pct=20.0, gpu_util_pct=[90.0], gpu_memory_pct=[20.0], start_us=T0_US + 3e8
    )
    result = verdict(job, BatchSize(patience=0, window=100))
    assert result.status == "IssuesFound"
    quoted = re.search(r"p95 GPU utilization (\d+) %", result.message)
    assert quoted and int(quoted.group(1)) < 70, result.message


def test_batch_size_without_gpu_memory_metrics_quotes_no_memory_figure(job):
    machine(job, 300, cpu_pct=20.0, gpu_util_pct=[30.0])
    result = verdict(job, BatchSize(patience=100, window=100))
    assert result.status == "IssuesFound"
    assert "nan" not in result.message + result.recommendation
    assert "memory" not in result.message


def test_overall_system_usage_percentiles(job):
    machine(
        job, 120, cpu_pct=30.0, gpu_util_pct=[40.0, 60.0], gpu_memory_pct=[10.0, 30.0], noise=0.0
    )
    machine(job, 120, node="algo-2", cpu_pct=70.0, noise=0.0)
    result = verdict(job, OverallSystemUsage())
    assert result.status == "NoIssuesFound" and not result.triggered
    one = result.details["nodes"]["algo-1"]["metrics"]
    assert one["CPU"]["p50"] == pytest_approx(30.0)
    assert one["GPU"]["p95"] == pytest_approx(50.0)
    assert one["GPU memory"]["max"] == pytest_approx(20.0)
    assert one["Network"]["p50"] == pytest_approx(1e6)
    assert "GPU" not in result.details["nodes"]["algo-2"]["metrics"]
    assert result.details["nodes"]["algo-2"]["metrics"]["CPU"]["p50"] == pytest_approx(70.0)


def pytest_approx(value: float):
    import pytest

    return pytest.approx(value, rel=0.01)


def test_load_balancing_describes_two_equal_groups_of_gpus(job):
    # four GPUs at 30 %, four at 80 %: each GPU's median distance exceeds the threshold, and the
    # message named all eight "imbalanced" without saying which went together
    machine(job, 120, gpu_util_pct=[30.0] * 4 + [80.0] * 4)
    result = verdict(job, LoadBalancing())
    assert result.status == "IssuesFound"
    assert result.violations == 16  # every cross-group pair
    low = [f"algo-1/gpu{i}" for i in range(4)]
    high = [f"algo-1/gpu{i}" for i in range(4, 8)]
    assert result.details["groups"] == [low, high]
    assert "2 groups" in result.message
    for group, pct in ((low, 30), (high, 80)):
        described = re.search(rf"{', '.join(group)} average (\d+) %", result.message)
        assert described and abs(int(described.group(1)) - pct) <= 2, result.message
    assert "imbalanced:" not in result.message


def test_load_balancing_names_the_minority_against_a_larger_group(job):
    machine(job, 120, gpu_util_pct=[30.0] * 3 + [80.0] * 5)
    result = verdict(job, LoadBalancing())
    assert result.details["imbalanced"] == [f"algo-1/gpu{i}" for i in range(3)]
    assert "while the other GPUs average 8" in result.recommendation


def test_load_balancing_within_its_patience_is_undecided_not_without_metrics(job):
    machine(job, 5, gpu_util_pct=[30.0, 80.0])  # 10 samples per GPU, all within patience
    result = verdict(job, LoadBalancing())
    assert result.status == "NotApplicable"
    # it said "No GPU utilization metrics." of a job that recorded them
    assert result.message.startswith("The job ended before the rule could decide")
    assert verdict(job, LoadBalancing(patience=0)).status == "IssuesFound"


def test_load_balancing_says_how_many_more_gpus_are_imbalanced_than_it_names(job):
    # ten of 24 GPUs at 30 %: the message named eight and said nothing of the other two
    machine(job, 60, gpu_util_pct=[30.0] * 10 + [80.0] * 14, noise=1.0)
    result = verdict(job, LoadBalancing())
    assert result.details["imbalanced"] == [f"algo-1/gpu{i}" for i in range(10)]
    assert result.message.endswith("algo-1/gpu7 and 2 more.")
    assert "algo-1/gpu7 averages 30 % and 2 more while" in result.recommendation


def test_a_job_too_short_for_low_gpu_says_it_needed_half_a_block_at_its_end(job):
    # once the job ended, a last partial block of half a window is judged: "it needs 1000 +
    # 250 samples per GPU (patience + a block)" named half a block a block
    machine(job, 600, gpu_util_pct=[80.0])  # 1200 samples: 200 after patience, under 250
    result = verdict(job, LowGPUUtilization())
    assert result.status == "NotApplicable"
    assert "it needs 1000 + 250 samples per GPU (patience + half a block), it saw 1200." in (
        result.message
    )
    one = verdict(job, LowGPUUtilization(window=1, patience=2000))
    assert "it needs 2000 + 1 samples per GPU" in one.message


def test_overall_system_usage_message_of_a_node_without_cpu_metrics(job):
    # GPU records alone read "algo-1:, p95 GPU 80 %."
    times = snapshot_times(60)
    add_metric(job, "algo-1", times, "gpu", "gpu0", "GPUUtilization", np.full(len(times), 80.0))
    add_metric(job, "algo-2", times, "memory", "MemoryUsedPercent", "", np.full(len(times), 40.0))
    result = verdict(job, OverallSystemUsage())
    assert result.message == "algo-1: p95 GPU 80 %; algo-2: no CPU or GPU metrics."


def test_gpu_memory_judges_a_last_partial_block_once_the_job_ended(job):
    # memory flat at 30 % for patience and a block, then 300 samples at 60 %: the job ended
    # mid-block, and its last two and a half minutes of rising memory were never compared
    memory = np.concatenate([np.full(600, 30.0), np.full(300, 60.0)])
    machine(job, 450, gpu_util_pct=[80.0], gpu_memory_pct=[memory])
    session = RuleSession(job, [GPUMemoryIncrease()])
    session.advance()
    running = session.results()["GPUMemoryIncrease"]
    assert running.status == "InProgress" and "Waiting for" in running.message
    session.advance(final=True)
    result = session.results()["GPUMemoryIncrease"]
    assert result.status == "IssuesFound" and result.violations == 1 and result.datapoints == 2
    assert result.intervals == [[T0_US + 300_000_000, T0_US + 449_500_000]]
    assert "from 30.0 % to 60.0 %" in result.recommendation


def test_gpu_memory_leaves_a_last_block_under_half_a_window_unjudged(job):
    memory = np.concatenate([np.full(600, 30.0), np.full(200, 60.0)])
    machine(job, 400, gpu_util_pct=[80.0], gpu_memory_pct=[memory])
    result = verdict(job, GPUMemoryIncrease())
    assert result.status == "NotApplicable"
    assert "it needs 100 + 500 + 250 samples per GPU (patience + a block and half a block" in (
        result.message
    )


def test_batch_size_judges_a_last_partial_block_once_the_job_ended(job):
    # busy for patience and a block, then 300 light snapshots before the job ended
    machine(job, 300, cpu_pct=20.0, gpu_util_pct=[90.0], gpu_memory_pct=[20.0])
    machine(
        job, 150, cpu_pct=20.0, gpu_util_pct=[30.0], gpu_memory_pct=[20.0], start_us=T0_US + 3e8
    )
    session = RuleSession(job, [BatchSize()])
    session.advance()
    assert session.results()["BatchSize"].status == "InProgress"
    session.advance(final=True)
    result = session.results()["BatchSize"]
    assert result.status == "IssuesFound" and result.violations == 1 and result.datapoints == 2
    assert result.intervals == [[T0_US + 300_000_000, T0_US + 449_500_000]]


def test_a_job_too_short_for_batch_size_says_it_needed_half_a_block_at_its_end(job):
    machine(job, 150, cpu_pct=20.0, gpu_util_pct=[30.0], gpu_memory_pct=[20.0])  # 300
    result = verdict(job, BatchSize())
    assert result.status == "NotApplicable"
    assert "it needs 100 + 250 snapshots per GPU (patience + half a block), it saw 300." in (
        result.message
    )
    light = verdict(job, BatchSize(patience=50))  # 250 snapshots after patience: half a block
    assert light.status == "IssuesFound" and light.datapoints == 1


def test_bottleneck_rules_without_their_host_metric_are_not_applicable(job):
    # GPU records alone (an output that holds no CPU or I/O wait records): "0 of 240 snapshots
    # had GPUs below 70 % while mean I/O wait was above 50 %" read as a clean bill of health
    # for a metric never measured
    times = snapshot_times(120)
    add_metric(job, "algo-1", times + 100, "gpu", "gpu0", "GPUUtilization", np.full(240, 5.0))
    cpu = verdict(job, CPUBottleneck())
    assert cpu.status == "NotApplicable" and cpu.message == "No CPU metrics."
    io = verdict(job, IOBottleneck())
    assert io.status == "NotApplicable" and io.message == "No I/O wait metrics."
    add_metric(job, "algo-1", times, "cpu", "cpu0", "CPUUtilization", np.full(240, 95.0))
    assert verdict(job, CPUBottleneck()).status == "IssuesFound"
    assert verdict(job, IOBottleneck()).message == "No I/O wait metrics."


def test_batch_size_without_cpu_metrics_is_judged_on_the_gpus(job):
    # GPU records alone: a block with no CPU figure was never light ("No block with CPU, GPU
    # and GPU memory all light"), whatever the GPUs did
    times = snapshot_times(150)
    add_metric(job, "algo-1", times + 100, "gpu", "gpu0", "GPUUtilization", np.full(300, 30.0))
    add_metric(
        job, "algo-1", times + 100, "gpu", "gpu0", "GPUMemoryUtilization", np.full(300, 20.0)
    )
    result = verdict(job, BatchSize(patience=100, window=100))
    assert result.status == "IssuesFound" and result.violations == 2
    assert result.message == (
        "1 GPU(s) lightly used in 2 blocks (p95 GPU utilization 30 %, GPU memory 20 % on "
        "algo-1/gpu0)."
    )


def test_many_violation_intervals_are_the_same_live_and_offline_and_reach_the_end(job):
    # a CPU bottleneck every 10 s for an hour: 360 intervals, more than are kept as they are
    times = snapshot_times(3600)
    busy = np.arange(len(times)) % 20 == 0
    add_metric(job, "algo-1", times, "cpu", "cpu0", "CPUUtilization", np.where(busy, 95.0, 20.0))
    add_metric(job, "algo-1", times, "gpu", "gpu0", "GPUUtilization", np.full(len(times), 5.0))
    live = RuleSession(job, [CPUBottleneck(threshold=1)])
    for minute in range(1, 61):
        job.visible_until_us = T0_US + minute * 60_000_000 + 7_300_000
        live.advance()
    job.visible_until_us = None
    live.advance(final=True)
    result = live.results()["CPUBottleneck"]
    assert result.status == "IssuesFound" and result.violations == 360
    assert result.intervals == verdict(job, CPUBottleneck(threshold=1)).intervals
    assert len(result.intervals) <= 201
    assert result.intervals[0][0] == times[busy][0] and result.intervals[-1][1] == times[busy][-1]


def test_load_balancing_compares_the_distance_itself_with_the_threshold(job):
    # two GPUs 0.500024 apart: rounded to 0.5 before the comparison, the pair was not "further
    # apart than threshold" and the rule found nothing
    times = snapshot_times(300)
    gpu0 = np.concatenate([np.full(302, 1.0), np.full(98, 21.0)])
    gpu1 = np.concatenate([np.full(447, 1.0), np.full(153, 51.0)])
    add_metric(job, "algo-1", times[:400], "gpu", "gpu0", "GPUUtilization", gpu0)
    add_metric(job, "algo-1", times, "gpu", "gpu1", "GPUUtilization", gpu1)
    result = verdict(job, LoadBalancing(patience=0))
    assert result.details["distances"] == {"algo-1/gpu0|algo-1/gpu1": 0.5}
    assert result.status == "IssuesFound" and result.violations == 1
