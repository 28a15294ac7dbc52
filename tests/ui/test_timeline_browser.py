"""The timeline view in a real browser (headless Chromium) on recorded GPU traces.

It checks what a user does: the track tree shows the streams of a GPU trace; w/a/s/d and the
arrow keys move the visible window; clicking a kernel shows its details and, under
Connections, its launch, with the cyan arrow drawn; f zooms to it; dragging lists what the area
covers; both ranks of a two-rank job appear on one clock. No console errors, no request beyond
127.0.0.1. A screenshot goes to ``test-artifacts/`` for a human to look at.
"""

from __future__ import annotations

import gzip
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode
from urllib.request import Request, urlopen

import pytest

from tests.browser import ARTIFACTS, chromium, fail_first_request, needs_chromium, page_errors
from tests.servers import serve_app

sync_api = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.browser, needs_chromium]


@pytest.fixture(scope="module")
def base_url(tmp_path_factory, shared_fixtures: Path) -> Iterator[str]:
    from stepscope.ui import create_app

    tmp = tmp_path_factory.mktemp("timeline")
    kineto = shared_fixtures / "kineto"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STEPSCOPE_CACHE_DIR", str(tmp / "cache"))
        app = create_app(
            [kineto / "a100_rank0of2_nccl.json.gz", kineto / "two_ranks_one_job"],
            settings_path=tmp / "settings.json",
        )
        with serve_app(app) as base:
            yield base


def _get(url: str, params: dict[str, Any] | None = None) -> Any:
    with urlopen(url + ("?" + urlencode(params) if params else ""), timeout=60) as response:
        return json.load(response)


def _post(url: str) -> None:
    with urlopen(Request(url, method="POST"), timeout=60) as response:
        assert response.status < 300


def _load(base_url: str, name: str) -> str:
    """Load a job through the API and return its id once loaded."""
    jobs = _get(f"{base_url}/api/jobs")["jobs"]
    job_id = next(j["id"] for j in jobs if j["name"] == name)
    _post(f"{base_url}/api/jobs/{job_id}/load")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        loaded = _get(f"{base_url}/api/loaded")["loaded"]
        state = next(p["state"] for p in loaded if p["id"] == job_id)
        if state != "loading":
            assert state == "loaded", loaded
            return job_id
        time.sleep(0.1)
    raise AssertionError(f"{name} did not load")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as browser:
        yield browser


@pytest.fixture
def open_timeline(browser, base_url: str):
    pages = []

    def open_page(job_id: str) -> tuple[Any, list[str], list[str]]:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        outside: list[str] = []
        errors = page_errors(page)
        page.on(
            "request",
            lambda r: (
                None
                if r.url.startswith(base_url) or r.url.startswith("data:")
                else outside.append(r.url)
            ),
        )
        page.goto(base_url + "/")
        page.evaluate("id => localStorage.setItem('stepscope.selectedJob', id)", job_id)
        page.goto(base_url + "/timeline")
        page.wait_for_selector("#tl-canvas[data-loaded='1']", timeout=60_000)
        pages.append(page)
        return page, errors, outside

    yield open_page
    for page in pages:
        page.close()


def _view(page: Any) -> tuple[float, float]:
    label = page.locator("#tl-range")
    return float(label.get_attribute("data-start-us")), float(label.get_attribute("data-end-us"))


def _wait_view_change(page: Any, before: tuple[float, float]) -> tuple[float, float]:
    page.wait_for_function(
        "b => { const l = document.querySelector('#tl-range');"
        " return Number(l.dataset.startUs) !== b[0] || Number(l.dataset.endUs) !== b[1]; }",
        arg=list(before),
    )
    return _view(page)


