"""The HTML report: one self-contained file with every section, opened offline in a browser."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from stepscope._natural import natural_key
from stepscope.cli import main as cli_main
from stepscope.report import write_report
from stepscope.rules import ProfilerRule, Rule, Verdict, rule_configs, run_rules
from stepscope.testing import TINY_JOB, TableJob, generate_job
from tests.browser import ARTIFACTS, chromium, needs_chromium, page_errors
from tests.rules.tablejob import (
    T0_US,
    add_events,
    add_metric,
    machine,
    snapshot_times,
    training_steps,
)


class AlwaysWarns(Rule):
    description = "A user rule that always finds something."

    def scan(self, window):
        pass

    def evaluate(self):
        return Verdict(
            triggered=True,
            violations=1,
            datapoints=1,
            message="found it",
            recommendation="do the thing",
        )


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    job = generate_job(
        tmp_path_factory.mktemp("jobs") / "report-job",
        minutes=3,
        gpus=4,
        cpus=8,
        dataloader_starved=True,
        slow_steps=range(50, 55),
    )
    run_rules(job)
    return write_report(job)


def test_report_is_one_self_contained_file(report):
    assert report.name == "profiler-report.html" and report.parent.name == "rule-output"
    text = report.read_text()
    assert "Plotly.newPlot" in text  # plotly.js inlined
    markup = re.sub(r"<script[^>]*>.*?</script>", "", text, flags=re.DOTALL)
    assert not re.search(r"""(src|href)=["']https?://""", markup)
    assert "<link" not in markup and "<script src" not in text
    for title in (
        "Training job summary",
        "System usage statistics",
        "Framework metrics summary",
        "Rules summary",
        "Analyzing the training loop",
    ):
        assert title in text


def test_report_and_rule_results_are_readable_by_others(report):
    # written through mkstemp, they were owner-only (0600) whatever the umask
    results = report.parent
    for path in (report, results / "StepOutlier" / "status.json"):
        assert path.stat().st_mode & 0o777 == 0o644, path
    assert (results / "profiler-reports" / "StepOutlier.json").stat().st_mode & 0o044 == 0o044


def test_rules_summary_is_sorted_by_triggers(report):
    text = report.read_text()
    summary = text[text.index('id="rules"') : text.index('id="training-loop"')]
    names = re.findall(r'<a href="#rule-(\w+)">', summary)
    triggered = [n for n in names if f'#rule-{n}">{n}</a><div class="badge IssuesFound"' in summary]
    assert names[: len(triggered)] == triggered  # issues first
    assert "OverallSystemUsage" not in names and "ProfilerReport" not in names


def _rule_section(text: str, rule: str) -> str:
    start = text.index(f'id="rule-{rule}"')
    end = text.find('id="rule-', start + 1)
    return text[start : end if end > 0 else len(text)]


def _row_cells(section: str, name: str) -> list[str]:
    row = re.search(rf"<tr><td>{re.escape(name)}</td>(.*?)</tr>", section)
    assert row, f"no row for {name}"
    return re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))


def test_rule_sections_show_every_gpu_and_node_the_rule_measured(report):
    text = report.read_text()
    reports = report.parent / "profiler-reports"
    low_gpu = json.loads((reports / "LowGPUUtilization.json").read_text())["Details"]["gpus"]
    section = _rule_section(text, "LowGPUUtilization")
    assert len(low_gpu) == 4
    for gpu, figures in low_gpu.items():
        cells = _row_cells(section, gpu)
        assert cells[:3] == [
            str(figures["blocks"]),
            str(figures["underused"]),
            str(figures["fluctuating"]),
        ]
        assert cells[4] == f"{figures['p50']:.2f}"
    memory = json.loads((reports / "GPUMemoryIncrease.json").read_text())["Details"]["gpus"]
    section = _rule_section(text, "GPUMemoryIncrease")
    for gpu, figures in memory.items():
        assert _row_cells(section, gpu)[-1] == str(figures["violations"])
    loader = json.loads((reports / "Dataloader.json").read_text())["Details"]["nodes"]["algo-1"]
    cells = _row_cells(_rule_section(text, "Dataloader"), "algo-1")
    assert cells[0] == str(loader["cores"]) and cells[2] == str(loader["num_workers"])
    cpu = json.loads((reports / "CPUBottleneck.json").read_text())["Details"]["nodes"]["algo-1"]
    cells = _row_cells(_rule_section(text, "CPUBottleneck"), "algo-1")
    assert cells[:4] == [f"{cpu[k]:,}" for k in ("datapoints", "low_gpu", "high", "bottlenecks")]


