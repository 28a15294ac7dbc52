"""What the pages say about a profile in a real browser: when it started, why it cannot be
shown (still loading, failed to load, not loaded, removed since it was loaded), its load state in the job list, and which
job each tab shows (the one its URL names).

A generated PyTorch profiler trace without ``baseTimeNanoseconds`` (as a trace cut short is)
keeps its own clock: its times are no dates. A job whose opening waits on a gate stays "loading"
as long as a test wants; a trace deleted after it was listed fails to load.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.request import Request, urlopen

import pytest

from stepscope.store.layout import job_end_marker_paths
from stepscope.testing import generate_job
from tests.browser import chromium, needs_chromium, page_errors
from tests.servers import serve_app

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

pytestmark = [pytest.mark.browser, needs_chromium]

UNDATED = "undated_trace"
SLOW = "slow_trace"
GONE = "gone_trace"
RACE = "race_trace"
FIRST = "first_trace"
SECOND = "second_trace"
HELD = "held_trace"
TICKED = "ticked_trace"
REMOVED = "removed_trace"
LIVE_REMOVED = "removed_while_training"
TWIN = "twin_trace"
PAGES = ("/dashboard", "/info", "/timeline")


def write_trace(path: Path, *, start_us: float) -> None:
    """A small Kineto trace of three profiler steps, without ``baseTimeNanoseconds``."""
    events = []
    for step in range(3):
        ts = start_us + step * 10_000
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 9_000,
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": ts + 100,
                "dur": 4_000,
            }
        )
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[dict[str, Any]]:
    from stepscope.store.job import open_job
    from stepscope.ui import create_app

    tmp = tmp_path_factory.mktemp("selection")
    root = tmp / "jobs"
    root.mkdir()
    # times relative to the profiler's start, as Kineto writes them before the closing key
    write_trace(root / f"{UNDATED}.json", start_us=1_000_000)
    write_trace(root / f"{SLOW}.json", start_us=1_700_000_000_000_000)
    write_trace(root / f"{GONE}.json", start_us=1_700_000_000_000_000)
    write_trace(root / f"{RACE}.json", start_us=1_700_000_000_000_000)
    write_trace(root / f"{FIRST}.json", start_us=1_700_000_000_000_000)
    write_trace(root / f"{SECOND}.json", start_us=1_700_000_000_000_000)
    write_trace(root / f"{HELD}.json", start_us=1_700_000_000_000_000)
    write_trace(root / f"{TICKED}.json", start_us=1_700_000_000_000_000)
    write_trace(root / f"{REMOVED}.json", start_us=1_700_000_000_000_000)
    for folder in ("first_run", "second_run"):  # two jobs of one name
        (root / folder).mkdir()
        write_trace(root / folder / f"{TWIN}.json", start_us=1_700_000_000_000_000)
    live = generate_job(root / LIVE_REMOVED, gpus=1, cpus=1, minutes=1)
    meta = json.loads((live / "job.json").read_text())
    (live / "job.json").write_text(json.dumps({**meta, "status": "Running", "end_time_us": None}))
    for marker in job_end_marker_paths(live / "profiler-output"):  # none while it trains
        marker.unlink(missing_ok=True)
    gates = {SLOW: threading.Event(), RACE: threading.Event(), HELD: threading.Event()}

    def opener(path: Path) -> Any:
        for name, gate in gates.items():
            if path.name.startswith(name):
                gate.wait(timeout=300)
        return open_job(path, cache_dir=tmp / "cache")

    app = create_app([root], settings_path=tmp / "settings.json", job_opener=opener)
    with serve_app(app) as base:
        yield {"base": base, "root": root, "gates": gates}
    for gate in gates.values():
        gate.set()


@pytest.fixture
def page(server) -> Iterator[Any]:
    """A page that fails the test on console errors."""
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.set_default_timeout(60_000)
        errors = page_errors(page)
        yield page
        assert errors == [], errors


def _job_id(base: str, name: str) -> str:
    with urlopen(base + "/api/jobs", timeout=60) as response:
        return next(j["id"] for j in json.load(response)["jobs"] if j["name"] == name)


def _load(base: str, job_id: str) -> None:
    request = Request(f"{base}/api/jobs/{job_id}/load", method="POST")
    with urlopen(request, timeout=60) as response:
        assert response.status == 202


def _select(page, base: str, job_id: str) -> None:
    page.goto(base + "/")
    page.evaluate("(id) => window.localStorage.setItem('stepscope.selectedJob', id)", job_id)


def test_a_trace_on_its_own_clock_has_no_1970_start(page, server):
    base = server["base"]
    page.goto(base + "/")
    row = page.locator("#job-list tbody tr", has_text=UNDATED)
    row.locator("input[type=checkbox]").check()
    page.click("#load-button")
    radio = page.locator("#loaded-profiles tr", has_text=UNDATED).locator("input[type=radio]")
    expect(radio).to_be_enabled()
    page.reload()  # the list as it reads once the trace is loaded
    expect(row).to_contain_text("no date in the trace")
    expect(row).not_to_contain_text("1970")
    expect(row).to_contain_text("ms")  # its duration is known
    radio.click()
    page.wait_for_url("**/dashboard?job=*")
    lead = page.locator(".page-head .lead")
    expect(lead).to_contain_text("Start date unknown")
    expect(lead).not_to_contain_text("1970")
    page.click("nav a[data-page=info]")
    data = page.locator("[data-section='Data']")
    expect(data).to_contain_text("no date")
    expect(page.locator("main")).not_to_contain_text("1970")


def test_a_profile_still_loading_is_said_to_be_loading_then_shown(page, server):
    base = server["base"]
    slow = _job_id(base, SLOW)
    _load(base, slow)
    _select(page, base, slow)
    for path in PAGES:
        page.goto(base + path)
        notice = page.locator("#selection-notice")
        expect(notice).to_contain_text(f"“{SLOW}” is still loading")
        expect(notice).not_to_contain_text("No profile is selected")
    # the load goes on; the open page shows the profile once it is loaded
    server["gates"][SLOW].set()
    expect(page.locator("#tl-canvas")).to_be_visible()
    page.goto(base + "/dashboard")
    expect(page.locator("h1")).to_have_text(SLOW)


def test_a_profile_that_failed_to_load_shows_the_error(page, server):
    base = server["base"]
    gone = _job_id(base, GONE)
    (server["root"] / f"{GONE}.json").unlink()  # listed, then deleted before it is loaded
    _load(base, gone)
    _select(page, base, gone)
    for path in PAGES:
        page.goto(base + path)
        notice = page.locator(".notice.error")
        expect(notice).to_contain_text(f"“{GONE}” could not be loaded")
        expect(notice).to_contain_text("No profiling job or trace found")
        expect(page.locator("main")).not_to_contain_text("No profile is selected")


def test_a_profile_removed_after_it_was_loaded_says_what_is_gone_and_can_be_unloaded(page, server):
    # every panel said "No such job." and the trash icon could not unload it: the job list,
    # asked for first, no longer had the job
    base = server["base"]
    removed = _job_id(base, REMOVED)
    page.goto(base + "/")
    page.locator("#job-list tr", has_text=REMOVED).locator("input[type=checkbox]").check()
    page.click("#load-button")
    radio = page.locator("#loaded-profiles tr", has_text=REMOVED).locator("input[type=radio]")
    expect(radio).to_be_enabled()
    (server["root"] / f"{REMOVED}.json").unlink()
    for path in PAGES:
        page.goto(f"{base}{path}?job={removed}")
        notice = page.locator("#selection-notice")
        expect(notice).to_contain_text(f"'{REMOVED}' was removed or moved after it was loaded")
        expect(notice).to_contain_text(f"nothing is at 'jobs/{REMOVED}.json'")
        expect(notice).to_contain_text("Unload it")
        expect(page.locator("main")).not_to_contain_text("No such job")
        expect(page.locator("article.panel")).to_have_count(0)
    notice.get_by_role("link", name="Go to Load profile.").click()
    row = page.locator("#loaded-profiles tr", has_text=REMOVED)
    expect(row).to_contain_text("was removed or moved")
    row.get_by_role("button", name=f"Unload {REMOVED}").click()
    expect(row).to_have_count(0)
    page.reload()
    expect(page.locator("#loaded-profiles tr", has_text=REMOVED)).to_have_count(0)


@pytest.mark.parametrize("path", ["/dashboard", "/timeline"])
def test_a_running_job_removed_while_its_page_is_open_says_so_at_the_next_refresh(
    page, server, path
):
    # the dashboard's refresh drew every panel with the removal as its message, and the
    # timeline's said its latest data could not be read, and asked again every 15 s
    base = server["base"]
    job_id = _job_id(base, LIVE_REMOVED)
    _load(base, job_id)
    page.clock.install()
    page.goto(f"{base}{path}?job={job_id}")
    if path == "/dashboard":
        expect(page.locator("article.panel[data-state]")).to_have_count(13)
    else:
        page.wait_for_selector("#tl-canvas[data-loaded='1']")
    hidden = server["root"].parent / f"{LIVE_REMOVED}-{path[1:]}"
    (server["root"] / LIVE_REMOVED).rename(hidden)
    try:
        page.clock.fast_forward(15_000)
        notice = page.locator("#selection-notice")
        expect(notice).to_contain_text(f"'{LIVE_REMOVED}' was removed or moved after it was loaded")
        expect(page.locator("article.panel, #tl-canvas, .live")).to_have_count(0)
        expect(page.locator(".notice.error")).to_have_count(1)
    finally:
        hidden.rename(server["root"] / LIVE_REMOVED)


def test_loaded_profiles_of_one_name_are_told_apart_by_their_place(page, server):
    # the list of loaded profiles gave the name alone: two rows read "twin_trace", and their
    # radio buttons and trash icons had one label
    base = server["base"]
    with urlopen(base + "/api/jobs", timeout=60) as response:
        twins = {j["id"]: j["location"] for j in json.load(response)["jobs"] if j["name"] == TWIN}
    assert sorted(twins.values()) == [f"first_run/{TWIN}.json", f"second_run/{TWIN}.json"]
    for job_id in twins:
        _load(base, job_id)
    page.goto(base + "/")
    for job_id, location in twins.items():
        row = page.locator(f"#loaded-profiles tr[data-job='{job_id}']")
        expect(row.locator("td.name")).to_have_text(f"{TWIN}{location}")
        expect(row.locator("input[type=radio]")).to_have_attribute(
            "aria-label", f"Open the dashboard of {TWIN} ({location})"
        )
        expect(row.get_by_role("button")).to_have_attribute(
            "aria-label", f"Unload {TWIN} ({location})"
        )


def test_the_job_list_follows_a_load_that_ends_between_two_of_its_requests(page, server):
    base = server["base"]
    race = _job_id(base, RACE)
    _load(base, race)
    page.goto(base + "/")
    row = page.locator("#job-list tbody tr", has_text=RACE)
    expect(row).to_contain_text("Loading…")

    def finish_the_load_then_answer(route) -> None:
        server["gates"][RACE].set()
        while True:
            with urlopen(base + "/api/loaded", timeout=60) as response:
                states = {p["id"]: p["state"] for p in json.load(response)["loaded"]}
            if states[race] != "loading":
                break
            time.sleep(0.05)
        route.continue_()

    page.route("**/api/loaded", finish_the_load_then_answer)
    expect(page.locator("#loaded-profiles tr", has_text=RACE)).to_contain_text("Loaded")
    # the list polls every second while anything loads; it must not stop at "Loading…"
    expect(row).to_contain_text("Loaded", timeout=15_000)


def test_a_job_ticked_while_another_loads_stays_ticked_and_focused(page, server):
    # while a load runs, the lists are read and drawn anew every second: the ticks and the
    # keyboard's place went with them
    page.goto(server["base"] + "/")
    page.locator("#job-list tr", has_text=HELD).locator("input[type=checkbox]").check()
    page.click("#load-button")
    expect(page.locator("#loaded-profiles tr", has_text=HELD)).to_contain_text("Loading")
    ticked = page.locator("#job-list tr", has_text=TICKED).locator("input[type=checkbox]")
    ticked.focus()
    page.keyboard.press("Space")
    for _ in range(2):  # two polls of the lists, each drawing them anew
        with page.expect_response("**/api/jobs"):
            pass
    expect(ticked).to_be_checked()
    expect(ticked).to_be_focused()
    expect(page.locator("#load-button")).to_be_enabled()
    server["gates"][HELD].set()
    expect(page.locator("#loaded-profiles tr", has_text=HELD)).to_contain_text("Loaded")
    expect(ticked).to_be_checked()


def _open_dashboard(page, base: str, name: str) -> None:
    page.goto(base + "/")
    page.locator("#loaded-profiles tr", has_text=name).locator("input[type=radio]").click()
    page.wait_for_url("**/dashboard*")
    expect(page.locator("h1")).to_have_text(name)


def test_each_tab_keeps_its_job_through_links_reloads_and_back(page, server):
    base = server["base"]
    first, second = _job_id(base, FIRST), _job_id(base, SECOND)
    for job_id in (first, second):
        _load(base, job_id)
    # two tabs of one browser, which share what it remembers
    context = page.context.browser.new_context(viewport={"width": 1440, "height": 900})
    tab, other = context.new_page(), context.new_page()
    errors = [page_errors(tab), page_errors(other)]
    _open_dashboard(tab, base, FIRST)
    _open_dashboard(other, base, SECOND)
    # the first tab still shows its own job on every page, reloaded or not
    tab.click("nav a[data-page=info]")
    expect(tab.locator("h1")).to_have_text(f"Information · {FIRST}")
    tab.reload()
    expect(tab.locator("h1")).to_have_text(f"Information · {FIRST}")
    tab.go_back()
    expect(tab.locator("h1")).to_have_text(FIRST)
    # a link to a page of a job opens that job, whatever was picked last
    other.goto(f"{base}/info?job={first}")
    expect(other.locator("h1")).to_have_text(f"Information · {FIRST}")
    context.close()
    assert errors == [[], []], errors


def test_the_profile_shown_last_opens_its_dashboard_again_when_picked(page, server):
    # its radio button, checked already, changed nothing when clicked, so nothing opened
    base = server["base"]
    first = _job_id(base, FIRST)
    _load(base, first)
    _open_dashboard(page, base, FIRST)
    page.click("nav a[data-page=load]")
    radio = page.locator("#loaded-profiles tr", has_text=FIRST).locator("input[type=radio]")
    expect(radio).to_be_checked()
    radio.click()
    page.wait_for_url(f"**/dashboard?job={first}")
    expect(page.locator("h1")).to_have_text(FIRST)


def test_a_link_to_a_job_that_is_not_loaded_offers_to_load_it(page, server):
    base = server["base"]
    first = _job_id(base, FIRST)
    _load(base, first)
    page.goto(base + "/")
    page.locator("#loaded-profiles tr", has_text=FIRST).get_by_role(
        "button", name=f"Unload {FIRST}"
    ).click()
    expect(page.locator("#loaded-profiles tr", has_text=FIRST)).to_have_count(0)
    page.goto(f"{base}/dashboard?job={first}")
    notice = page.locator("#selection-notice")
    expect(notice).to_contain_text(f"“{FIRST}” is not loaded")
    notice.get_by_role("button", name="Load it").click()
    expect(page.locator("h1")).to_have_text(FIRST)
    expect(page.locator("article.panel[data-state]")).to_have_count(13)
    page.goto(f"{base}/timeline?job=0123456789abcdef0123")
    expect(page.locator("#selection-notice")).to_contain_text("not among this server's jobs")


def test_the_arrow_keys_move_among_loaded_profiles_and_enter_opens_one(page, server):
    # picking a profile opens its dashboard: the arrow keys, which pick in a radio group,
    # opened the next profile at once, so a keyboard user could not reach the others
    base = server["base"]
    for name in (FIRST, SECOND, UNDATED):
        _load(base, _job_id(base, name))
    page.goto(base + "/")
    for name in (FIRST, SECOND, UNDATED):
        radio = page.locator("#loaded-profiles tr", has_text=name).locator("input[type=radio]")
        expect(radio).to_be_enabled()
    usable = page.locator("#loaded-profiles input[type=radio]:not([disabled])")
    ids = [usable.nth(i).get_attribute("value") for i in range(usable.count())]
    start = ids.index(_job_id(base, FIRST))
    usable.nth(start).focus()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    target = ids[(start + 2) % len(ids)]
    expect(page.locator(f"#loaded-profiles input[value='{target}']")).to_be_focused()
    assert page.url == base + "/"
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/dashboard?job={target}")
