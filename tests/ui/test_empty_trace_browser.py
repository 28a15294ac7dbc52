"""A loaded PyTorch profiler trace that holds no events, in a real browser: the job list, the
dashboard and the Information page say so in the same words where its start would be, rather than
a bare "—" that reads as a value missing by mistake.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.browser import chromium, needs_chromium, page_errors
from tests.servers import serve_app

from .conftest import job_ids, load_and_wait

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

pytestmark = [pytest.mark.browser, needs_chromium]

NAME = "empty"
NO_EVENTS = "No events or metrics"


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[str, str]]:
    """The base URL of a server whose one job, a trace of no events, is loaded; and its id."""
    from stepscope.ui import create_app

    tmp = tmp_path_factory.mktemp("empty-trace")
    trace = tmp / "jobs" / f"{NAME}.json"
    trace.parent.mkdir()
    trace.write_text(
        json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 0}, "traceEvents": []})
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STEPSCOPE_CACHE_DIR", str(tmp / "cache"))
        app = create_app([tmp / "jobs"], settings_path=tmp / "settings.json")
        client = TestClient(app, base_url="http://127.0.0.1")
        job_id = job_ids(client)[NAME]
        assert load_and_wait(client, job_id)["state"] == "loaded"
        with serve_app(app) as url:
            yield url, job_id


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as browser:
        yield browser


def test_every_page_says_the_trace_holds_no_events(browser, served: tuple[str, str]) -> None:
    base, job_id = served
    page = browser.new_page()
    errors = page_errors(page)
    page.goto(base + "/")
    start = page.locator("#job-list tbody tr", has_text=NAME).locator("td").nth(3)
    expect(start).to_have_text(NO_EVENTS)
    page.goto(f"{base}/dashboard?job={job_id}")
    expect(page.locator(".page-head .lead")).to_contain_text(NO_EVENTS)
    expect(page.locator(".page-head .lead")).not_to_contain_text("Started")
    page.goto(f"{base}/info?job={job_id}")
    expect(page.locator("[data-section='Job'] dt:text-is('Start') + dd")).to_have_text(NO_EVENTS)
    # a recording that has ended will hold none later: "yet" is for a job still running
    page.goto(f"{base}/timeline?job={job_id}")
    expect(page.locator("main .notice")).to_have_text("This profile holds no events or metrics.")
    assert errors == []
    page.close()
