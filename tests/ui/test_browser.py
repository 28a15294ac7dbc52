"""The Profiler UI in a real browser (headless Chromium through Playwright) against a real server.

One server on 127.0.0.1 serves a generated job and a recorded GPU trace. The tests load jobs,
open dashboards, change ``k``, create a custom-annotation histogram, unload, and save settings;
every page must render without console errors and without a request leaving 127.0.0.1.
Screenshots of each page go to ``test-artifacts/`` for a human to look at.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.request import Request, urlopen

import pytest

from stepscope.store.layout import job_end_marker_paths
from stepscope.testing import generate_job
from tests.browser import ARTIFACTS, chromium, fail_first_request, needs_chromium, page_errors
from tests.servers import serve_app

from .conftest import T0_US

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

GPU_TRACE = "a100_rank0of2_nccl"
CPU_JOB = "generated-job"
LIVE_JOB = "still-training"

pytestmark = [pytest.mark.browser, needs_chromium]

#: panels that must show data for each job; every other panel must say plainly it has none
DATA_PANELS = {
    CPU_JOB: {
        "gpu_active_time",
        "gpu_utilization",
        "cpu_active_time",
        "cpu_utilization",
        "step_time",
    },
    GPU_TRACE: {
        "gpu_active_time",
        "gpu_utilization",
        "kernel_time_all",
        "kernel_time_top",
        "kernel_launches_all",
        "kernel_launches_top",
        "step_time",
        "kernel_precision",
        "gpu_activity",
        "memory_operations",
        "step_breakdown",
    },
}


@pytest.fixture(scope="module")
def server(tmp_path_factory, shared_fixtures: Path) -> Iterator[dict[str, Any]]:
    from stepscope.ui import create_app

    tmp = tmp_path_factory.mktemp("ui-browser")
    root = tmp / "jobs"
    job = generate_job(root / CPU_JOB, gpus=2, cpus=8, minutes=3)
    # status files as the rule engine writes them (RuleResult.to_status)
    for rule, status, triggered, violations, message in [
        ("CPUBottleneck", "IssuesFound", True, 14, "The CPU was the bottleneck in 14 of 360."),
        ("IOBottleneck", "NoIssuesFound", False, 3, "I/O was the bottleneck in 3 of 360."),
    ]:
        status_dir = job / "rule-output" / rule
        status_dir.mkdir(parents=True)
        (status_dir / "status.json").write_text(
            json.dumps(
                {
                    "rule": rule,
                    "status": status,
                    "message": message,
                    "updated_us": T0_US,
                    "triggered": triggered,
                    "violations": violations,
                    "datapoints": 360,
                }
            )
        )
    (job / "rule-output" / "profiler-report.html").write_text("<!doctype html><title>r</title>")
    live = generate_job(root / LIVE_JOB, gpus=1, cpus=2, minutes=1)
    meta = json.loads((live / "job.json").read_text())
    (live / "job.json").write_text(json.dumps({**meta, "status": "Running", "end_time_us": None}))
    for marker in job_end_marker_paths(live / "profiler-output"):  # none while it trains
        marker.unlink(missing_ok=True)
    settings_path = tmp / "config" / "ui-settings.json"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STEPSCOPE_CACHE_DIR", str(tmp / "cache"))
        app = create_app(
            [root, shared_fixtures / "kineto" / f"{GPU_TRACE}.json.gz"],
            settings_path=settings_path,
        )
        with serve_app(app) as base:
            yield {"base": base, "settings_path": settings_path, "live_job": live}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    expect.set_options(timeout=60_000)  # loading a trace the first time builds its cache
    with chromium() as browser:
        yield browser


@pytest.fixture
def page(browser, server) -> Iterator[Any]:
    """A 1440x900 page that records console errors and every request it makes.

    The browser's clock is far from UTC, as a user's may be, so times must say their zone.
    """
    context = browser.new_context(
        viewport={"width": 1440, "height": 900}, timezone_id="America/Los_Angeles"
    )
    page = context.new_page()
    requests: list[str] = []
    errors = page_errors(page)
    page.on("request", lambda r: requests.append(r.url))
    page.set_default_timeout(60_000)
    page.expected_console_errors = []  # substrings of errors a test provokes on purpose
    yield page
    unexpected = [e for e in errors if not any(x in e for x in page.expected_console_errors)]
    assert unexpected == [], f"console errors: {unexpected}"
    leaving = [u for u in requests if not u.startswith(server["base"] + "/")]
    assert leaving == [], f"requests left 127.0.0.1: {leaving}"
    assert page.locator(".notice.error").count() == 0
    assert "[object " not in page.locator("main").inner_text()  # no unrendered DOM values
    context.close()


def _shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"ui-{name}.png"), full_page=True)


def _ensure_loaded(page, base: str, name: str) -> None:
    page.goto(base + "/")
    row = page.locator("#job-list tbody tr", has_text=name).first
    expect(row).to_be_visible()
    box = row.locator("input[type=checkbox]")
    if box.is_enabled():
        box.check()
        page.click("#load-button")
    radio = page.locator("#loaded-profiles tr", has_text=name).locator("input[type=radio]")
    expect(radio).to_be_enabled()


def _loaded_job_id(page, base: str, name: str) -> str:
    """Load job ``name`` (from the Load profile page) and return its id."""
    _ensure_loaded(page, base, name)
    return next(j["id"] for j in _api(base, "/api/jobs")["jobs"] if j["name"] == name)


def _open_dashboard(page, base: str, name: str) -> None:
    _ensure_loaded(page, base, name)
    page.locator("#loaded-profiles tr", has_text=name).locator("input[type=radio]").click()
    page.wait_for_url("**/dashboard?job=*")
    expect(page.locator("h1")).to_have_text(name)
    expect(page.locator("article.panel")).to_have_count(13)
    expect(page.locator("article.panel:not([data-state])")).to_have_count(0)


def _api(base: str, path: str) -> Any:
    with urlopen(base + path, timeout=60) as response:
        return json.load(response)


def _panel_states(page) -> dict[str, str]:
    cards = page.locator("article.panel")
    return {
        cards.nth(i).get_attribute("data-panel"): cards.nth(i).get_attribute("data-state")
        for i in range(cards.count())
    }


def test_load_page_lists_jobs_and_loads_them(page, server):
    page.goto(server["base"] + "/")
    expect(page.locator("#job-list tbody tr")).to_have_count(3)
    row = page.locator("#job-list tbody tr", has_text=CPU_JOB)
    expect(row).to_contain_text("Completed")
    expect(row).to_contain_text("3 min 0 s")
    expect(row).to_contain_text("algo-1")
    expect(row).to_contain_text("Not loaded")
    # a newer compressed trace is dated only at its end: listed by when it was written, until
    # loaded; its one file is rank 0 of the 2 its header names
    trace = page.locator("#job-list tbody tr", has_text=GPU_TRACE)
    expect(trace).to_contain_text("— (file written ")
    expect(trace).to_contain_text("rank 0 of 2")
    expect(page.locator("#load-button")).to_be_disabled()
    for name in (CPU_JOB, GPU_TRACE):
        page.locator("#job-list tbody tr", has_text=name).locator("input[type=checkbox]").check()
    page.click("#load-button")
    expect(page.locator("#loaded-profiles input[type=radio]:not([disabled])")).to_have_count(2)
    expect(trace).to_contain_text("Loaded")
    expect(trace).to_contain_text("2024-05-23 00:15:22 UTC")  # its base time + first ts
    _shot(page, "load-profile")


def test_a_load_the_server_refuses_says_so_and_leaves_load_usable(page, server):
    base = server["base"]
    job = next(j for j in _api(base, "/api/jobs")["jobs"] if j["name"] == CPU_JOB)
    if job["load_state"] != "not_loaded":
        urlopen(Request(f"{base}/api/jobs/{job['id']}/load", method="DELETE"), timeout=60)
    page.expected_console_errors.append("status of 500")
    failed = fail_first_request(page, "**/api/jobs/*/load", "the disk went away")
    page.goto(base + "/")
    page.locator("#job-list tbody tr", has_text=CPU_JOB).locator("input[type=checkbox]").check()
    page.click("#load-button")
    notice = page.get_by_role("alert")
    expect(notice).to_contain_text(f"“{CPU_JOB}” could not be loaded: the disk went away")
    expect(page.locator("#load-button")).to_be_enabled()  # the job is still ticked
    notice.get_by_role("button", name="Retry").click()
    radio = page.locator("#loaded-profiles tr", has_text=CPU_JOB).locator("input[type=radio]")
    expect(radio).to_be_enabled()
    expect(notice).to_have_count(0)
    assert len(failed) == 1


@pytest.mark.parametrize("request_path", ["/api/loaded", "/api/jobs"])
def test_lists_the_server_fails_to_give_say_so_and_can_be_retried(page, server, request_path):
    page.expected_console_errors.append("status of 500")
    failed = fail_first_request(page, f"**{request_path}", "the disk went away")
    page.goto(server["base"] + "/")
    notice = page.get_by_role("alert")
    expect(notice).to_contain_text("could not be read: the disk went away")
    expect(page.locator("h1")).to_have_text("Load profile")
    notice.get_by_role("button", name="Retry").click()
    expect(page.locator("#job-list tbody tr", has_text=CPU_JOB)).to_be_visible()
    expect(notice).to_have_count(0)
    assert len(failed) == 1


def test_dashboard_of_a_generated_job(page, server):
    _open_dashboard(page, server["base"], CPU_JOB)
    states = _panel_states(page)
    assert {name for name, state in states.items() if state == "data"} == DATA_PANELS[CPU_JOB]
    empty = page.locator("article.panel[data-state=empty] .empty")
    for i in range(empty.count()):
        assert empty.nth(i).inner_text().strip()
    # utilization charts are drawn by plotly
    expect(page.locator("article[data-panel=cpu_utilization] .main-svg").first).to_be_visible()
    # k picks among kernels: a job without any offers no k to change
    expect(page.locator("article[data-panel=kernel_time_all]")).to_contain_text("no GPU kernels")
    expect(page.locator("input.k-input:visible")).to_have_count(0)
    # the step times' legend stays off the bars
    step_time = page.locator("article[data-panel=step_time]")
    legend = step_time.locator(".legend").bounding_box()
    plot_area = step_time.locator(".nsewdrag").first.bounding_box()
    assert legend is not None and plot_area is not None
    assert legend["y"] + legend["height"] <= plot_area["y"] + 1
    rules = page.locator("#rules")
    expect(rules.locator("tr[data-rule=CPUBottleneck]")).to_contain_text("Issues found")
    # the triggers column counts violations of a rule that triggered, 0 of one that did not
    expect(rules.locator("tr[data-rule=CPUBottleneck] td").nth(2)).to_have_text("14 of 360")
    expect(rules.locator("tr[data-rule=IOBottleneck] td").nth(2)).to_have_text("0 of 360")
    report = rules.get_by_role("link", name="Open the profiling report")
    assert report.get_attribute("href").endswith("/report")
    _shot(page, "dashboard-generated")


def test_dashboard_of_a_gpu_trace_with_k_and_hover(page, server):
    _open_dashboard(page, server["base"], GPU_TRACE)
    expect(page.locator(".page-head .lead")).to_contain_text("729 ms · rank 0 of 2")
    states = _panel_states(page)
    assert {name for name, state in states.items() if state == "data"} == DATA_PANELS[GPU_TRACE]
    _shot(page, "dashboard-gpu")

    legend = page.locator("article[data-panel=kernel_time_all] .legend .traces")
    expect(legend).to_have_count(16)  # 15 kernels and "others"
    k = page.locator("article[data-panel=kernel_time_all] input.k-input")
    expect(k).to_be_visible()
    k.fill("5")
    k.press("Enter")
    expect(legend).to_have_count(6)
    k.fill("2.5")  # not a number of kernels: the panel keeps k and says so in the field
    k.press("Enter")
    expect(k).to_have_value("5")
    expect(legend).to_have_count(6)
    # and what it takes: 150 went back to 5 without a word
    k.fill("150")
    k.press("Enter")
    expect(k).to_have_value("5")
    message = k.evaluate("(node) => node.validationMessage")
    assert message == "k is a whole number of kernels from 1 to 100; the chart still shows 5."
    k.fill("7")
    k.press("Enter")
    expect(legend).to_have_count(8)
    assert k.evaluate("(node) => node.validationMessage") == ""
    launches = page.locator("article[data-panel=kernel_launches_all] .legend .traces")
    expect(launches).to_have_count(16)  # each panel has its own k

    slice_ = page.locator("article[data-panel=kernel_time_top] g.slice").first
    slice_.hover()
    hover = page.locator("article[data-panel=kernel_time_top] .hovertext").first
    expect(hover).to_contain_text("% of all kernel time")
    expect(hover).to_contain_text(" s")


def test_every_kernel_slice_has_a_colour_of_its_own_which_its_legend_entry_shows(page, server):
    # the palette's 16 colours repeated from the 17th slice: two kernels looked alike
    _open_dashboard(page, server["base"], GPU_TRACE)
    panel = page.locator("article[data-panel=kernel_time_all]")
    k = panel.locator("input.k-input")
    k.fill("60")
    k.press("Enter")
    expect(panel.locator(".legend .traces")).to_have_count(61)  # 60 kernels and "others"
    fill = "paths => paths.map((p) => p.style.fill)"
    slices = panel.locator("g.slice path.surface").evaluate_all(fill)
    legend = panel.locator(".legend .traces .legendpoints path").evaluate_all(fill)
    assert len(set(slices)) == len(slices) == 61, slices
    assert legend == slices


def test_charts_stay_in_their_cards_when_the_window_is_resized(page, server):
    # plotly's own resize took the height of the chart's box, which has none of its own: each
    # chart kept its drawing and spilled over the cards below it
    _open_dashboard(page, server["base"], GPU_TRACE)
    boxes = """() => [...document.querySelectorAll('article.panel[data-state=data] .chart')]
        .map((chart) => {
          const box = chart.getBoundingClientRect();
          const drawn = chart.querySelector('.main-svg').getBoundingClientRect();
          return { panel: chart.dataset.panel, box: [box.width, box.height],
                   drawn: [drawn.width, drawn.height] };
        })"""
    for width in (1000, 600, 1440):
        page.set_viewport_size({"width": width, "height": 900})
        until = time.monotonic() + 30
        charts = page.evaluate(boxes)
        # every chart drawn for its new width
        while any(abs(c["box"][0] - c["drawn"][0]) >= 1 for c in charts):
            assert time.monotonic() < until, (width, charts)
            time.sleep(0.1)
            charts = page.evaluate(boxes)
        assert len(charts) == len(DATA_PANELS[GPU_TRACE])
        spilled = [c for c in charts if c["drawn"][1] > c["box"][1] + 1]
        assert spilled == [], (width, spilled)


def test_a_kernel_pie_keeps_its_size_in_a_window_of_half_a_screen(page, server):
    # beside a legend of kernel names wider than the room left, the pie shrank to a dot
    page.set_viewport_size({"width": 960, "height": 900})
    _open_dashboard(page, server["base"], GPU_TRACE)
    for name in ("kernel_time_all", "kernel_launches_top"):
        panel = page.locator(f"article[data-panel={name}]")
        expect(panel.locator(".legend .traces").first).to_be_visible()
        pie = panel.locator("g.pielayer g.trace").bounding_box()
        legend = panel.locator(".legend").bounding_box()
        assert pie["width"] >= 200 and pie["height"] >= 200, (name, pie)
        beside = legend["x"] >= pie["x"] + pie["width"] - 1
        under = legend["y"] >= pie["y"] + pie["height"] - 1
        assert beside or under, (name, pie, legend)


def test_in_a_narrow_window_a_kernel_pies_names_go_on_lines_that_fit_it(page, server):
    # under the pie, a kernel name longer than the window's width ran off the card, cut off
    page.set_viewport_size({"width": 600, "height": 900})
    job_id = _loaded_job_id(page, server["base"], GPU_TRACE)
    _open_dashboard(page, server["base"], GPU_TRACE)
    for name in ("kernel_time_all", "kernel_launches_top"):
        panel = page.locator(f"article[data-panel={name}]")
        expect(panel.locator(".legend .legendtext").first).to_be_visible()
        chart = panel.locator(".chart").bounding_box()
        texts = panel.locator(".legend .legendtext")
        rights = texts.evaluate_all("(ts) => ts.map((t) => t.getBoundingClientRect().right)")
        shown = texts.evaluate_all("(ts) => ts.map((t) => t.textContent)")
        labels = _api(server["base"], f"/api/jobs/{job_id}/dashboard/{name}")["pies"][0]["labels"]
        assert shown == labels  # every name whole
        assert max(rights) <= chart["x"] + chart["width"], (name, rights, chart)


def test_in_a_narrow_window_the_job_list_scrolls_in_its_card_not_the_page(page, server):
    # the list's columns made the whole page wider than the window, its heading and all
    page.set_viewport_size({"width": 600, "height": 900})
    page.goto(server["base"] + "/")
    expect(page.locator("#job-list tbody tr")).to_have_count(3)
    assert page.evaluate("document.documentElement.scrollWidth") <= 600
    box = page.locator("#job-list .scroll")
    assert box.evaluate("(node) => node.scrollWidth > node.clientWidth")  # it scrolls sideways


def test_in_a_narrow_window_the_loaded_profiles_scroll_in_their_card_not_the_page(page, server):
    # the list of loaded profiles made the page wider than the window, its trash icons past it
    _ensure_loaded(page, server["base"], GPU_TRACE)
    page.set_viewport_size({"width": 420, "height": 900})
    page.reload()
    expect(page.locator("#loaded-profiles tbody tr").first).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 420
    trash = page.locator("#loaded-profiles tr", has_text=GPU_TRACE).get_by_role("button")
    trash.scroll_into_view_if_needed()
    box = trash.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 420, box


def test_custom_annotation_histogram(page, server):
    _open_dashboard(page, server["base"], GPU_TRACE)
    # as in SageMaker Profiler, the annotation is picked from the list or typed
    expect(page.locator("#annotation-names option[value='## forward ##']")).to_have_count(1)
    page.locator("#annotation-name").fill("no such annotation")
    page.click("#create-histogram")
    expect(page.locator("#annotation-note")).to_contain_text("no annotation named")
    page.locator("#annotation-name").fill("## forward ##")
    page.click("#create-histogram")
    card = page.locator("article[data-panel=annotation_histogram]")
    expect(card).to_have_attribute("data-state", "data")
    expect(card.locator("h3")).to_contain_text("## forward ##")
    expect(card.locator(".main-svg").first).to_be_visible()
    card.scroll_into_view_if_needed()
    _shot(page, "dashboard-custom-histogram")
    card.get_by_role("button", name="Remove this histogram").click()
    expect(card).to_have_count(0)


def test_enter_in_the_annotation_field_does_what_create_histogram_does(page, server):
    # Enter did nothing: only the button made the histogram
    _open_dashboard(page, server["base"], GPU_TRACE)
    field = page.locator("#annotation-name")
    expect(field).to_be_enabled()
    field.fill("no such annotation")
    field.press("Enter")
    expect(page.locator("#annotation-note")).to_contain_text("no annotation named")
    field.fill("## forward ##")
    field.press("Enter")
    card = page.locator("article[data-panel=annotation_histogram]")
    expect(card).to_have_attribute("data-state", "data")
    expect(card.locator("h3")).to_contain_text("## forward ##")
    expect(page.locator("#annotation-note")).to_contain_text("Pick or type an annotation")
    field.press("Enter")  # the histogram shown already is not made twice
    expect(card).to_have_count(1)


def test_no_annotation_can_be_picked_before_the_jobs_names_arrive(page, server):
    # typed before the list of names came, any name was said not to be the job's
    held: list[Any] = []
    page.route("**/annotations", lambda route: held.append(route))  # the list is on its way
    _open_dashboard(page, server["base"], GPU_TRACE)
    expect(page.locator("#annotation-name")).to_be_disabled()
    expect(page.locator("#create-histogram")).to_be_disabled()
    expect(page.locator("#annotation-note")).to_contain_text("Reading the job's annotation names")
    held[0].continue_()  # it arrives
    expect(page.locator("#annotation-name")).to_be_enabled()
    page.locator("#annotation-name").fill("## forward ##")
    page.click("#create-histogram")
    card = page.locator("article[data-panel=annotation_histogram]")
    expect(card).to_have_attribute("data-state", "data")


def test_annotation_names_the_server_fails_to_give_say_so_and_can_be_retried(page, server):
    # the job has names: "no custom annotations" would be false
    page.expected_console_errors.append("status of 500")
    failed = fail_first_request(page, "**/annotations", "the disk went away")
    _open_dashboard(page, server["base"], GPU_TRACE)
    notice = page.get_by_role("alert")
    expect(notice).to_contain_text(
        "The job's annotation names could not be read: the disk went away"
    )
    expect(page.get_by_text("no custom annotations")).to_have_count(0)
    expect(page.locator("#annotation-name")).to_be_disabled()
    expect(page.locator("#create-histogram")).to_be_disabled()
    notice.get_by_role("button", name="Retry").click()
    expect(page.locator("#annotation-name")).to_be_enabled()
    expect(page.locator("#annotation-names option[value='## forward ##']")).to_have_count(1)
    expect(page.locator("#annotation-note")).to_contain_text("Pick or type an annotation")
    expect(notice).to_have_count(0)
    assert len(failed) == 1


def test_information_page(page, server):
    _open_dashboard(page, server["base"], CPU_JOB)
    page.click("nav a[data-page=info]")
    expect(page.locator("h1")).to_contain_text(CPU_JOB)
    for title in ("Job", "Data", "Nodes and hardware", "Ranks", "Hyperparameters"):
        expect(page.locator(f"[data-section='{title}']")).to_be_visible()
    expect(page.locator("[data-section='Nodes and hardware']")).to_contain_text("algo-1")
    _shot(page, "information")


def test_times_read_the_same_on_every_page_and_say_their_zone(page, server):
    job = next(j for j in _api(server["base"], "/api/jobs")["jobs"] if j["name"] == CPU_JOB)
    start = datetime.fromtimestamp(job["start_us"] / 1e6, tz=timezone.utc)
    expected = start.strftime("%Y-%m-%d %H:%M:%S UTC")
    page.goto(server["base"] + "/")
    expect(page.locator("#job-list tbody tr", has_text=CPU_JOB)).to_contain_text(expected)
    _open_dashboard(page, server["base"], CPU_JOB)
    expect(page.locator(".page-head .lead")).to_contain_text(f"Started {expected}")
    page.click("nav a[data-page=info]")
    expect(page.locator("[data-section='Job']")).to_contain_text(expected)


def test_unload(page, server):
    _ensure_loaded(page, server["base"], GPU_TRACE)
    loaded = page.locator("#loaded-profiles tr", has_text=GPU_TRACE)
    loaded.get_by_role("button", name=f"Unload {GPU_TRACE}").click()
    expect(loaded).to_have_count(0)
    expect(page.locator("#job-list tbody tr", has_text=GPU_TRACE)).to_contain_text("Not loaded")


def test_unloading_a_profile_another_tab_unloaded_takes_it_off_the_list(page, server):
    _ensure_loaded(page, server["base"], GPU_TRACE)
    job = next(j["id"] for j in _api(server["base"], "/api/jobs")["jobs"] if j["name"] == GPU_TRACE)
    request = Request(f"{server['base']}/api/jobs/{job}/load", method="DELETE")
    with urlopen(request, timeout=60) as response:  # another tab unloads it
        assert response.status == 204
    page.expected_console_errors.append("status of 404")  # the browser logs the refusal
    loaded = page.locator("#loaded-profiles tr", has_text=GPU_TRACE)
    loaded.get_by_role("button", name=f"Unload {GPU_TRACE}").click()
    expect(loaded).to_have_count(0)
    expect(page.locator("#job-list tbody tr", has_text=GPU_TRACE)).to_contain_text("Not loaded")


def test_an_unload_the_server_refuses_says_so_and_can_be_retried(page, server):
    _ensure_loaded(page, server["base"], GPU_TRACE)
    page.expected_console_errors.append("status of 500")
    failed = fail_first_request(page, "**/api/jobs/*/load", "the disk went away")
    loaded = page.locator("#loaded-profiles tr", has_text=GPU_TRACE)
    loaded.get_by_role("button", name=f"Unload {GPU_TRACE}").click()
    notice = page.get_by_role("alert")
    expect(notice).to_contain_text(f"“{GPU_TRACE}” could not be unloaded: the disk went away")
    expect(loaded).to_have_count(1)
    notice.get_by_role("button", name="Retry").click()
    expect(loaded).to_have_count(0)
    expect(notice).to_have_count(0)
    assert len(failed) == 1


def test_settings_persist(page, server):
    page.goto(server["base"] + "/settings")
    expect(page.locator("#auto-shutdown-enabled")).to_have_value("true")
    expect(page.locator("#auto-shutdown-hours")).to_have_value("2")
    _shot(page, "settings")
    page.locator("#auto-shutdown-hours").fill("6")
    page.click("#save-settings")
    expect(page.locator(".form-status")).to_have_text("Saved.")
    page.locator("#auto-shutdown-enabled").select_option("false")
    expect(page.locator("#auto-shutdown-hours")).to_be_disabled()
    page.click("#save-settings")
    expect(page.locator(".form-status")).to_have_text("Saved.")
    page.reload()
    expect(page.locator("#auto-shutdown-enabled")).to_have_value("false")
    expect(page.locator("#auto-shutdown-hours")).to_have_value("6")
    assert json.loads(server["settings_path"].read_text()) == {
        "auto_shutdown_enabled": False,
        "auto_shutdown_threshold_hours": 6.0,
    }
    page.expected_console_errors.append("status of 422")  # the browser logs refused saves
    page.locator("#auto-shutdown-enabled").select_option("true")
    page.locator("#auto-shutdown-hours").fill("0")
    page.click("#save-settings")
    expect(page.locator(".form-status")).to_contain_text("greater than 0")


def test_dashboard_without_a_selected_profile_says_how_to_get_one(page, server):
    page.goto(server["base"] + "/dashboard")
    page.evaluate("() => window.localStorage.clear()")
    page.reload()
    expect(page.locator(".notice")).to_contain_text("Load a profile")


@pytest.mark.parametrize("request_path", ["/api/jobs", "/api/panels"])
def test_a_dashboard_the_server_fails_to_give_says_so_and_can_be_retried(
    page, server, request_path: str
):
    # the job's record, or the list of panels: the page keeps its title and navigation
    job_id = _loaded_job_id(page, server["base"], CPU_JOB)
    page.expected_console_errors.append("status of 500")
    failed = fail_first_request(page, f"**{request_path}", "the disk went away")
    page.goto(f"{server['base']}/dashboard?job={job_id}")
    notice = page.get_by_role("alert")
    expect(notice).to_contain_text("The dashboard could not be read: the disk went away")
    expect(page.locator("h1")).to_have_text(f"Dashboard · {CPU_JOB}")
    expect(page.locator("nav a[data-page=timeline]")).to_have_attribute(
        "href", f"/timeline?job={job_id}"
    )
    notice.get_by_role("button", name="Retry").click()
    expect(page.locator("h1")).to_have_text(CPU_JOB)
    expect(page.locator("article.panel:not([data-state])")).to_have_count(0)
    expect(notice).to_have_count(0)
    assert len(failed) == 1


def test_an_information_page_the_server_fails_to_give_says_so_and_can_be_retried(page, server):
    job_id = _loaded_job_id(page, server["base"], CPU_JOB)
    page.expected_console_errors.append("status of 500")
    failed = fail_first_request(page, "**/api/jobs/*/info", "the disk went away")
    page.goto(f"{server['base']}/info?job={job_id}")
    notice = page.get_by_role("alert")
    expect(notice).to_contain_text(
        "The profile's information could not be read: the disk went away"
    )
    expect(page.locator("h1")).to_have_text(f"Information · {CPU_JOB}")
    notice.get_by_role("button", name="Retry").click()
    expect(page.locator("[data-section='Job']")).to_be_visible()
    expect(notice).to_have_count(0)
    assert len(failed) == 1


@pytest.mark.parametrize("page_name", ["dashboard", "timeline", "info"])
def test_a_list_of_loaded_profiles_the_server_fails_to_give_says_so_at_every_try(
    page, server, page_name: str
):
    # the first thing each page of a profile asks for; it fails again at the first Retry
    job_id = _loaded_job_id(page, server["base"], CPU_JOB)
    page.expected_console_errors.append("status of 500")
    failed = fail_first_request(page, "**/api/loaded", "the disk went away", times=2)
    page.goto(f"{server['base']}/{page_name}?job={job_id}")
    notice = page.get_by_role("alert")
    said = "The list of loaded profiles could not be read: the disk went away"
    expect(notice).to_contain_text(said)
    with page.expect_response("**/api/loaded"):
        notice.get_by_role("button", name="Retry").click()
    expect(notice).to_contain_text(said)
    notice.get_by_role("button", name="Retry").click()
    expect(page.locator("h1")).to_contain_text(CPU_JOB)
    expect(notice).to_have_count(0)
    assert len(failed) == 2


def test_a_running_jobs_dashboard_keeps_what_it_shows_when_a_refresh_fails(page, server):
    page.clock.install()
    _open_dashboard(page, server["base"], LIVE_JOB)
    states = _panel_states(page)
    page.expected_console_errors.append("status of 500")
    failed = fail_first_request(page, "**/api/jobs", "the disk went away")
    page.clock.fast_forward(15_000)
    live = page.locator(".live")
    expect(live).to_have_text(
        "Live: refreshes every 15 s (the last one failed: the disk went away)"
    )
    expect(page.locator("h1")).to_have_text(LIVE_JOB)
    assert _panel_states(page) == states
    page.clock.fast_forward(15_000)  # the next refresh asks again, and reads it
    expect(live).to_have_text("Live: refreshes every 15 s")
    assert len(failed) == 1


def test_a_running_jobs_timeline_goes_on_following_it_when_a_refresh_fails(page, server):
    page.clock.install()
    _open_dashboard(page, server["base"], LIVE_JOB)
    page.click("nav a[data-page=timeline]")
    page.wait_for_selector("#tl-canvas[data-loaded='1']")
    field = page.locator("#tl-find")
    field.fill("Step:ModeKeys.TRAIN")
    field.press("Enter")
    selection = page.locator("#tl-selection")
    expect(selection).to_contain_text("Step:ModeKeys.TRAIN")
    page.expected_console_errors.append("status of 500")
    failed = fail_first_request(page, "**/timeline/tracks", "the disk went away")
    page.clock.fast_forward(15_000)
    notice = page.locator("#tl-live-error")
    expect(notice).to_contain_text("the disk went away")
    expect(selection).to_contain_text("Step:ModeKeys.TRAIN")  # what the page showed stays
    with page.expect_request("**/timeline/tracks"):  # the next refresh asks again
        page.clock.fast_forward(15_000)
    expect(notice).to_have_count(0)
    assert len(failed) == 1


def test_a_running_jobs_timeline_rereads_its_slices_as_a_background_poll(page, server):
    # a timeline left open in a tab while its job trains must not keep the server from its
    # auto shutdown: what the page reads by itself is marked as a poll, as the dashboard's is
    page.clock.install()
    _open_dashboard(page, server["base"], LIVE_JOB)
    page.click("nav a[data-page=timeline]")
    page.wait_for_selector("#tl-canvas[data-loaded='1']")
    with page.expect_request("**/timeline/window?*") as reread:
        page.clock.fast_forward(15_000)
    assert reread.value.headers.get("x-stepscope-poll") == "1"


def test_a_running_jobs_timeline_keeps_its_tracks_when_a_live_reread_fails(page, server):
    # the first look at the job list, which tells whether to follow the job, fails: the
    # timeline stays (it was replaced by "This page could not be shown"), and follows the job
    # once the list is read again
    page.clock.install()
    job_id = _loaded_job_id(page, server["base"], LIVE_JOB)
    page.expected_console_errors.append("status of 500")
    failed = fail_first_request(page, "**/api/jobs", "the disk went away")
    page.goto(f"{server['base']}/timeline?job={job_id}")
    page.wait_for_selector("#tl-canvas[data-loaded='1']")
    notice = page.locator("#tl-live-error")
    expect(notice).to_contain_text("The job's latest data could not be read: the disk went away")
    expect(page.locator("h1")).to_have_text(f"Timeline · {LIVE_JOB}")
    with page.expect_response("**/api/jobs"):
        notice.get_by_role("button", name="Retry").click()
    expect(notice).to_have_count(0)
    # followed: the next reread, 15 s on, asks for the job's tracks again
    with page.expect_request(f"**/api/jobs/{job_id}/timeline/tracks"):
        page.clock.fast_forward(15_000)
    expect(page.locator("#tl-canvas")).to_be_visible()
    assert len(failed) == 1


def test_a_running_jobs_duration_is_timed_by_the_server_not_the_browsers_clock(page, server):
    # a browser on another machine whose clock is an hour behind the server's: the job is no
    # less under way for it (it read "-3600000 ms")
    page.clock.set_fixed_time(datetime.fromtimestamp(T0_US / 1e6 - 3600, tz=timezone.utc))
    page.goto(server["base"] + "/")
    row = page.locator("#job-list tbody tr", has_text=LIVE_JOB)
    expect(row).to_contain_text("Running")
    duration = row.locator("td").nth(4).inner_text()
    assert re.fullmatch(r"\d+ h \d+ min", duration), duration


def test_a_running_jobs_dashboard_lists_annotations_recorded_after_it_opened(page, server):
    page.clock.install()
    _open_dashboard(page, server["base"], LIVE_JOB)
    note, field = page.locator("#annotation-note"), page.locator("#annotation-name")
    expect(note).to_contain_text("This job has no custom annotations")
    expect(field).to_be_disabled()
    # from now on the training script annotates a part of its steps (stepscope.annotate)
    pevents = server["live_job"] / "profiler-output" / "framework" / "pevents"
    last = max(pevents.rglob("*_pythontimeline.json"))
    start_us = json.loads(last.read_text())[0]["args"]["start_time_since_epoch_in_micros"]
    end_us = int(last.name.split("_")[0]) + 10_000_000
    at_us = end_us - start_us - 1_000_000
    events = [
        {"name": "process_name", "ph": "M", "pid": 0,
         "args": {"start_time_since_epoch_in_micros": start_us}},
        {"name": "process_name", "ph": "M", "pid": 9, "args": {"name": "Annotation"}},
        {"name": "train_batch", "pid": 9, "ph": "X", "ts": at_us, "dur": 5_000, "args": {}},
    ]  # fmt: skip
    (last.parent / f"{end_us}_0-algo-1_pythontimeline.json").write_text(json.dumps(events))
    option = page.locator("#annotation-names option[value='train_batch']")
    # the server looks for new data at most every 5 s: refreshes come until it has read it
    for _ in range(20):
        with page.expect_response("**/annotations"):
            page.clock.fast_forward(15_000)
        if option.count():
            break
        time.sleep(1)
    expect(option).to_have_count(1)
    expect(field).to_be_enabled()
    expect(note).to_have_text(re.compile("^Pick or type an annotation"))
    field.fill("train_batch")
    page.click("#create-histogram")
    card = page.locator("article[data-panel=annotation_histogram]")
    expect(card).to_have_attribute("data-state", "data")


def test_a_running_jobs_dashboard_stays_live_until_the_job_ends(page, server):
    # it ends the shared job: the tests that need it running come before this one
    _open_dashboard(page, server["base"], LIVE_JOB)
    expect(page.locator(".page-head .badge")).to_have_text("Running")
    expect(page.locator(".live")).to_have_text("Live: refreshes every 15 s")
    # how long it has run so far, as the job list says (it started long ago: hours)
    start_us = json.loads((server["live_job"] / "job.json").read_text())["start_time_us"]
    hours = int((time.time() * 1e6 - start_us) / 3.6e9)
    expect(page.locator(".page-head .lead")).to_contain_text(
        re.compile(rf"· ({hours}|{hours + 1}) h ")
    )
    assert _panel_states(page)["cpu_utilization"] == "data"  # the data so far
    job_json = server["live_job"] / "job.json"
    job_json.write_text(json.dumps({**json.loads(job_json.read_text()), "status": "Completed"}))
    expect(page.locator(".live")).to_have_text("The job has ended")
    expect(page.locator(".page-head .badge")).to_have_text("Completed")


def test_a_ruler_label_that_would_run_off_the_right_edge_is_left_out(page, server):
    # a tick just before the right edge had its label cut ("140" for "14000 s")
    job_id = _loaded_job_id(page, server["base"], CPU_JOB)
    page.goto(f"{server['base']}/timeline?job={job_id}&from=0&to=10100000")  # a tick at 10 s
    page.wait_for_selector("#tl-canvas[data-loaded='1']")
    expect(page.locator("#tl-range")).to_contain_text("10.10 s")
    inked = page.evaluate(
        """() => {
          const canvas = document.getElementById('tl-canvas');
          const box = canvas.getBoundingClientRect();
          const top = document.querySelector('.tl-body').getBoundingClientRect().top - box.top;
          const ratio = canvas.width / box.width;
          // the last 4 px of the ruler's text line, above its tick marks
          const pixels = canvas.getContext('2d').getImageData(
            canvas.width - 4 * ratio, (top + 6) * ratio, 4 * ratio, 12 * ratio).data;
          let dark = 0;
          for (let i = 0; i < pixels.length; i += 4) if (pixels[i] < 200) dark += 1;
          return dark;
        }"""
    )
    assert inked == 0


def test_a_click_on_a_counter_track_reads_its_value(page, server):
    _open_dashboard(page, server["base"], CPU_JOB)
    page.goto(server["base"] + "/timeline")
    page.wait_for_selector("#tl-canvas[data-loaded='1']")
    label = page.locator("#tl-tree [data-label='CPU utilization']").first.bounding_box()
    canvas = page.locator("#tl-canvas").bounding_box()
    assert label is not None and canvas is not None
    page.mouse.click(canvas["x"] + canvas["width"] / 2, label["y"] + label["height"] / 2)
    selection = page.locator("#tl-selection")
    expect(selection).to_contain_text("CPU utilization")
    # the generated job's CPU cores run between 0 and 100 %
    value = selection.locator("dd").last.inner_text()
    assert value.endswith(" %") and 0 <= float(value[:-2]) <= 100
    _shot(page, "timeline-counter")


def test_a_histogram_of_few_steps_counts_in_whole_numbers(page, server):
    _open_dashboard(page, server["base"], GPU_TRACE)
    ticks = page.locator("article[data-panel=step_time] .ytick text")
    expect(ticks.first).to_be_visible()
    labels = ticks.all_text_contents()
    assert labels and all(label.isdigit() for label in labels), labels


def test_durations_round_into_the_next_unit_rather_than_show_a_full_one(page, server):
    # a job of 119.6 s read "1 min 60 s" in the job list
    page.goto(server["base"] + "/")
    shown = page.evaluate(
        "async (seconds) => seconds.map((await import('/static/js/format.js')).formatDuration)",
        [0.9996, 59.96, 119.6, 3599.7, 7199.9, 61.2],
    )
    assert shown == ["1.0 s", "1 min 0 s", "2 min 0 s", "1 h 0 min", "2 h 0 min", "1 min 1 s"]


def test_timeline_durations_round_into_the_next_unit_rather_than_show_a_full_one(page, server):
    # a slice of 999.9996 µs read "1000.0 µs" in the timeline's details
    page.goto(server["base"] + "/")
    shown = page.evaluate(
        "async (us) => us.map((await import('/static/js/timeline/draw.js')).formatDuration)",
        [999.9996, 999_999.9996, 1500.0, 2_500_000.0, 0.5],
    )
    assert shown == ["1.000 ms", "1.000 s", "1.500 ms", "2.500 s", "0.500 µs"]


def _screen_colour(page, x: float, y: float) -> tuple[int, ...]:
    """The colour the window shows at (x, y): a screenshot's pixel, decoded by the browser."""
    png = page.screenshot(clip={"x": x, "y": y, "width": 1, "height": 1})
    rgb = page.evaluate(
        "async (data) => { const img = new Image(); img.src = `data:image/png;base64,${data}`;"
        " await img.decode(); const canvas = document.createElement('canvas');"
        " canvas.width = 1; canvas.height = 1; const ctx = canvas.getContext('2d');"
        " ctx.drawImage(img, 0, 0); return [...ctx.getImageData(0, 0, 1, 1).data.slice(0, 3)]; }",
        base64.b64encode(png).decode(),
    )
    return tuple(rgb)


def test_a_narrow_window_puts_the_navigation_above_a_readable_page(page, server):
    _open_dashboard(page, server["base"], CPU_JOB)
    page.set_viewport_size({"width": 800, "height": 700})
    heading = page.locator("h1")
    box = heading.bounding_box()
    assert box is not None
    # the page's dark-on-light heading sits on the light page, not on the sidebar's dark strip
    assert min(_screen_colour(page, box["x"] - 8, box["y"] + box["height"] / 2)) > 200
    # the links take a row above the page, not a screen of their own
    tops = {round(b["y"]) for b in (a.bounding_box() for a in page.locator("#nav a").all()) if b}
    assert len(tops) == 1, tops
    _shot(page, "dashboard-narrow")
