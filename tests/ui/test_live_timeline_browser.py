"""The timeline of a job still training, in a real browser: it follows the data as it arrives.

The job is generated, marked running, and only its first minute is on disk when the timeline
opens; the rest then appears, as a training job writes it. Without reloading the page, the whole
job ("0") must reach the new data.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stepscope.store.layout import job_end_marker_paths
from stepscope.testing import generate_job
from tests.browser import chromium, needs_chromium, page_errors
from tests.servers import serve_app

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

pytestmark = [pytest.mark.browser, needs_chromium]


@pytest.fixture
def live(tmp_path: Path) -> Iterator[dict[str, Any]]:
    from stepscope.ui import create_app

    job = generate_job(tmp_path / "jobs" / "training", gpus=1, cpus=1, minutes=3)
    meta = json.loads((job / "job.json").read_text())
    (job / "job.json").write_text(json.dumps({**meta, "status": "Running", "end_time_us": None}))
    for marker in job_end_marker_paths(job / "profiler-output"):  # none while it trains
        marker.unlink(missing_ok=True)
    # only the first minute is on disk: the first system file and the first rotation of events
    output = job / "profiler-output"
    system = sorted((output / "system").rglob("*.algo-1.json"))
    events = sorted((output / "framework" / "pevents").rglob("*.json"))
    first_end = min(int(p.name.split("_")[0]) for p in events)
    rest = system[1:] + [p for p in events if int(p.name.split("_")[0]) > first_end]
    later = tmp_path / "later"
    later.mkdir()
    hidden = [(later / str(i), path) for i, path in enumerate(rest)]
    for place, path in hidden:
        path.rename(place)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
        app = create_app([tmp_path / "jobs"], settings_path=tmp_path / "settings.json")
        with serve_app(app) as base:
            yield {"base": base, "rest": hidden}


def _open_the_only_job(page: Any, base: str) -> None:
    """Load the one job the server lists and pick it (which opens its dashboard)."""
    page.goto(base + "/")
    page.locator("#job-list input[type=checkbox]").check()
    page.click("#load-button")
    radio = page.locator("#loaded-profiles input[type=radio]")
    expect(radio).to_be_enabled()
    radio.click()
    page.wait_for_url("**/dashboard?job=*")


def _whole_job_end(page: Any) -> float:
    page.locator("#tl-canvas").focus()
    page.keyboard.press("0")
    return float(page.locator("#tl-range").get_attribute("data-end-us"))


def test_the_timeline_of_a_running_job_reaches_new_data(live: dict[str, Any]) -> None:
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.set_default_timeout(60_000)
        errors = page_errors(page)
        _open_the_only_job(page, live["base"])
        page.goto(live["base"] + "/timeline")
        page.wait_for_selector("#tl-canvas[data-loaded='1']")
        before = _whole_job_end(page)
        for hidden, path in live["rest"]:
            hidden.rename(path)
        # the page rereads the job's tracks and time range every 15 s while the job runs
        page.wait_for_function(
            "before => { document.getElementById('tl-canvas').focus();"
            " document.dispatchEvent(new KeyboardEvent('keydown', {key: '0'}));"
            " return Number(document.getElementById('tl-range').dataset.endUs) > before + 60e6; }",
            arg=before,
            polling=1000,
            timeout=60_000,
        )
        assert errors == [], f"console errors: {errors}"


def test_the_timeline_of_a_running_job_without_data_yet_shows_its_first_data(
    tmp_path: Path,
) -> None:
    from stepscope.ui import create_app

    job = generate_job(tmp_path / "jobs" / "starting", gpus=1, cpus=1, minutes=1)
    meta = json.loads((job / "job.json").read_text())
    (job / "job.json").write_text(json.dumps({**meta, "status": "Running", "end_time_us": None}))
    for marker in job_end_marker_paths(job / "profiler-output"):
        marker.unlink(missing_ok=True)
    later = tmp_path / "later"
    (job / "profiler-output").rename(later)  # the job has started and written nothing yet
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
        app = create_app([tmp_path / "jobs"], settings_path=tmp_path / "settings.json")
        with serve_app(app) as base, chromium() as browser:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.set_default_timeout(60_000)
            errors = page_errors(page)
            _open_the_only_job(page, base)
            page.click("nav a[data-page=timeline]")
            expect(page.locator("main")).to_contain_text("holds no events or metrics yet")
            later.rename(job / "profiler-output")  # its first data
            # the page asks for the job's tracks again every 15 s while the job runs
            page.wait_for_selector("#tl-canvas[data-loaded='1']")
            expect(page.locator("#tl-tree [data-label='CPU utilization']")).to_be_visible()
            assert errors == [], f"console errors: {errors}"