def test_kernels_streams_keys_selection_and_areas(open_timeline, base_url: str) -> None:
    job_id = _load(base_url, "a100_rank0of2_nccl")
    page, errors, outside = open_timeline(job_id)
    # the page says whose timeline it is, as the dashboard and information pages do
    sync_api.expect(page.locator("h1")).to_have_text("Timeline · a100_rank0of2_nccl")
    tree = page.locator("#tl-tree")
    sync_api.expect(tree.locator("[data-label='GPU-0']")).to_be_visible()
    sync_api.expect(tree.locator("[data-label='rank 0 · stream 7']")).to_be_visible()
    sync_api.expect(tree.locator("[data-label='rank 0 · stream 40']")).to_be_visible()
    # a group opens and closes from the keyboard, and keeps the focus to be pressed again
    gpu = tree.locator("[data-label='GPU-0']")
    gpu.focus()
    page.keyboard.press("Enter")
    sync_api.expect(gpu).to_have_attribute("aria-expanded", "false")
    sync_api.expect(tree.locator("[data-label='rank 0 · stream 7']")).to_have_count(0)
    sync_api.expect(gpu).to_be_focused()
    page.keyboard.press(" ")
    sync_api.expect(gpu).to_have_attribute("aria-expanded", "true")
    sync_api.expect(tree.locator("[data-label='rank 0 · stream 7']")).to_be_visible()

    # w zooms in, s zooms out, d and → move right, a and ← move left
    start, end = _view(page)
    page.locator("#tl-canvas").focus()
    page.keyboard.press("w")
    zoomed = _wait_view_change(page, (start, end))
    assert zoomed[1] - zoomed[0] < end - start
    page.keyboard.press("d")
    moved = _wait_view_change(page, zoomed)
    assert moved[0] > zoomed[0]
    page.keyboard.press("ArrowLeft")
    back = _wait_view_change(page, moved)
    assert back[0] < moved[0]
    page.keyboard.press("ArrowUp")
    closer = _wait_view_change(page, back)
    assert closer[1] - closer[0] < back[1] - back[0]
    page.keyboard.press("s")
    farther = _wait_view_change(page, closer)
    assert farther[1] - farther[0] > closer[1] - closer[0]

    # pick a kernel that has a launch, through the same API the page uses
    tracks = _get(f"{base_url}/api/jobs/{job_id}/timeline/tracks")
    stream = next(t for t in tracks["tracks"] if t["path"][-1] == "rank 0 · stream 7")
    ids = ",".join(t["id"] for t in tracks["tracks"])
    lo, hi = tracks["bounds"]
    middle = (lo + hi) / 2
    window = _get(
        f"{base_url}/api/jobs/{job_id}/timeline/window",
        {"start_us": middle, "end_us": middle + 3000, "tracks": ids, "bins": 500},
    )
    flow = next(f for f in window["flows"] if f["to"][0] == stream["id"])
    kernel_start = flow["to"][1]
    kernel = next(s for s in window["tracks"][stream["id"]]["slices"] if s[0] == kernel_start)

    page.evaluate(
        "([a, b]) => window.stepscopeTimeline.show(a, b)",
        [kernel_start - 2000, kernel_start + 2000],
    )
    page.wait_for_function(
        "([t, s]) => window.stepscopeTimeline.locate(t, s) !== null",
        arg=[stream["id"], kernel_start],
    )
    point = page.evaluate(
        "([t, s]) => window.stepscopeTimeline.locate(t, s)", [stream["id"], kernel_start]
    )
    page.mouse.click(point["x"], point["y"])
    selection = page.locator("#tl-selection")
    sync_api.expect(selection).to_contain_text(kernel[3])
    sync_api.expect(selection).to_contain_text("kernel")
    sync_api.expect(selection).to_contain_text("Correlation")
    page.locator("[data-tab='connections']").click()
    connections = page.locator("#tl-connections")
    sync_api.expect(connections).to_contain_text("launch")
    sync_api.expect(connections).to_contain_text("cudaLaunchKernel")
    assert int(page.locator("#tl-canvas").get_attribute("data-flows")) >= 1, "no launch arrow drawn"

    # f zooms to the selected kernel
    page.locator("#tl-canvas").focus()
    page.keyboard.press("s")
    page.keyboard.press("s")
    before = _view(page)
    page.keyboard.press("f")
    focused = _wait_view_change(page, before)
    assert focused[0] <= kernel_start <= focused[1]
    assert focused[1] - focused[0] <= kernel[1] * 2 + 2

    # the connection centres its launch, chosen from the keyboard as well as with the mouse
    page.locator("#tl-connections tr.tl-link").first.focus()
    page.keyboard.press("Enter")
    launch_view = _wait_view_change(page, focused)
    assert launch_view[0] <= flow["from"][1] <= launch_view[1]

    # dragging selects an area and lists what it covers
    page.evaluate("([a, b]) => window.stepscopeTimeline.show(a, b)", [middle, middle + 3000])
    page.wait_for_timeout(300)
    box = page.locator("#tl-canvas").bounding_box()
    page.mouse.move(box["x"] + 100, box["y"] + 40)
    page.mouse.down()
    page.mouse.move(box["x"] + 700, box["y"] + 40 + 300, steps=5)
    page.mouse.up()
    stats = page.locator("#tl-area-stats tbody tr")
    sync_api.expect(stats.first).to_be_visible()
    assert stats.count() >= 2

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "timeline-gpu-trace.png"))
    assert not errors, errors
    assert not outside, outside


