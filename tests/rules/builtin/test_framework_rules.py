"""The rules that read framework events, on data that must trigger them and data that must not."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from stepscope.rules import ProfilerRule, rule_configs, run_rules
from stepscope.rules.builtin import (
    Dataloader,
    MaxInitializationTime,
    OverallFrameworkMetrics,
    ProfilerReport,
    StepOutlier,
)
from stepscope.rules.builtin.dataloader import MAX_RUNS
from stepscope.rules.engine import RuleSession
from stepscope.store import open_job
from tests.rules.tablejob import T0_US, add_events, machine, training_steps, verdict

STALL = {100: 2.0, 101: 2.0, 102: 2.0, 103: 2.0, 104: 2.0}


def outlier_steps(result, node="0-algo-1", mode="TRAIN"):
    return [o["step"] for o in result.details["step_details"][node][mode]["outliers"]]


def test_a_stall_of_five_steps_names_exactly_those_steps(job):
    training_steps(job, 300, step_s=0.1, slow=STALL)
    result = verdict(job, StepOutlier(n_outliers=3))
    assert result.status == "IssuesFound"
    assert outlier_steps(result) == [100, 101, 102, 103, 104]
    assert result.violations == 5
    assert len(result.intervals) == 1  # five consecutive steps: one interval
    assert result.intervals[0][1] - result.intervals[0][0] == pytest.approx(10e6, rel=0.01)
    assert "step 10" in result.recommendation and "2.000 s" in result.recommendation


def test_default_tolerates_ten_outliers(job):
    training_steps(job, 300, step_s=0.1, slow=STALL)
    result = verdict(job, StepOutlier())
    assert result.status == "NoIssuesFound" and result.violations == 5


def test_steady_steps_have_no_outlier(job):
    training_steps(job, 300, step_s=0.1)
    result = verdict(job, StepOutlier(n_outliers=0))
    assert result.status == "NoIssuesFound" and result.violations == 0


def test_train_and_eval_are_judged_apart_and_mode_filters(job):
    training_steps(job, 300, step_s=0.1, slow=STALL)
    # EVAL steps are all 1 s: slow compared with TRAIN, normal for EVAL
    training_steps(job, 50, mode="EVAL", step_s=1.0, start_us=T0_US + 60_000_000, slow={20: 10.0})
    both = verdict(job, StepOutlier(n_outliers=0))
    assert outlier_steps(both, mode="TRAIN") == [100, 101, 102, 103, 104]
    assert outlier_steps(both, mode="EVAL") == [20]
    assert both.violations == 6

    only_eval = verdict(job, StepOutlier(n_outliers=0, mode="EVAL"))
    assert set(only_eval.details["step_details"]["0-algo-1"]) == {"EVAL"}
    assert only_eval.violations == 1


def test_every_outlier_is_counted_not_only_the_steps_listed(job):
    # Half the steps last 0.1 s and half 0.3 s: each is 0.1 s (one standard deviation) from the
    # 0.2 s mean, so with stddev 0.5 all 2,600 are outliers, more than the details list.
    dur = np.tile([100_000.0, 300_000.0], 1300)
    start = T0_US + np.concatenate([[0.0], np.cumsum(dur)[:-1]])
    add_events(job, "algo-1", "Step:ModeKeys.TRAIN", start, dur, step=np.arange(2600))
    result = verdict(job, StepOutlier(stddev=0.5))
    assert result.violations == 2600
    assert result.details["step_details"]["0-algo-1"]["TRAIN"]["number_of_outliers"] == 2600
    assert result.message.startswith("2600 outlier step(s)")


def test_each_rank_is_judged_on_its_own_steps(job):
    # Two ranks on one node: rank 0's steps take 0.1 s with five 0.3 s spikes, rank 1's 1 s.
    # Pooled, rank 1's steps widen the spread so much that rank 0's spikes look normal.
    training_steps(job, 300, step_s=0.1, slow={n: 0.3 for n in STALL}, rank=0)
    training_steps(job, 300, step_s=1.0, rank=1, seed=1)
    result = verdict(job, StepOutlier(n_outliers=0))
    assert result.status == "IssuesFound" and result.violations == 5
    assert outlier_steps(result, node="0-algo-1") == list(STALL)
    assert outlier_steps(result, node="1-algo-1") == []
    details = result.details["step_details"]
    assert details["0-algo-1"]["TRAIN"]["steps"] == details["1-algo-1"]["TRAIN"]["steps"] == 300
    assert {o["rank"] for o in details["0-algo-1"]["TRAIN"]["outliers"]} == {0}


def test_outlier_steps_of_several_ranks_are_named_with_their_rank(job):
    # every rank numbers its steps from 0: "(steps 50, 50)" did not say whose steps they were
    training_steps(job, 100, step_s=0.1, rank=0, slow={50: 1.0})
    training_steps(job, 100, step_s=0.1, rank=1, slow={50: 1.0}, seed=1)
    result = verdict(job, StepOutlier(n_outliers=0))
    assert "50 of rank 0" in result.message and "50 of rank 1" in result.message
    assert result.recommendation.startswith("2 steps were outliers; the slowest, step 50 of rank ")


def test_a_single_outlier_is_spoken_of_in_the_singular(job):
    training_steps(job, 100, step_s=0.1, slow={50: 1.0})
    result = verdict(job, StepOutlier(n_outliers=0))
    assert result.violations == 1
    assert result.recommendation.startswith("1 step was an outlier; the slowest, step 50, took ")


def test_ranks_of_traces_that_name_no_host_are_labelled_by_rank(job):
    for rank in (0, 1):
        start = T0_US + np.arange(30) * 50_000.0
        add_events(job, "", "user_annotation", start, 50_000.0, name="ProfilerStep#0", rank=rank)
    assert set(verdict(job, StepOutlier()).details["step_details"]) == {"rank 0", "rank 1"}


def test_step_outlier_not_applicable_without_steps(job):
    machine(job, 60)
    assert verdict(job, StepOutlier()).status == "NotApplicable"


def test_a_mode_the_job_never_ran_is_named_not_reported_as_missing_steps(job):
    # "No step events." sent the user looking for a collection problem: the job has TRAIN steps
    training_steps(job, 100)
    result = verdict(job, StepOutlier(mode="EVAL"))
    assert result.status == "NotApplicable"
    assert "EVAL" in result.message and "TRAIN" in result.message


def test_kineto_profiler_steps_count_as_train_steps_on_a_rank_without_step_events(job):
    # a PyTorch profiler trace read on its own: its ProfilerStep ranges are the steps
    dur = np.full(120, 50_000.0)
    dur[60] = 1e6
    start = T0_US + np.concatenate([[0.0], np.cumsum(dur)[:-1]])
    add_events(job, "algo-1", "user_annotation", start, dur, name="ProfilerStep#0", source="kineto")
    result = verdict(job, StepOutlier(n_outliers=0))
    assert result.datapoints == 120
    assert result.triggered and outlier_steps(result) == [0]


def test_a_detailed_windows_profiler_steps_are_not_counted_again(job):
    # A rank profiled with detailed windows has the steps of its traces as step events too.
    start, dur = training_steps(job, 120, step_s=0.05)
    window = slice(5, 7)
    add_events(
        job,
        "algo-1",
        "user_annotation",
        start[window] + 10,
        dur[window] - 20,
        name="ProfilerStep#5",
        source="kineto",
    )
    # another rank's trace read beside it: its steps count
    add_events(
        job, "algo-1", "user_annotation", start[:30], dur[:30], name="ProfilerStep#0", rank=1
    )
    assert verdict(job, StepOutlier()).datapoints == 120 + 30
    assert verdict(job, MaxInitializationTime()).details["steps"] == 120 + 30
    framework = verdict(job, OverallFrameworkMetrics()).details
    assert framework["phase"]["TRAIN"] == pytest.approx((dur.sum() + dur[:30].sum()) / 1e6)
    assert "user_annotation" not in framework["general"]


def test_max_initialization_time_fires_when_the_first_step_is_late(job):
    machine(job, 26 * 60)
    training_steps(job, 100, start_us=T0_US + 25 * 60_000_000)
    result = verdict(job, MaxInitializationTime())
    assert result.status == "IssuesFound"
    assert result.details["initialization_s"] == pytest.approx(1500, abs=1)
    assert verdict(job, MaxInitializationTime(threshold=30)).status == "NoIssuesFound"


def test_max_initialization_time_summarises_the_job(job):
    machine(job, 120)
    training_steps(job, 500, step_s=0.1, start_us=T0_US + 30_000_000)
    result = verdict(job, MaxInitializationTime())
    assert result.status == "NoIssuesFound"
    d = result.details
    assert d["initialization_s"] == pytest.approx(30, abs=0.01)
    assert d["training_loop_s"] == pytest.approx(50, rel=0.05)
    assert d["initialization_pct"] + d["training_loop_pct"] + d[
        "finalization_pct"
    ] == pytest.approx(100)


def test_max_initialization_time_without_system_metrics_says_it_is_not_measured(job):
    # a trace of framework events alone said "The first step started 0.00 min after the job's
    # first data", a measured zero: the job's start is not recorded
    training_steps(job, 100, step_s=0.1)
    result = verdict(job, MaxInitializationTime())
    assert result.status == "NotApplicable"
    assert "0.00 min" not in result.message
    assert result.message.startswith("Initialization not measured")
    assert "initialization_s" not in result.details
    assert result.details["training_loop_s"] == pytest.approx(9.9, abs=0.2)
    # a first step long after the first event is late whatever came before that event
    add_events(job, "algo-1", "DataLoaderIterInitialize", [T0_US - 30 * 60e6], [1e6])
    late = verdict(job, MaxInitializationTime())
    assert late.status == "IssuesFound" and "at least 30.00 min" in late.message


def test_max_initialization_time_without_any_step(job):
    machine(job, 120)
    undecided = verdict(job, MaxInitializationTime())
    assert undecided.status == "NotApplicable"
    # it said "No training step yet after 2.0 min." of a job that had ended
    assert "yet" not in undecided.message
    assert undecided.message.startswith("The job ended before the rule could decide")
    assert verdict(job, MaxInitializationTime(threshold=1)).status == "IssuesFound"


def test_max_initialization_time_of_a_job_without_data_does_not_wait_for_it(job):
    # a finished recording with nothing in it said "No data yet."
    add_events(job, "algo-1", "Forward", [], [])
    result = verdict(job, MaxInitializationTime())
    assert result.status == "NotApplicable" and result.message == "No data."


def test_max_initialization_time_fires_under_profiler_report(job):
    machine(job, 26 * 60, gpu_util_pct=[80.0])
    training_steps(job, 100, start_us=T0_US + 25 * 60_000_000)
    session = RuleSession(job, [ProfilerRule.stepscope(rule_configs.ProfilerReport())])
    for minute in range(1, 27):
        job.visible_until_us = T0_US + minute * 60_000_000
        session.advance()
    job.visible_until_us = None
    session.advance(final=True)
    results = session.results()
    assert results["MaxInitializationTime"].status == "IssuesFound"
    assert results["ProfilerReport"].triggered
    assert "MaxInitializationTime" in results["ProfilerReport"].message


def test_overall_framework_metrics_totals_and_labels(job):
    start, dur = training_steps(job, 100, step_s=0.1)
    add_events(job, "algo-1", "cpu_op", start, 10_000, name="aten::mm", source="kineto")
    add_events(job, "algo-1", "kernel", start, 30_000, name="sgemm", source="kineto")
    add_events(job, "algo-1", "DataLoaderIter", start - 5000, 4000, name="DataLoaderIter::GetNext")
    result = verdict(job, OverallFrameworkMetrics())
    d = result.details
    assert d["ratio"] == {"CPU": pytest.approx(1.0), "GPU": pytest.approx(3.0)}
    assert d["forward_backward"]["forward"] == pytest.approx(dur.sum() * 0.3 / 1e6)
    assert d["forward_backward"]["backward"] == pytest.approx(dur.sum() * 0.5 / 1e6)
    assert d["phase"]["TRAIN"] == pytest.approx(dur.sum() / 1e6)
    assert d["general"]["DataLoaderIter"] == pytest.approx(0.4)
    assert d["GPU"][0]["name"] == "sgemm" and d["CPU"][0]["name"] == "aten::mm"
    assert not result.triggered


def test_step_time_of_several_ranks_is_said_to_be_summed(job):
    # two ranks of 10 s each: "20.0 s in steps" read as more time than the job lasted
    training_steps(job, 100, step_s=0.1, rank=0)
    training_steps(job, 100, step_s=0.1, rank=1, seed=1)
    message = verdict(job, OverallFrameworkMetrics()).message
    assert "in steps summed over 2 ranks" in message


def test_gpu_annotation_ranges_are_not_counted_as_gpu_operators(job):
    # a trace's gpu_user_annotation spans the kernels launched under an annotation: counted as
    # a GPU operator it doubled the GPU time and topped the GPU operators (all of a DDP forward)
    start, _ = training_steps(job, 10, step_s=0.1)
    add_events(job, "algo-1", "kernel", start, 30_000, name="sgemm", source="kineto")
    for name in ("DistributedDataParallel.forward", "nccl:all_reduce"):
        add_events(job, "algo-1", "gpu_user_annotation", start, 60_000, name=name, source="kineto")
    d = verdict(job, OverallFrameworkMetrics()).details
    assert d["ratio"]["GPU"] == pytest.approx(0.3)
    assert [row["name"] for row in d["GPU"]] == ["sgemm"]
    assert d["horovod"] == {}
    assert d["general"] == {}  # the same ranges on the CPU (user_annotation) are counted there


def test_a_traces_profiling_window_is_no_framework_operation(job):
    # Kineto's "PyTorch Profiler (0)" span (category Trace) covers the whole detailed window:
    # it was the largest of the "other framework operations"
    start, _ = training_steps(job, 10, step_s=0.1)
    add_events(job, "algo-1", "Trace", [start[2]], 500_000, name="PyTorch Profiler (0)")
    add_events(job, "algo-1", "user_annotation", start[2:7], 5_000, name="Optimizer.step")
    d = verdict(job, OverallFrameworkMetrics()).details
    assert d["general"] == {"user_annotation": pytest.approx(0.025)}


def test_collectives_are_gpu_kernel_time_when_the_job_has_collective_kernels(job):
    # the CPU call of a collective only launches its kernel: a pie of both added unlike times
    start, _ = training_steps(job, 10, step_s=0.1)
    for name, gpu_us, cpu_us in (("AllReduce", 20_000, 1_000), ("Broadcast", 5_000, 500)):
        kernel = f"ncclKernel_{name}_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
        add_events(job, "algo-1", "kernel", start, gpu_us, name=kernel, source="kineto")
        call = "nccl:all_reduce" if name == "AllReduce" else "nccl:broadcast"
        add_events(job, "algo-1", "user_annotation", start, cpu_us, name=call, source="kineto")
    d = verdict(job, OverallFrameworkMetrics()).details
    assert d["horovod"] == {"AllReduce": pytest.approx(0.2), "Broadcast": pytest.approx(0.05)}
    assert d["collective_time"] == "GPU kernel time"


def test_collectives_without_kernels_are_the_calls_cpu_time(job):
    start, _ = training_steps(job, 10, step_s=0.1)
    for name, dur_us in (("all_reduce", 8_000), ("broadcast", 2_000)):
        add_events(job, "algo-1", "Collective", start, dur_us, name=name, source="collective")
    d = verdict(job, OverallFrameworkMetrics()).details
    assert d["horovod"] == {"all_reduce": pytest.approx(0.08), "broadcast": pytest.approx(0.02)}
    assert d["collective_time"] == "CPU time"


def test_horovod_collectives_are_its_activities_not_its_tensors(job):
    # a Horovod timeline's process (the event's category) is a tensor, its events the
    # activities: the pie had a slice per tensor
    start, _ = training_steps(job, 10, step_s=0.1)
    for tensor in (
        "Adam_Allreduce/HorovodAllreduce_dense_0",
        "Adam_Allreduce/HorovodAllreduce_fc_0",
    ):
        for activity, dur_us in (("NEGOTIATE_ALLREDUCE", 1_000), ("ALLREDUCE", 4_000)):
            add_events(job, "algo-1", tensor, start, dur_us, name=activity, source="horovod")
    d = verdict(job, OverallFrameworkMetrics()).details
    assert d["horovod"] == {
        "ALLREDUCE": pytest.approx(0.08),
        "NEGOTIATE_ALLREDUCE": pytest.approx(0.02),
    }


def test_collectives_of_a_recorded_nccl_trace_are_its_nccl_kernels(shared_fixtures, tmp_path):
    path = shared_fixtures / "kineto" / "a100_rank0of2_nccl.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    kernels: dict[str, float] = {}
    for event in events:
        if event.get("cat") == "kernel" and event["name"].startswith("ncclKernel_"):
            collective = event["name"].split("_")[1]
            kernels[collective] = kernels.get(collective, 0.0) + event["dur"] / 1e6
    results = run_rules(open_job(path), ["OverallFrameworkMetrics"], output_dir=tmp_path)
    d = results["OverallFrameworkMetrics"].details
    assert d["collective_time"] == "GPU kernel time"
    assert d["horovod"] == {k: pytest.approx(v, abs=1e-6) for k, v in kernels.items()}
    assert set(kernels) == {"AllReduce", "Broadcast"}


def starving_loader(job, workers: int, cores: int = 32, seconds: int = 60, gpus: int = 1):
    machine(job, seconds, cores=cores, gpu_util_pct=[20.0] * gpus)
    start, _ = training_steps(job, seconds * 5, step_s=0.2)
    add_events(
        job,
        "algo-1",
        "DataLoaderIter",
        start + 1000,
        150_000,
        name="DataLoaderIter::GetNext",
        args=[{"pid": 500 + i % workers, "worker_id": i % workers} for i in range(len(start))],
    )
    add_events(
        job,
        "algo-1",
        "DataLoaderIterInitialize",
        [T0_US],
        1000,
        name="_MultiProcessingDataLoaderIter.__init__",
        args={"num_workers": workers, "pin_memory": False},
    )


def test_starved_data_loader_triggers_dataloader(job):
    starving_loader(job, workers=2)
    result = verdict(job, Dataloader())
    assert result.status == "IssuesFound"
    node = result.details["nodes"]["algo-1"]
    assert node["cores"] == 32 and node["dataloaders"] == 2 and node["num_workers"] == 2
    assert node["getnext_share_of_step_pct"] == pytest.approx(75, abs=3)
    assert "raise num_workers from 2 to 23" in result.recommendation
    assert "pin_memory=True" in result.recommendation
    assert result.details["getnext_ms"]["p50"] == pytest.approx(150, rel=0.02)


def test_pin_memory_is_advised_only_on_a_node_with_gpus(job):
    # pinned memory speeds up copies to a GPU; a CPU-only node has nothing to copy to
    starving_loader(job, workers=2, gpus=0)
    result = verdict(job, Dataloader())
    assert result.status == "IssuesFound"
    assert "raise num_workers from 2 to 23" in result.recommendation
    assert "pin_memory" not in result.recommendation


def test_getnext_share_holds_when_only_a_few_steps_are_profiled(job):
    # data-loader profiling covers a few steps (SageMaker's default: step 7 only) while step
    # events cover every step: the share compares the wait per batch with the time per step
    machine(job, 60, cores=32, gpu_util_pct=[20.0])
    start, _ = training_steps(job, 300, step_s=0.2)
    add_events(
        job,
        "algo-1",
        "DataLoaderIter",
        start[7:9] + 1000,
        150_000,
        name="DataLoaderIter::GetNext",
        args={"worker_id": 0},
    )
    node = verdict(job, Dataloader()).details["nodes"]["algo-1"]
    assert node["getnext_share_of_step_pct"] == pytest.approx(75, abs=3)


def slow_steps_with_four_workers(job, seconds: int = 64):
    """4 cores, steps of 2 s, 4 workers taking turns to deliver a batch; returns the workers'
    lifetime spans, for the test to add (a span is written when its worker stops)."""
    machine(job, seconds, cores=4, gpu_util_pct=[80.0])
    start, _ = training_steps(job, (seconds - 4) // 2, step_s=2.0, start_us=T0_US + 2_000_000)
    add_events(
        job,
        "algo-1",
        "DataLoaderIter",
        start + 1000,
        5_000,
        name="DataLoaderIter::GetNext",
        args=[{"worker_id": i % 4} for i in range(len(start))],
    )
    add_events(
        job,
        "algo-1",
        "DataLoaderIterInitialize",
        [T0_US + 500_000],
        1000,
        name="_MultiProcessingDataLoaderIter.__init__",
        args={"num_workers": 4, "pin_memory": True},
    )
    return lambda: add_events(
        job,
        "algo-1",
        "DataLoaderWorker",
        [T0_US + 1_000_000] * 4,
        (seconds - 2) * 1_000_000,
        args=[{"worker_id": w} for w in range(4)],
    )


def test_workers_count_in_every_second_they_load_not_only_when_a_batch_arrives(job):
    # a batch arrives every 2 s, but the 4 workers prefetch all the time; counting only the
    # seconds batches arrived in saw 1 loader and advised "raise num_workers from 4 to 3"
    slow_steps_with_four_workers(job)()
    result = verdict(job, Dataloader())
    assert result.details["nodes"]["algo-1"]["dataloaders"] == 4
    assert result.status == "NoIssuesFound"


def test_a_worker_span_written_at_its_end_counts_in_seconds_scanned_before(job):
    # the live engine has scanned a worker's seconds long before its span is written: the
    # verdict must still be the one an offline pass gives
    add_workers = slow_steps_with_four_workers(job, seconds=300)
    live = RuleSession(job, [Dataloader()])
    for minute in range(1, 6):
        job.visible_until_us = T0_US + minute * 60_000_000
        live.advance()
    job.visible_until_us = None
    add_workers()
    live.advance(final=True)
    offline = RuleSession(job, [Dataloader()])
    offline.advance(final=True)
    nodes = offline.results()["Dataloader"].details["nodes"]
    assert nodes["algo-1"]["dataloaders"] == 4
    assert live.results()["Dataloader"].details["nodes"] == nodes


def test_the_runs_a_persistent_worker_leaves_until_its_span_stay_bounded(job):
    # a worker's batches 8 s apart left one run of seconds each until its span came at the end
    # of the job: the live engine's state grew with every step of a job that runs for days
    add_workers = slow_steps_with_four_workers(job, seconds=4 * 3600)
    live = RuleSession(job, [Dataloader()])
    [rule] = live.rules
    for quarter in range(1, 17):
        job.visible_until_us = T0_US + quarter * 900_000_000
        live.advance()
        assert max(len(runs) for runs in rule.active["algo-1"].values()) <= MAX_RUNS
    job.visible_until_us = None
    add_workers()
    live.advance(final=True)
    assert live.results()["Dataloader"].details["nodes"]["algo-1"]["dataloaders"] == 4


def test_advice_without_the_loaders_initialization_names_no_unknown_num_workers(job):
    # by default data-loader profiling covers one step, not the epoch's start where the loader
    # is initialized: its num_workers is unknown ("lower num_workers from None to 4")
    machine(job, 60, cores=2, gpu_util_pct=[80.0])
    add_events(
        job,
        "algo-1",
        "DataLoaderWorker",
        [T0_US + 1_000_000] * 8,
        55_000_000,
        args=[{"worker_id": w} for w in range(8)],
    )
    result = verdict(job, Dataloader())
    assert result.status == "IssuesFound"
    assert "None" not in result.recommendation
    assert "set the DataLoader's num_workers to 4." in result.recommendation


def test_advice_is_per_rank_for_ranks_whose_loader_initialization_was_not_profiled(job):
    # two ranks share 8 cores with one worker each: 6 loaders are healthy, 3 per rank
    machine(job, 60, cores=8, gpu_util_pct=[80.0, 80.0])
    for rank in (0, 1):
        add_events(
            job,
            "algo-1",
            "DataLoaderWorker",
            [T0_US + 1_000_000],
            55_000_000,
            rank=rank,
            args={"worker_id": 0},
        )
    result = verdict(job, Dataloader())
    assert result.details["nodes"]["algo-1"]["dataloaders"] == 2
    assert "num_workers to 3 per rank (2 rank(s) on the node)." in result.recommendation


def test_enough_loaders_do_not_trigger(job):
    starving_loader(job, workers=4, cores=4)
    assert verdict(job, Dataloader()).status == "NoIssuesFound"


def test_dataloader_not_applicable_without_loader_events(job):
    machine(job, 60)
    training_steps(job, 100)
    assert verdict(job, Dataloader()).status == "NotApplicable"


def test_profiler_report_runs_every_rule_with_customised_parameters(job):
    machine(job, 120, cores=4, cpu_pct=96.0, gpu_util_pct=[4.0, 5.0], noise=1.0)
    training_steps(job, 300, step_s=0.1, slow=STALL)
    config = rule_configs.ProfilerReport(CPUBottleneck_cpu_threshold=99, StepOutlier_n_outliers=2)
    session = RuleSession(job, [ProfilerRule.stepscope(config)])
    session.advance(final=True)
    results = session.results()
    assert len(results) == 12
    assert results["CPUBottleneck"].status == "NoIssuesFound"  # 96 % is below 99 %
    assert results["StepOutlier"].status == "IssuesFound"
    assert results["ProfilerReport"].details["rules"]["StepOutlier"] == "IssuesFound"
    assert isinstance(session.rules[0], ProfilerReport)


def test_too_few_steps_to_hold_an_outlier_are_undecided(job):
    # 26 steps, one of them 100x slower: it lies sqrt(25) = 5 standard deviations from the mean,
    # no more, so no step of 26 can ever be beyond stddev=5. "NoIssuesFound: 0 outlier step(s)
    # ... in 26 steps" was a verdict the data could not have contradicted.
    training_steps(job, 26, step_s=0.1, slow={10: 10.0})
    result = verdict(job, StepOutlier(n_outliers=0))
    assert result.status == "NotApplicable"
    assert "The job ended before the rule could decide: it needs more than 26 steps" in (
        result.message
    )
    assert "it saw 26." in result.message
    # with stddev 3, ten steps suffice: the slow step is found
    judged = verdict(job, StepOutlier(n_outliers=0, stddev=3))
    assert judged.status == "IssuesFound" and outlier_steps(judged) == [10]


def test_a_starved_loader_seen_for_fewer_seconds_than_patience_is_undecided(job):
    # 8 s of a loader that starves 32 cores: the verdict waits for patience (10 s) and the job
    # ended first; "NoIssuesFound ... median 2 data-loading processes on 32 cores" said it was fine
    starving_loader(job, workers=2, seconds=8)
    result = verdict(job, Dataloader())
    assert result.status == "NotApplicable" and not result.triggered
    assert result.message.startswith("The job ended before the rule could decide")
    assert verdict(job, Dataloader(patience=5)).status == "IssuesFound"


def test_profiler_report_lists_each_rule_with_the_status_that_rule_has(job):
    # ProfilerReport's details said "NoIssuesFound" (or "NotApplicable") of rules whose own
    # status was InProgress while the job ran, and NoIssuesFound of rules the job was too short
    # to judge
    machine(job, 600, gpu_util_pct=[80.0, 80.0])
    training_steps(job, 300, step_s=0.1, slow=STALL)
    session = RuleSession(job, [ProfilerRule.stepscope(rule_configs.ProfilerReport())])
    job.visible_until_us = T0_US + 400_000_000
    session.advance()
    for final in (False, True):
        results = session.results()
        listed = results["ProfilerReport"].details["rules"]
        assert listed == {name: results[name].status for name in listed}, final
        assert len(listed) == 11
        job.visible_until_us = None
        session.advance(final=True)
    assert "InProgress" not in listed.values()


def test_a_mode_with_too_few_steps_beside_a_longer_one_is_said_not_judged(job):
    # 300 TRAIN steps are judged; 10 EVAL steps cannot hold an outlier beyond 5 standard
    # deviations, however slow the first is, so they were reported as judged with none
    training_steps(job, 300, step_s=0.1)
    training_steps(job, 10, mode="EVAL", step_s=0.2, start_us=T0_US + 60_000_000, slow={0: 3.0})
    result = verdict(job, StepOutlier())
    eval_details = result.details["step_details"]["0-algo-1"]["EVAL"]
    assert eval_details["judged"] is False
    assert result.details["step_details"]["0-algo-1"]["TRAIN"]["judged"] is True
    assert (
        "Not judged, too few steps (a rank and mode needs more than 26): 10 EVAL steps of "
        "0-algo-1." in result.message
    )


def test_a_node_the_dataloader_rule_could_not_judge_is_said_so(job):
    # algo-2 has no CPU metrics and algo-3 loaded data in 9 seconds only (patience 10): the summary
    # read "algo-2: median 2 data-loading processes on 0 cores" as if both had been judged
    machine(job, 120, cores=4)
    machine(job, 120, node="algo-3", cores=4, seed=3)
    for node, steps in (("algo-1", 200), ("algo-2", 200), ("algo-3", 16)):
        start, _ = training_steps(job, steps, step_s=0.5, node=node)
        add_events(
            job,
            node,
            "DataLoaderIter",
            start - 20_000,
            15_000,
            name="DataLoaderIter::GetNext",
            args=[{"worker_id": i % 2} for i in range(len(start))],
        )
    result = verdict(job, Dataloader())
    assert result.status == "IssuesFound"
    assert result.message == (
        "algo-1: median 2 data-loading processes on 4 cores; algo-2: median 2 data-loading "
        "processes, not judged (no CPU metrics); algo-3: median 2 data-loading processes on 4 "
        "cores, not judged (9 seconds of data loading, patience 10) (healthy: 70-200 % of cores)."
    )
    assert result.recommendation.startswith("algo-1: ") and "algo-3" not in result.recommendation


def test_violation_intervals_cover_the_whole_of_a_long_job(job):
    # 300 outlier steps over 25 minutes: intervals past the 200th were dropped, so the report's
    # timeline of issues ended two thirds into the job, with no word of the rest
    slow = {step: 2.0 for step in range(10, 6000, 20)}
    start, dur = training_steps(job, 6000, step_s=0.2, slow=slow)
    last_us = int(start[5990] + dur[5990])
    result = verdict(job, StepOutlier(stddev=3, n_outliers=0))
    assert result.violations == 300
    intervals = result.intervals
    assert len(intervals) <= 201 and intervals == sorted(intervals)
    assert intervals[0][0] <= start[10] and intervals[-1][1] >= last_us
    for step in slow:  # every outlier lies in an interval
        assert any(a <= start[step] and int(start[step] + dur[step]) <= b for a, b in intervals)


def test_forward_and_backward_are_not_counted_again_in_their_sub_modules(job):
    # with sub-module events on, each Forward span holds its sub-modules' spans: forward and
    # backward were their time twice over, more than the steps that hold them
    start, dur = training_steps(job, 100, step_s=0.1)
    for i in range(3):  # three sub-modules filling the pass
        add_events(
            job, "algo-1", "Forward-SubModuleInternal", start + 1000 + i * dur * 0.1, dur * 0.1
        )
        backward = start + 1000 + dur * 0.3 + i * dur * 0.5 / 3
        add_events(job, "algo-1", "Backward-SubModuleInternal", backward, dur * 0.5 / 3)
    d = verdict(job, OverallFrameworkMetrics()).details
    assert d["forward_backward"]["forward"] == pytest.approx(dur.sum() * 0.3 / 1e6)
    assert d["forward_backward"]["backward"] == pytest.approx(dur.sum() * 0.5 / 1e6)


def test_forward_and_backward_of_sub_module_events_alone(job):
    # a job that recorded only its sub-modules' events: their time is the passes'
    start = T0_US + np.arange(10) * 100_000
    add_events(job, "algo-1", "Forward-SubModuleInternal", start, 30_000)
    add_events(job, "algo-1", "Backward-SubModuleInternal", start + 30_000, 50_000)
    d = verdict(job, OverallFrameworkMetrics()).details
    assert d["forward_backward"] == {"forward": pytest.approx(0.3), "backward": pytest.approx(0.5)}