def test_cpu_and_gpu_operator_overviews_each_have_a_table_and_a_pie(tmp_path):
    # SageMaker's "Overview: CPU operators" and "Overview: GPU operators": a table and a pie each
    job = TableJob(tmp_path / "job")
    machine(job, 60)
    add_events(
        job,
        "algo-1",
        "cpu_op",
        [T0_US + 1000, T0_US + 5000, T0_US + 9000],
        [3000, 1000, 1000],
        name=["aten::mm", "aten::add", "aten::mm"],
        source="kineto",
    )
    add_events(job, "algo-1", "kernel", [T0_US + 2000], 1500, name="volta_sgemm", source="kineto")
    report = write_report(job, output=tmp_path / "out" / "report.html")
    pies = _pies(report)
    # operators of a few milliseconds in milliseconds: in seconds every total read 0.00
    assert pies["Overview: CPU operators (ms)"] == {"aten::mm": 4.0, "aten::add": 1.0}
    assert pies["Overview: GPU operators (ms)"] == {"volta_sgemm": 1.5}
    text = report.read_text()
    assert _row_cells(text, "aten::mm") == ["2", "4.00", "80.00"]
    assert _row_cells(text, "volta_sgemm") == ["1", "1.50", "100.00"]


def test_operators_of_a_few_microseconds_are_given_in_microseconds(tmp_path):
    # a trace excerpt's operators of a few microseconds each read "0.00" milliseconds
    job = TableJob(tmp_path / "job")
    machine(job, 60)
    starts = [T0_US + 1000, T0_US + 5000, T0_US + 9000]
    names = ["aten::empty", "aten::add", "aten::empty"]
    add_events(job, "algo-1", "cpu_op", starts, [3, 1, 1], name=names, source="kineto")
    report = write_report(job, output=tmp_path / "out" / "report.html")
    assert _pies(report)["Overview: CPU operators (µs)"] == {"aten::empty": 4.0, "aten::add": 1.0}
    assert _row_cells(report.read_text(), "aten::empty") == ["2", "4.00", "80.00"]


def _pies(report: Path) -> dict[str, dict[str, float]]:
    """Each pie of the report: its title -> its slices."""
    text = report.read_text()
    figures = json.loads(re.search(r'id="figures">(.*?)</script>', text, re.DOTALL).group(1))
    return {
        f["layout"]["title"]["text"]: dict(zip(pie["labels"], pie["values"], strict=True))
        for f in figures
        for pie in f["data"]
        if pie["type"] == "pie"
    }


def test_the_collectives_pie_says_which_time_it_shows(tmp_path):
    # a trace's collective kernels and the CPU calls that launched them, which it left out
    job = TableJob(tmp_path / "job")
    machine(job, 60)
    kernel = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
    add_events(job, "algo-1", "kernel", [T0_US + 2000], 3000, name=kernel, source="kineto")
    calls = {"name": "nccl:all_reduce", "source": "kineto"}
    add_events(job, "algo-1", "user_annotation", [T0_US + 1000], 200, **calls)
    pies = _pies(write_report(job, output=tmp_path / "out" / "report.html"))
    assert pies["Collective communication, GPU kernel time (s)"] == {"AllReduce": 0.003}