def test_two_ranks_share_one_clock(open_timeline, base_url: str) -> None:
    job_id = _load(base_url, "two_ranks_one_job")
    page, errors, outside = open_timeline(job_id)
    tree = page.locator("#tl-tree")
    labels = tree.locator(".tl-track").evaluate_all("rows => rows.map(r => r.dataset.label)")
    assert any(label.startswith("rank 0 ") for label in labels)
    assert any(label.startswith("rank 1 ") for label in labels)
    tracks = _get(f"{base_url}/api/jobs/{job_id}/timeline/tracks")
    by_rank: dict[str, list[str]] = {}
    for t in tracks["tracks"]:
        if t["kind"] == "slices":
            by_rank.setdefault(t["path"][-1].split(" · ")[0], []).append(t["id"])
    lo, hi = tracks["bounds"]
    firsts = {}
    for rank, ids in by_rank.items():
        window = _get(
            f"{base_url}/api/jobs/{job_id}/timeline/window",
            {"start_us": lo, "end_us": hi, "tracks": ",".join(ids), "bins": 500},
        )
        starts = [
            row[0]
            for track in window["tracks"].values()
            for row in track.get("slices", []) + track.get("bins", [])
        ]
        firsts[rank] = min(starts)
    # the two ranks ran the same steps together: on one clock their first events are close
    assert abs(firsts["rank 0"] - firsts["rank 1"]) < 0.05 * (hi - lo)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "timeline-two-ranks.png"))
    assert not errors, errors
    assert not outside, outside


def test_ruler_and_range_tell_close_times_apart(open_timeline, base_url: str) -> None:
    job_id = _load(base_url, "a100_rank0of2_nccl")
    page, errors, outside = open_timeline(job_id)
    # record what the ruler writes (its labels sit on the middle of the 28 px ruler)
    page.evaluate(
        "() => { window.rulerTexts = [];"
        " const fill = CanvasRenderingContext2D.prototype.fillText;"
        " CanvasRenderingContext2D.prototype.fillText = function (text, x, y, ...rest) {"
        "   if (y === 14) window.rulerTexts.push(text);"
        "   return fill.call(this, text, x, y, ...rest); }; }"
    )
    lo, hi = _view(page)
    middle = lo + 343_600
    # the labels of one drawing: show() draws at once (a later answer of the server redraws)
    ticks = page.evaluate(
        "([a, b]) => { window.rulerTexts = []; window.stepscopeTimeline.show(a, b);"
        " return window.rulerTexts; }",
        [middle, middle + 20],
    )
    assert len(ticks) >= 4, ticks
    assert len(set(ticks)) == len(ticks), f"ruler labels repeat: {ticks}"
    assert all(t.endswith(" ms") for t in ticks), ticks
    start_text, end_text = page.locator("#tl-range").inner_text().split(" (")[0].split(" – ")
    assert start_text != end_text
    # the whole trace: its end is not rounded to a whole number of ms
    zoomed = _view(page)
    page.keyboard.press("0")
    _wait_view_change(page, zoomed)
    assert page.locator("#tl-range").inner_text().startswith("0 s – 713.1 ms")
    assert not errors, errors
    assert not outside, outside


