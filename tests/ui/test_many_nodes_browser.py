"""A job of many nodes in a real browser: every node's pie and every track stay usable.

A 30-node job has one active-time pie per node and more timeline tracks than one window request
may name; the dashboard must lay the pies out side by side and row by row, and the timeline must
show the tracks the user scrolls to, with the time ruler still in sight.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from stepscope.testing import generate_job
from tests.browser import ARTIFACTS, chromium, needs_chromium, page_errors
from tests.servers import serve_app

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

pytestmark = [pytest.mark.browser, needs_chromium]

NODES = 30
JOB = "many-nodes"
#: all tracks of this many nodes are taller than Chromium's largest canvas at a pixel ratio of 2
HIDPI_NODES = 64
HIDPI_JOB = "more-nodes"


@pytest.fixture(scope="module")
def base_url(tmp_path_factory) -> Iterator[str]:
    from stepscope.ui import create_app

    tmp = tmp_path_factory.mktemp("many-nodes")
    generate_job(tmp / "jobs" / JOB, nodes=NODES, gpus=1, cpus=1, minutes=1)
    generate_job(tmp / "jobs" / HIDPI_JOB, nodes=HIDPI_NODES, gpus=1, cpus=1, minutes=1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STEPSCOPE_CACHE_DIR", str(tmp / "cache"))
        app = create_app([tmp / "jobs"], settings_path=tmp / "settings.json")
        with serve_app(app) as base:
            yield base


@pytest.fixture
def page(base_url: str) -> Iterator[Any]:
    """A page on which the job is loaded and selected; fails on console errors."""
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.set_default_timeout(60_000)
        errors = page_errors(page)
        page.goto(base_url + "/")
        box = page.locator("#job-list tbody tr", has_text=JOB).locator("input[type=checkbox]")
        expect(box).to_be_visible()
        if box.is_enabled():  # not loaded by an earlier test yet
            box.check()
            page.click("#load-button")
        radio = page.locator("#loaded-profiles tr", has_text=JOB).locator("input[type=radio]")
        expect(radio).to_be_enabled(timeout=120_000)
        radio.click()
        page.wait_for_url("**/dashboard?job=*")
        yield page
        assert errors == [], f"console errors: {errors}"
        assert page.locator(".notice.error").count() == 0


def _overlapping(boxes: list[dict[str, float]]) -> list[tuple[int, int]]:
    return [
        (i, j)
        for i, a in enumerate(boxes)
        for j, b in enumerate(boxes[i + 1 :], start=i + 1)
        if a["x"] < b["x"] + b["width"] - 1
        and b["x"] < a["x"] + a["width"] - 1
        and a["y"] < b["y"] + b["height"] - 1
        and b["y"] < a["y"] + a["height"] - 1
    ]


def test_every_nodes_active_time_pie_is_drawn_apart_with_its_title(page) -> None:
    card = page.locator("article[data-panel=gpu_active_time]")
    expect(card).to_have_attribute("data-state", "data")
    card.scroll_into_view_if_needed()
    ARTIFACTS.mkdir(exist_ok=True)
    card.screenshot(path=str(ARTIFACTS / "ui-many-nodes-active-time.png"))
    pies = card.locator(".pielayer .trace")
    expect(pies).to_have_count(NODES)
    pie_boxes = [pies.nth(i).bounding_box() for i in range(NODES)]
    assert all(box is not None and box["width"] >= 60 for box in pie_boxes), pie_boxes
    assert _overlapping(pie_boxes) == []  # type: ignore[arg-type]
    titles = card.locator(".annotation-text")
    assert sorted(titles.all_text_contents()) == sorted(f"algo-{n}" for n in range(1, NODES + 1))
    title_boxes = [titles.nth(i).bounding_box() for i in range(NODES)]
    assert _overlapping(title_boxes) == []  # type: ignore[arg-type]


@pytest.mark.parametrize("panel", ["gpu_utilization", "cpu_utilization"])
def test_the_legend_of_every_nodes_line_stays_off_the_plot(page, panel: str) -> None:
    # a legend of many nodes laid over the plot hid the lines and the utilization axis
    card = page.locator(f"article[data-panel={panel}]")
    expect(card).to_have_attribute("data-state", "data", timeout=60_000)
    card.scroll_into_view_if_needed()
    entries = card.locator(".legend .traces")
    expect(entries).to_have_count(NODES)
    legend = card.locator(".legend").bounding_box()
    plot = card.locator(".nsewdrag").bounding_box()
    assert legend is not None and plot is not None
    assert legend["y"] + legend["height"] <= plot["y"] + 1, (legend, plot)
    last = entries.nth(NODES - 1).bounding_box()
    assert last is not None and last["y"] + last["height"] <= plot["y"] + 1, (last, plot)


def _canvas_pixel(page, *, x: float, below_list_top: float) -> list[int]:
    """The canvas's pixel (RGBA) ``below_list_top`` CSS px below the top of the track list in
    sight, wherever the canvas lies and whatever the device pixel ratio."""
    return page.evaluate(
        """([x, dy]) => {
          const body = document.querySelector('.tl-body').getBoundingClientRect();
          const canvas = document.getElementById('tl-canvas');
          const box = canvas.getBoundingClientRect();
          const ratio = canvas.width / box.width;
          const y = Math.round((body.top - box.top + dy) * ratio);
          return Array.from(canvas.getContext('2d').getImageData(x * ratio, y, 1, 1).data);
        }""",
        [x, below_list_top],
    )


def _scroll_into_sight(page, label) -> None:
    """Scroll the timeline's track list to ``label``, and wait until the slices of the tracks
    now in sight are fetched and drawn."""
    page.evaluate("document.getElementById('tl-canvas').dataset.loaded = '0'")
    label.scroll_into_view_if_needed()
    page.wait_for_selector("#tl-canvas[data-loaded='1']")


def test_the_timeline_shows_the_tracks_scrolled_to(page, base_url: str) -> None:
    page.goto(base_url + "/timeline")
    page.wait_for_selector("#tl-canvas[data-loaded='1']")
    # the last node's CPU utilization, far below the first screenful of tracks
    label = page.locator("#tl-tree [data-label='CPU utilization']").last
    _scroll_into_sight(page, label)
    box = label.bounding_box()
    canvas = page.locator("#tl-canvas").bounding_box()
    assert box is not None and canvas is not None
    page.mouse.click(canvas["x"] + canvas["width"] / 2, box["y"] + box["height"] / 2)
    selection = page.locator("#tl-selection")
    expect(selection).to_contain_text("CPU utilization")
    value = selection.locator("dd").last.inner_text()
    assert value.endswith(" %") and 0 <= float(value[:-2]) <= 100


def test_the_time_ruler_stays_in_sight_when_the_tracks_are_scrolled(page, base_url: str) -> None:
    page.goto(base_url + "/timeline")
    page.wait_for_selector("#tl-canvas[data-loaded='1']")
    _scroll_into_sight(page, page.locator("#tl-tree [data-label='CPU utilization']").last)
    # the ruler's background, read where the scrolled list's first visible row would be
    pixel = _canvas_pixel(page, x=2, below_list_top=3)
    assert page.evaluate("document.querySelector('.tl-body').scrollTop") > 1000
    assert pixel == [0xF6, 0xF7, 0xF9, 255]  # the ruler's fill, not a row's
    gap = page.locator(".tl-ruler-gap").bounding_box()
    body = page.locator(".tl-body").bounding_box()
    assert gap is not None and body is not None
    assert abs(gap["y"] - body["y"]) <= 2  # the labels' gap beside it stays put too


def test_the_timeline_of_many_nodes_is_drawn_on_a_hidpi_screen(base_url: str) -> None:
    """At a device pixel ratio of 2, all tracks of 64 nodes are taller than the largest canvas
    Chromium can draw: the canvas must still show the ruler and the tracks in sight."""
    with chromium() as browser:
        context = browser.new_context(
            viewport={"width": 1440, "height": 900}, device_scale_factor=2
        )
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.goto(base_url + "/")
        job = page.locator("#job-list tbody tr", has_text=HIDPI_JOB)
        expect(job).to_be_visible()
        job_id = job.get_attribute("data-job")
        page.evaluate("(id) => window.localStorage.setItem('stepscope.selectedJob', id)", job_id)
        page.request.post(f"{base_url}/api/jobs/{job_id}/load")
        page.goto(base_url + "/timeline")
        page.wait_for_selector("#tl-canvas[data-loaded='1']", timeout=120_000)
        label = page.locator("#tl-tree [data-label='CPU utilization']").last
        _scroll_into_sight(page, label)
        assert _canvas_pixel(page, x=2, below_list_top=3) == [0xF6, 0xF7, 0xF9, 255]
        # the last node's CPU utilization row is drawn (its row background at least)
        row = label.bounding_box()
        body = page.locator(".tl-body").bounding_box()
        assert row is not None and body is not None
        drawn = _canvas_pixel(page, x=2, below_list_top=row["y"] - body["y"] + 2)
        assert drawn[3] == 255, drawn  # painted, not a blank canvas
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "ui-many-nodes-timeline-hidpi.png"))
        context.close()