def test_utilization_charts_share_the_jobs_time_origin(tmp_path):
    # GPU metrics that start a minute after the CPU's (a monitor that found the GPUs late) are
    # drawn a minute in, on the same axis as the CPU chart and the rules' intervals
    job = TableJob(tmp_path / "job")
    machine(job, 120)
    later = snapshot_times(60, start_us=T0_US + 60_000_000)
    add_metric(job, "algo-1", later, "gpu", "gpu0", "GPUUtilization", np.full(len(later), 50.0))
    text = write_report(job, output=tmp_path / "out" / "report.html").read_text()
    figures = json.loads(re.search(r'id="figures">(.*?)</script>', text, re.DOTALL).group(1))
    charts = {f["layout"]["title"]["text"]: f for f in figures}
    cpu, gpu = charts["CPU utilization over time"], charts["GPU utilization over time"]
    assert cpu["data"][0]["x"][0] == pytest.approx(0, abs=1)
    assert gpu["data"][0]["x"][0] == pytest.approx(60, abs=1)
    assert cpu["layout"]["xaxis"]["title"] == gpu["layout"]["xaxis"]["title"]


def test_step_outliers_are_shown_per_rank_of_a_node(tmp_path):
    job = TableJob(tmp_path / "job")
    machine(job, 60)
    training_steps(job, 100, step_s=0.1, rank=0, slow={50: 1.0})
    training_steps(job, 100, step_s=0.3, rank=1, seed=1)
    text = write_report(job, output=tmp_path / "out" / "report.html").read_text()
    section = _rule_section(text, "StepOutlier")
    headings = re.findall(r"<h4>(.*?):", section)
    assert headings == ["algo-1 · rank 0 · TRAIN", "algo-1 · rank 1 · TRAIN"]
    assert _row_cells(section, "50")[:1] == ["0"]  # the outlier step and its rank


def test_steps_too_few_to_judge_are_shown_as_not_judged(tmp_path):
    job = TableJob(tmp_path / "job")
    machine(job, 60)
    training_steps(job, 100, step_s=0.1)
    training_steps(job, 10, mode="EVAL", step_s=0.2, start_us=T0_US + 30_000_000, slow={0: 3.0})
    text = write_report(job, output=tmp_path / "out" / "report.html").read_text()
    section = _rule_section(text, "StepOutlier")
    evaluation = section[section.index("algo-1 · rank 0 · EVAL") : section.index("· TRAIN")]
    assert "Not judged: in 10 steps none can lie beyond 5 standard deviations." in evaluation
    assert "threshold" not in evaluation  # no threshold drawn for steps never judged
    assert re.findall(r'<td class="num">([^<]*)</td></tr>', evaluation) == ["–"]  # no outlier count


def test_steps_under_a_second_are_given_in_milliseconds(tmp_path):
    # a small model's steps of 20 ms: in seconds the table read "0.02 0.00 ... 0.02"
    job = TableJob(tmp_path / "job")
    machine(job, 60)
    training_steps(job, 100, step_s=0.02, slow={50: 0.5})
    text = write_report(job, output=tmp_path / "out" / "report.html").read_text()
    section = _rule_section(text, "StepOutlier")
    assert '<th class="num">p50 (ms)</th>' in section
    p50 = re.findall(r'<td class="num">([^<]*)</td>', section)[5]
    assert 19 < float(p50) < 21
    assert _row_cells(section, "50") == ["0", "500.00"]
    assert "Duration (ms)" in section
    # the histogram beside the table is in its unit: it read "threshold 0.264 s" over seconds
    figures = json.loads(re.search(r'id="figures">(.*?)</script>', text, re.DOTALL).group(1))
    (histogram,) = [f for f in figures if f["layout"]["title"]["text"].startswith("Step dur")]
    assert re.fullmatch(
        r"Step durations, algo-1 · rank 0 TRAIN \(threshold \d+\.\d\d ms\)",
        histogram["layout"]["title"]["text"],
    )
    assert histogram["layout"]["xaxis"]["title"]["text"] == "step duration (ms)"
    assert 15 < min(histogram["data"][0]["x"]) < 25