def test_the_launch_arrow_leaves_from_the_launch_itself(open_timeline, base_url: str) -> None:
    job_id = _load(base_url, "a100_rank0of2_nccl")
    page, errors, outside = open_timeline(job_id)
    tracks = _get(f"{base_url}/api/jobs/{job_id}/timeline/tracks")
    ids = ",".join(t["id"] for t in tracks["tracks"])
    middle = sum(tracks["bounds"]) / 2
    window = _get(
        f"{base_url}/api/jobs/{job_id}/timeline/window",
        {"start_us": middle, "end_us": middle + 3000, "tracks": ids, "bins": 500},
    )
    flow = window["flows"][0]
    launch_track, launch_start = flow["from"]
    page.evaluate(
        "([a, b]) => window.stepscopeTimeline.show(a, b)", [launch_start - 50, launch_start + 50]
    )
    page.wait_for_function(
        "([t, s]) => window.stepscopeTimeline.locate(t, s) !== null",
        arg=[launch_track, launch_start],
    )
    launch = page.evaluate(
        "([t, s]) => window.stepscopeTimeline.locate(t, s)", [launch_track, launch_start]
    )
    box = page.locator("#tl-canvas").bounding_box()
    arrows = page.evaluate("() => window.stepscopeTimeline.state().arrows")
    # the arrow starting at the launch's time starts at the launch's row, not at its track's top
    x0, y0 = next((a[0], a[1]) for a in arrows if abs(box["x"] + a[0] - launch["x"]) < 5)
    assert abs(box["y"] + y0 - launch["y"]) <= 8, (y0, launch)
    assert not errors, errors
    assert not outside, outside


def test_the_view_is_in_the_url_so_a_reload_or_a_link_opens_it_again(
    open_timeline, base_url: str
) -> None:
    job_id = _load(base_url, "a100_rank0of2_nccl")
    page, errors, outside = open_timeline(job_id)
    whole = _view(page)
    page.locator("#tl-canvas").focus()
    for key in "wwwwd":
        before = _view(page)
        page.keyboard.press(key)
        _wait_view_change(page, before)
    zoomed = _view(page)
    page.wait_for_url("**&from=*&to=*")
    page.reload()
    page.wait_for_selector("#tl-canvas[data-loaded='1']")
    assert _view(page) == pytest.approx(zoomed, abs=0.01)
    # a link naming a window (µs since the start) opens it
    page.goto(f"{base_url}/timeline?job={job_id}&from=345000&to=346000")
    page.wait_for_selector("#tl-canvas[data-loaded='1']")
    assert _view(page) == pytest.approx((whole[0] + 345_000, whole[0] + 346_000), abs=0.01)
    assert page.locator("#tl-range").inner_text().startswith("345.000 ms – 346.000 ms")
    assert not errors, errors
    assert not outside, outside


