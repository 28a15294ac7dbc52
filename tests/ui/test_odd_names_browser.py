"""Names users write and attackers plant, in a real browser: markup never runs, every name works.

One job, a PyTorch profiler trace whose file name is markup, holds annotations named with
markup, quotes, a line break, spaces around them, other scripts and hundreds of characters. Each
page that shows them (job list, dashboard, custom histograms, information, timeline) must show
them as text: no planted handler runs, no request leaves for the planted image. A node named
with plotly's template syntax reads as written in the charts' hovers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import chromium, needs_chromium, page_errors
from tests.servers import serve_app

from .conftest import T0_US, step_events, system_rows, write_job_folder

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

pytestmark = [pytest.mark.browser, needs_chromium]

#: Sets ``window.__planted`` if the browser ever parses a name as HTML.
PLANTED = "<img src=x onerror=window.__planted=1>"
JOB = f"{PLANTED} #1 ?q=%20 名前"
ANNOTATIONS = [
    PLANTED,
    "</script><script>window.__planted=2</script>",
    'load "train" \\ shard',
    "  padded  ",
    "new\nline",
    "前向 🚀 é \u202ertl",
    "%s {} {0} %{x}",
    "x" * 600,
]


def _trace(path: Path) -> None:
    """A one-rank trace: 5 profiler steps, each holding one occurrence of every annotation."""
    events: list[dict[str, Any]] = []
    for step in range(5):
        start = T0_US + step * 10_000
        events.append(_span(f"ProfilerStep#{step}", start, 9_000))
        for i, name in enumerate([*ANNOTATIONS, ""]):  # a nameless one is not offered
            events.append(_span(name, start + 100 + i * 1_000, 500 + 10 * step))
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))


def _span(name: str, start_us: int, dur_us: int) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "user_annotation",
        "name": name,
        "pid": 1,
        "tid": 1,
        "ts": start_us,
        "dur": dur_us,
    }


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Iterator[str]:
    from stepscope.ui import create_app

    tmp = tmp_path_factory.mktemp("odd-names")
    _trace(tmp / "jobs" / "runs #2 %2e%2e 名前" / f"{JOB}.json")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STEPSCOPE_CACHE_DIR", str(tmp / "cache"))
        app = create_app([tmp / "jobs"], settings_path=tmp / "settings.json")
        with serve_app(app) as url:
            yield url


@pytest.fixture
def page(base: str) -> Iterator[Any]:
    """A page that fails its test on a console error, a request beyond the server, or a
    planted handler that ran."""
    expect.set_options(timeout=60_000)  # loading builds the trace's cache
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.set_default_timeout(60_000)
        errors = page_errors(page)
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        yield page
        assert page.evaluate("window.__planted") is None
        assert errors == []
        assert [u for u in requests if not u.startswith(base + "/") or u.endswith("/x")] == []


def _open_dashboard(page: Any, base: str) -> None:
    page.goto(base + "/")
    row = page.locator("#job-list tbody tr", has_text="名前")
    expect(row.locator(".name")).to_contain_text(JOB)
    box = row.locator("input[type=checkbox]")
    if box.is_enabled():  # not loaded by an earlier test
        box.check()
        page.click("#load-button")
    radio = page.locator("#loaded-profiles tr", has_text="名前").locator("input[type=radio]")
    expect(radio).to_be_enabled()
    radio.click()
    page.wait_for_url("**/dashboard?job=*")
    expect(page.locator("h1")).to_have_text(JOB)


def test_every_listed_annotation_can_be_drawn_whatever_its_name(page, base):
    _open_dashboard(page, base)
    options = page.locator("#annotation-names option")
    expect(options).to_have_count(len(ANNOTATIONS))
    for value in options.evaluate_all("(nodes) => nodes.map((n) => n.value)"):
        page.locator("#annotation-name").fill(value)  # as pasting the option's value does
        page.click("#create-histogram")
    cards = page.locator("article[data-panel=annotation_histogram]")
    expect(cards).to_have_count(len(ANNOTATIONS))
    expect(cards.locator("xpath=self::*[@data-state='data']")).to_have_count(len(ANNOTATIONS))
    titles = set(cards.locator("h3").all_text_contents())
    assert titles == {f"Histogram of “{name}”" for name in ANNOTATIONS}
    templated = cards.filter(has_text="%{x}").locator(".legend .legendtext")
    expect(templated).to_contain_text("%s {} {0} %{x} (n=5")


def test_planted_markup_is_shown_as_text_on_every_page(page, base):
    _open_dashboard(page, base)
    expect(page.locator("article.panel:not([data-state])")).to_have_count(0)
    page.click("nav a[data-page=info]")
    expect(page.locator("main")).to_contain_text(JOB)
    page.click("nav a[data-page=timeline]")
    expect(page.locator("canvas").first).to_be_visible()
    assert page.locator("img").count() == 0


#: A node name that holds plotly's template syntax and markup.
TEMPLATED_NODE = "%{x} %{y:.1f} <b>n</b>"


@pytest.fixture(scope="module")
def templated_base(tmp_path_factory) -> Iterator[str]:
    """A job whose one node is named :data:`TEMPLATED_NODE` (a table job: real store files name
    nodes ``algo-<n>``)."""
    from stepscope.testing import TableJob
    from stepscope.ui import create_app

    tmp = tmp_path_factory.mktemp("templated-node")
    write_job_folder(tmp / "jobs", "templated", nodes=[TEMPLATED_NODE])

    def open_job(path: Path) -> TableJob:
        metadata = {"nodes": [TEMPLATED_NODE], "first_timestamp_us": T0_US}
        rows = system_rows(seconds=20, node=TEMPLATED_NODE)
        return TableJob(path, rows, step_events(node=TEMPLATED_NODE), metadata)

    app = create_app([tmp / "jobs"], settings_path=tmp / "settings.json", job_opener=open_job)
    with serve_app(app) as url:
        yield url


def test_a_node_name_reads_as_written_in_chart_hovers(templated_base):
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        errors = page_errors(page)
        _hover_each_utilization_chart(page, templated_base)
        assert errors == []


def _hover_each_utilization_chart(page: Any, base: str) -> None:
    page.goto(base + "/")
    page.locator("#job-list tbody tr", has_text="templated").locator("input[type=checkbox]").check()
    page.click("#load-button")
    radio = page.locator("#loaded-profiles tr", has_text="templated").locator("input[type=radio]")
    expect(radio).to_be_enabled()
    radio.click()
    page.wait_for_url("**/dashboard?job=*")
    for panel in ("cpu_utilization", "gpu_utilization"):
        card = page.locator(f"article[data-panel={panel}]")
        expect(card.locator(".main-svg").first).to_be_visible()
        card.locator(".chart").evaluate(
            "node => window.Plotly.Fx.hover(node, [{curveNumber: 0, pointNumber: 3}])"
        )
        hover = card.locator(".hovertext").first
        expect(hover).to_contain_text(f"{TEMPLATED_NODE}: ")
        expect(hover).to_contain_text("3.0 s since start")