def test_job_summary_says_its_step_count_adds_up_every_rank(tmp_path):
    # two ranks of 100 steps: "Steps 200" read as a job of 200 steps
    job = TableJob(tmp_path / "job")
    machine(job, 60)
    training_steps(job, 100, step_s=0.1, rank=0)
    training_steps(job, 100, step_s=0.1, rank=1, seed=1)
    text = write_report(job, output=tmp_path / "out" / "report.html").read_text()
    summary = text[text.index('id="summary"') : text.index('id="system"')]
    assert _row_cells(summary, "Steps (sum over 2 ranks)") == ["200"]


def test_rules_summary_shows_parameters_as_they_were_set(tmp_path):
    # a threshold of 0.125 read 0.12, and 90 given read 90.00 beside a default of 50
    job = TableJob(tmp_path / "job")
    machine(job, 60, gpu_util_pct=[80.0, 80.0])
    rules = [
        ProfilerRule.stepscope(rule_configs.LoadBalancing(threshold=0.125)),
        ProfilerRule.stepscope(rule_configs.CPUBottleneck(cpu_threshold=90)),
    ]
    run_rules(job, rules, output_dir=tmp_path / "out")
    text = write_report(job, output=tmp_path / "out" / "report.html").read_text()
    summary = text[text.index('id="rules"') :]
    assert "threshold: 0.125<br>" in summary
    assert "cpu_threshold: 90<br>" in summary and "threshold: 50<br>" in summary


def test_report_of_custom_rules_and_command(tmp_path, capsys):
    job = generate_job(tmp_path / "custom", minutes=2, gpus=1, cpus=4)
    run_rules(job, [AlwaysWarns, "StepOutlier"])
    assert cli_main(["report", str(job)]) == 0
    path = job / "rule-output" / "profiler-report.html"
    assert str(path) in capsys.readouterr().out
    text = path.read_text()
    assert 'id="rule-AlwaysWarns"' in text and "do the thing" in text


def test_a_job_with_metric_values_out_of_range_is_reported_without_numpy_warnings(tmp_path, caplog):
    job = generate_job(tmp_path / "job", **TINY_JOB)
    bad = {"GPUUtilization": 1e308, "CPUUtilization": float("inf"), "I/OWaitPercentage": -5.0}
    for path in (job / "profiler-output" / "system").rglob("*.json"):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        for record in records[:40]:
            record["Value"] = bad.get(record["Dimension"], record["Value"])
        path.write_text("".join(json.dumps(record) + "\n" for record in records))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # NumPy's overflow and invalid value
        assert cli_main(["report", str(job)]) == 0
    assert "skipped" in caplog.text and "damaged record(s)" in caplog.text


def test_reports_written_elsewhere_show_each_jobs_own_rule_results(tmp_path):
    first = generate_job(tmp_path / "first", **TINY_JOB)
    run_rules(first, ["StepOutlier"])
    second = generate_job(tmp_path / "second", **TINY_JOB)
    run_rules(second, [AlwaysWarns])
    out = tmp_path / "reports"
    first_text = write_report(first, output=out / "first.html").read_text()
    second_text = write_report(second, output=out / "second.html").read_text()
    assert 'id="rule-StepOutlier"' in first_text and 'id="rule-AlwaysWarns"' not in first_text
    assert 'id="rule-AlwaysWarns"' in second_text and "do the thing" in second_text
    assert sorted(p.name for p in out.iterdir()) == ["first.html", "second.html"]