def test_find_selects_each_slice_of_a_name_in_turn(
    open_timeline, base_url: str, shared_fixtures: Path
) -> None:
    trace = json.loads(
        gzip.decompress((shared_fixtures / "kineto" / "a100_rank0of2_nccl.json.gz").read_bytes())
    )
    expected = sorted(
        e["ts"]
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and "ncclkernel_allreduce" in e.get("name", "").lower()
    )
    job_id = _load(base_url, "a100_rank0of2_nccl")
    page, errors, outside = open_timeline(job_id)
    page.locator("[data-label='GPU-0']").click()  # its streams hidden: the match opens them
    field = page.locator("#tl-find")
    field.fill("NCCLKERNEL_allreduce")
    field.press("Enter")
    status = page.locator("#tl-find-status")
    sync_api.expect(status).to_have_text(f"{len(expected)} matches")
    selection = page.locator("#tl-selection")
    sync_api.expect(selection).to_contain_text("ncclKernel_AllReduce")
    sync_api.expect(page.locator("[data-label='rank 0 · stream 40']")).to_be_visible()
    starts = []
    for _ in range(2):
        start = page.evaluate("() => window.stepscopeTimeline.state().selected.start")
        lo, hi = _view(page)
        assert lo <= start <= hi
        starts.append(start)
        field.press("Enter")
        page.wait_for_function(
            "s => window.stepscopeTimeline.state().selected.start !== s", arg=start
        )
    # the first two matches in time, on the trace's clock, then the next
    origin = _get(f"{base_url}/api/jobs/{job_id}/timeline/tracks")["bounds"][0]
    first_ts = min(e["ts"] for e in trace["traceEvents"] if e.get("ph") == "X")
    assert [s - origin for s in starts] == pytest.approx(
        [t - first_ts for t in expected[:2]], abs=0.5
    )
    field.fill("no slice has this name")
    field.press("Enter")
    sync_api.expect(status).to_contain_text("No slice's name holds")
    assert not errors, errors
    assert not outside, outside


def test_a_connection_in_a_closed_group_opens_it_to_show_the_slice(
    open_timeline, base_url: str
) -> None:
    job_id = _load(base_url, "a100_rank0of2_nccl")
    page, errors, outside = open_timeline(job_id)
    field = page.locator("#tl-find")
    field.fill("ncclKernel_Broadcast")
    field.press("Enter")
    sync_api.expect(page.locator("#tl-selection")).to_contain_text("ncclKernel_Broadcast")
    page.locator("[data-tab='connections']").click()
    launch = page.locator("#tl-connections tr.tl-link", has_text="cudaLaunchKernel")
    track = launch.get_attribute("data-track")
    cpu = page.locator("[data-label='CPU']")
    cpu.click()  # the launch's thread hidden: going to the launch opens its group again
    sync_api.expect(page.locator(f"#tl-tree [data-track='{track}']")).to_have_count(0)
    launch.click()
    sync_api.expect(cpu).to_have_attribute("aria-expanded", "true")
    row = page.locator(f"#tl-tree [data-track='{track}']")
    sync_api.expect(row).to_be_in_viewport()
    assert page.evaluate("() => window.stepscopeTimeline.state().selected.track") == track
    assert not errors, errors
    assert not outside, outside


def test_a_view_the_server_fails_to_give_says_so_and_can_be_retried(browser, base_url: str) -> None:
    job_id = _load(base_url, "a100_rank0of2_nccl")
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    errors = page_errors(page)
    failed = fail_first_request(page, "**/timeline/window?*", "the disk went away")
    page.goto(f"{base_url}/timeline?job={job_id}")
    notice = page.locator("#tl-window-error")
    sync_api.expect(notice).to_contain_text("the disk went away")
    # the page stays: its title, tracks and controls are there to use
    sync_api.expect(page.locator("h1")).to_have_text("Timeline · a100_rank0of2_nccl")
    sync_api.expect(page.locator("#tl-tree [data-label='GPU-0']")).to_be_visible()
    sync_api.expect(page.locator("#tl-find")).to_be_enabled()
    notice.get_by_role("button", name="Retry").click()
    page.wait_for_selector("#tl-canvas[data-loaded='1']")
    sync_api.expect(notice).to_have_count(0)
    assert len(failed) == 1
    assert [e for e in errors if "status of 500" not in e] == []
    page.close()


def test_long_track_names_leave_the_tracks_their_width(
    browser, shared_fixtures: Path, tmp_path: Path
) -> None:
    # a Horovod timeline names a track after each tensor it reduces: a hundred characters
    from stepscope.ui import create_app

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
        app = create_app(
            [shared_fixtures / "smdebug" / "horovod_timeline_traces"],
            settings_path=tmp_path / "settings.json",
        )
        with serve_app(app) as base:
            job_id = _load(base, "horovod_timeline_traces")
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            errors = page_errors(page)
            page.goto(f"{base}/timeline?job={job_id}")
            page.wait_for_selector("#tl-canvas[data-loaded='1']", timeout=60_000)
            labels = page.locator("#tl-tree").bounding_box()
            body = page.locator(".tl-body").bounding_box()
            assert labels is not None and body is not None
            assert labels["width"] <= 300, labels
            assert page.locator("#tl-canvas").bounding_box()["width"] >= body["width"] - 310
            # the whole name is in the row's tooltip
            row = page.locator("#tl-tree .tl-track").first
            assert row.get_attribute("title").endswith(row.get_attribute("data-label"))
            assert len(row.get_attribute("data-label")) > 80
            page.close()
            assert not errors, errors


def test_a_gap_in_a_counters_samples_is_left_empty(browser, tmp_path: Path) -> None:
    # the job's monitor wrote nothing in its second minute: no value is read there
    from stepscope.testing import generate_job
    from stepscope.ui import create_app

    job = generate_job(tmp_path / "jobs" / "gappy", gpus=1, cpus=1, minutes=3)
    second_minute = sorted((job / "profiler-output" / "system").rglob("*.algo-1.json"))[1]
    second_minute.unlink()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
        app = create_app([tmp_path / "jobs"], settings_path=tmp_path / "settings.json")
        with serve_app(app) as base:
            job_id = _load(base, "gappy")
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            errors = page_errors(page)
            page.goto(f"{base}/timeline?job={job_id}")
            page.wait_for_selector("#tl-canvas[data-loaded='1']", timeout=60_000)
            view = page.evaluate("() => window.stepscopeTimeline.state().view")
            canvas = page.locator("#tl-canvas").bounding_box()
            row = page.locator("#tl-tree [data-label='CPU utilization']").bounding_box()
            assert canvas is not None and row is not None
            start_us = json.loads((job / "job.json").read_text())["start_time_us"]

            def click_at(seconds: float) -> None:
                share = (start_us + seconds * 1e6 - view["start"]) / (view["end"] - view["start"])
                x = canvas["x"] + share * canvas["width"]
                page.mouse.click(x, row["y"] + row["height"] / 2)

            selection = page.locator("#tl-selection")
            click_at(90)  # amid the missing minute (a counter's click is answered at once)
            sync_api.expect(selection).not_to_contain_text("Counter")
            click_at(30)
            sync_api.expect(selection).to_contain_text("Counter")
            page.close()
            assert not errors, errors


def test_escape_closes_the_list_of_shortcuts(open_timeline, base_url: str) -> None:
    # the list opened with ? or its button stayed over the tracks until ? or the button again
    job_id = _load(base_url, "a100_rank0of2_nccl")
    page, errors, _ = open_timeline(job_id)
    shortcuts = page.locator("#tl-shortcuts")
    button = page.locator("#tl-shortcuts-button")
    page.locator("#tl-canvas").focus()
    page.keyboard.press("?")
    sync_api.expect(shortcuts).to_be_visible()
    sync_api.expect(button).to_have_attribute("aria-expanded", "true")
    page.keyboard.press("Escape")
    sync_api.expect(shortcuts).to_be_hidden()
    sync_api.expect(button).to_have_attribute("aria-expanded", "false")
    button.click()
    sync_api.expect(shortcuts).to_be_visible()
    page.keyboard.press("Escape")
    sync_api.expect(shortcuts).to_be_hidden()
    assert not errors, errors