def test_reports_of_read_only_inputs_in_one_folder_show_each_inputs_results(tmp_path):
    # a trace has no rule-output of its own: its results go beside the report, and the report
    # of a second trace written there showed the first trace's results
    out = tmp_path / "reports"
    texts = {}
    for name, steps in (("a", 30), ("b", 70)):
        job = TableJob(tmp_path / name)
        machine(job, 60)
        training_steps(job, steps, step_s=0.1)
        texts[name] = write_report(job, output=out / f"{name}.html").read_text()
    assert "TRAIN: 30 steps" in texts["a"] and "TRAIN: 70 steps" in texts["b"]
    # results computed there for the same input (custom rules, parameters) are the report's
    run_rules(job, [AlwaysWarns], output_dir=out)
    again = write_report(job, output=out / "b-again.html").read_text()
    assert 'id="rule-AlwaysWarns"' in again


def test_job_summary_of_framework_data_alone_shows_no_measured_initialization(tmp_path):
    # without system metrics the job's start is not recorded: the summary said 0 s of
    # initialization and drew a pie of the training loop alone
    job = TableJob(tmp_path / "job")
    training_steps(job, 100, step_s=0.1)
    text = write_report(job, output=tmp_path / "report.html").read_text()
    summary = text[text.index('id="summary"') :].split("</section>")[0]
    assert "Initialization time (s)" not in summary and "Job phases" not in summary
    assert "Initialization not measured" in summary


def test_read_only_input_needs_an_output(shared_fixtures, tmp_path):
    trace = shared_fixtures / "kineto" / "a100_rank0of2_nccl.json.gz"
    out = write_report(trace, output=tmp_path / "report.html")
    text = out.read_text()
    assert "GPU kernels" in text  # kernel summaries of the detailed trace
    assert (tmp_path / "profiler-reports" / "StepOutlier.json").is_file()


@pytest.mark.browser
@needs_chromium
def test_report_opens_offline_in_a_browser(report):
    requests: list[str] = []
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        errors = page_errors(page)
        page.on("request", lambda r: requests.append(r.url))
        page.goto(report.as_uri())
        page.wait_for_function("document.querySelectorAll('.chart').length > 0")
        charts = page.evaluate("document.querySelectorAll('.chart').length")
        drawn = page.evaluate(
            "Array.from(document.querySelectorAll('.chart')).filter("
            "c => c.data && c.data.length && c.querySelector('.main-svg')).length"
        )
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "profiler-report.png"))
    assert errors == []
    assert [url for url in requests if not url.startswith("file://")] == []
    assert charts >= 8
    assert drawn == charts  # every chart placeholder was drawn with data


@pytest.mark.browser
@needs_chromium
def test_long_kernel_names_stay_inside_the_page(tmp_path):
    # a C++ template kernel name is one unbroken word of hundreds of characters: the GPU
    # operators table grew to 12,000 px and pushed its figures out of sight
    job = TableJob(tmp_path / "job")
    machine(job, 60)
    name = "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemm" + "x" * 600
    add_events(job, "algo-1", "kernel", [T0_US + 2000], 500, name=name, source="kineto")
    report = write_report(job, output=tmp_path / "out" / "report.html")
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        errors = page_errors(page)
        page.goto(report.as_uri())
        page.wait_for_function("document.querySelectorAll('.chart .main-svg').length > 0")
        widths = page.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
    assert errors == []
    assert widths[0] <= widths[1]


@pytest.mark.browser
@needs_chromium
def test_rule_status_badges_hold_their_text(report):
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(report.as_uri())
        # each badge's width beside the width of its text
        widths = page.evaluate(
            "Array.from(document.querySelectorAll('.badge')).map(b => {"
            " const range = document.createRange(); range.selectNodeContents(b);"
            " return [b.textContent, b.getBoundingClientRect().width,"
            " range.getBoundingClientRect().width]; })"
        )
    assert widths
    cramped = [(text, box, inner) for text, box, inner in widths if box < inner + 12]
    assert cramped == [], "badge text touches or leaves its pill"