@pytest.mark.parametrize("width", [420, 1440])
def test_the_rulers_labels_never_overlap(open_timeline, base_url: str, width: int) -> None:
    # eight ticks whatever the width: in a narrow window their labels ran into each other
    job_id = _load(base_url, "a100_rank0of2_nccl")
    page, errors, _ = open_timeline(job_id)
    page.set_viewport_size({"width": width, "height": 900})
    page.wait_for_function(
        "w => document.querySelector('#tl-canvas').getBoundingClientRect().right <= w", arg=width
    )
    # record where the ruler writes (its labels sit on the middle of the 28 px ruler)
    page.evaluate(
        "() => { window.rulerLabels = [];"
        " const fill = CanvasRenderingContext2D.prototype.fillText;"
        " CanvasRenderingContext2D.prototype.fillText = function (text, x, y, ...rest) {"
        "   if (y === 14) window.rulerLabels.push([x, x + this.measureText(text).width]);"
        "   return fill.call(this, text, x, y, ...rest); }; }"
    )
    lo, hi = _view(page)
    for span in (hi - lo, 1_000, 20):
        labels = page.evaluate(
            "([a, b]) => { window.rulerLabels = []; window.stepscopeTimeline.show(a, b);"
            " return window.rulerLabels; }",
            [lo + 1_000, lo + 1_000 + span],
        )
        assert len(labels) >= (4 if width == 1440 else 0), (span, labels)
        gaps = [after[0] - before[1] for before, after in itertools.pairwise(labels)]
        assert all(gap > 0 for gap in gaps), (span, labels)
    assert not errors, errors


def test_in_a_narrow_window_the_track_names_leave_the_tracks_most_of_it(
    open_timeline, base_url: str
) -> None:
    # the names kept their 270 px in a window of 420: the tracks had 75 px
    job_id = _load(base_url, "a100_rank0of2_nccl")
    page, errors, _ = open_timeline(job_id)
    page.set_viewport_size({"width": 420, "height": 900})
    body = page.locator(".tl-body")
    page.wait_for_function("() => document.querySelector('.tl-body').clientWidth < 420")
    width = body.evaluate("(node) => node.clientWidth")
    names = page.locator("#tl-tree").bounding_box()
    canvas = page.locator("#tl-canvas").bounding_box()
    assert names is not None and canvas is not None
    assert names["width"] <= 0.4 * width + 1, (names, width)
    assert canvas["width"] >= 0.55 * width, (canvas, width)
    # a name cut short ends in an ellipsis, and its row's title has it all
    row = page.locator("#tl-tree [data-label='rank 0 · stream 40 annotations']")
    assert row.evaluate("(node) => node.querySelector('.tl-name').scrollWidth > node.clientWidth")
    assert row.get_attribute("title").endswith("rank 0 · stream 40 annotations")
    assert not errors, errors


def test_in_a_narrow_window_the_shortcuts_list_stays_in_the_page(
    open_timeline, base_url: str
) -> None:
    # laid over the page 4.5 rem from its top, it covered the navigation bar and the title
    job_id = _load(base_url, "a100_rank0of2_nccl")
    page, errors, _ = open_timeline(job_id)
    page.set_viewport_size({"width": 420, "height": 900})
    page.locator("#tl-shortcuts-button").click()
    shortcuts = page.locator("#tl-shortcuts")
    sync_api.expect(shortcuts).to_be_visible()
    box = shortcuts.bounding_box()
    button = page.locator("#tl-shortcuts-button").bounding_box()
    tracks = page.locator(".tl-body").bounding_box()
    assert box is not None and button is not None and tracks is not None
    assert button["y"] + button["height"] <= box["y"], (button, box)
    assert box["y"] + box["height"] <= tracks["y"], (box, tracks)
    assert box["x"] >= 0 and box["x"] + box["width"] <= 420, box
    assert not errors, errors