@pytest.mark.browser
@needs_chromium
def test_rule_names_and_statuses_in_the_rules_summary_are_not_broken_mid_word(report):
    # the summary's first column shrank to a few letters: "NoIssuesFoun" over "d",
    # "LowGPUUtilizati" over "on"
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(report.as_uri())
        lines = page.evaluate(
            "Array.from(document.querySelectorAll('table.rules td:first-child > *')).map(e => {"
            " const range = document.createRange(); range.selectNodeContents(e);"
            " return [e.textContent, new Set(Array.from(range.getClientRects(),"
            " r => Math.round(r.top))).size]; })"
        )
    assert len(lines) >= 18  # a link and a badge for each of the nine rules
    assert [text for text, count in lines if count != 1] == []


@pytest.mark.browser
@needs_chromium
def test_rules_summary_fits_a_narrow_window(report):
    # with names kept whole, the parameters (never wrapped) pushed the table out of the page
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 700, "height": 900})
        page.goto(report.as_uri())
        right = page.evaluate("document.querySelector('table.rules').getBoundingClientRect().right")
    assert right <= 700


def test_every_rule_link_lands_on_the_part_that_shows_the_rule(report):
    page = report.read_text()
    targets = set(re.findall(r'id="(rule-[^"]+)"', page))
    links = set(re.findall(r'href="#(rule-[^"]+)"', page))
    assert links and links <= targets
    # the UI's rule statuses link every rule of the job to the report
    rules = {p.name for p in report.parent.iterdir() if (p / "status.json").is_file()}
    assert rules and {f"rule-{r}" for r in rules} <= targets


def test_system_usage_of_a_node_without_cpu_metrics_gives_its_gpu_figure(tmp_path):
    # a node with GPU records alone read "algo-2: no CPU metrics.", its GPUs at 30 % unsaid
    job = TableJob(tmp_path / "job")
    machine(job, 60, cpu_pct=20.0, gpu_util_pct=[30.0], noise=0.0)
    times = snapshot_times(60)
    add_metric(job, "algo-2", times, "gpu", "gpu0", "GPUUtilization", np.full(len(times), 30.0))
    text = write_report(job, output=tmp_path / "out" / "report.html").read_text()
    system = text[text.index('id="system"') : text.index('id="rules"')]
    assert (
        "On algo-2 the 95th percentile of GPU utilization is 30 % (no CPU metrics). The GPUs "
        "are not fully used: see the bottleneck and data-loading rules below." in system
    )
    assert (
        "On algo-1 the 95th percentile of CPU utilization is 20 % and of GPU utilization 30 %. "
        "Both are low" in system
    )


@pytest.mark.browser
@needs_chromium
def test_names_that_open_a_script_in_html_leave_the_charts_drawn(tmp_path):
    # an operator named "<!--<script>" made the browser read the rest of the page as the
    # figures' script: no chart was drawn and plotly.js never ran
    job = TableJob(tmp_path / "job")
    machine(job, 60)
    names = ["<!--<script>", "aten::add"]
    add_events(job, "algo-1", "cpu_op", [T0_US + 1000, T0_US + 5000], [3000, 1000], name=names)
    report = write_report(job, output=tmp_path / "out" / "report.html")
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        errors = page_errors(page)
        page.goto(report.as_uri())
        page.wait_for_load_state()
        charts = page.evaluate("document.querySelectorAll('.chart').length")
        drawn = page.evaluate(
            "Array.from(document.querySelectorAll('.chart')).filter("
            "c => c.querySelector('.main-svg')).length"
        )
        labels = page.evaluate(
            "Array.from(document.querySelectorAll('.legendtext'), e => e.textContent)"
        )
    assert errors == []
    assert charts >= 2 and drawn == charts
    assert "<!--<script>" in labels


def test_a_report_to_a_folder_is_refused_before_the_rules_write_beside_it(tmp_path):
    # the rules of a read-only input ran first, and their twelve folders of results were left
    # beside the folder given as the report's file, in the folder holding it
    job = TableJob(tmp_path / "job")
    machine(job, 60)
    training_steps(job, 30, step_s=0.1)
    where = tmp_path / "out"
    (where / "reports").mkdir(parents=True)
    with pytest.raises(IsADirectoryError) as raised:
        write_report(job, output=where / "reports")
    assert raised.value.filename == str(where / "reports")
    assert [p.name for p in where.iterdir()] == ["reports"]


def test_nodes_and_gpus_come_in_natural_order(tmp_path):
    # algo-10 came between algo-1 and algo-2, and gpu10 between gpu1 and gpu2, in every table,
    # narrative, chart and rule message
    job = TableJob(tmp_path / "job")
    for rank, node in enumerate(("algo-1", "algo-2", "algo-10")):
        machine(job, 60, node=node, gpu_util_pct=[50.0] * 11, gpu_memory_pct=[40.0] * 11)
        training_steps(job, 30, node=node, rank=rank * 5)
    text = write_report(job, output=tmp_path / "out" / "report.html").read_text()

    def in_natural_order(names: list[str]) -> bool:
        return len(names) > 1 and names == sorted(names, key=natural_key)

    for part in (
        "system",
        "rule-LowGPUUtilization",
        "rule-GPUMemoryIncrease",
        "rule-CPUBottleneck",
    ):
        section = text[text.index(f'id="{part}"') :].split("</section>")[0]
        names = re.findall(r"<tr><td>(algo-[^<]*)</td>", section)
        assert in_natural_order(list(dict.fromkeys(names))), part
    figures = json.loads(re.search(r'id="figures">(.*?)</script>', text, re.DOTALL).group(1))
    for figure in figures:
        names = [trace.get("name") or trace.get("x", [""])[0] for trace in figure["data"]]
        if sum(str(name).startswith("algo-") for name in names) > 1:
            assert in_natural_order(names), figure["layout"]["title"]["text"]
    outliers = _rule_section(text, "StepOutlier")
    assert in_natural_order(re.findall(r"<h4>(algo-\d+) ·", outliers))
    narratives = re.findall(r"On (algo-\d+) the 95th percentile", text)
    assert in_natural_order(narratives)
    balance = _rule_section(text, "LoadBalancing")
    assert in_natural_order(re.findall(r"<tr><td>(algo-[^<]*)</td>", balance))


def test_a_rule_whose_part_has_nothing_to_show_still_has_its_place_saying_why(tmp_path):
    # a trace has no system metrics: the system usage part was left out with its anchor, so
    # the UI's link to OverallSystemUsage opened the report at its top, saying nothing of it
    job = TableJob(tmp_path / "job")
    training_steps(job, 30, step_s=0.1)
    out = tmp_path / "out"
    text = write_report(job, output=out / "report.html").read_text()
    rules = {p.stem for p in (out / "profiler-reports").glob("*.json")}
    assert "OverallSystemUsage" in rules
    assert {f"rule-{rule}" for rule in rules} <= set(re.findall(r'id="(rule-[^"]+)"', text))
    system = text[text.index('id="system"') :].split("</section>")[0]
    assert "No system metrics." in system
    assert '<a href="#system">System usage statistics</a>' in text


def test_a_gpu_with_one_memory_block_shows_no_rise_measured(tmp_path):
    # with one block nothing was compared, yet its largest rise read 0.00 points, as measured
    job = TableJob(tmp_path / "job")
    machine(job, 400, gpu_util_pct=[50.0], gpu_memory_pct=[40.0])  # patience + one block
    text = write_report(job, output=tmp_path / "out" / "report.html").read_text()
    cells = _row_cells(_rule_section(text, "GPUMemoryIncrease"), "algo-1/gpu0")
    assert cells[0] == "1"  # blocks
    assert cells[3] == "–"  # largest rise
