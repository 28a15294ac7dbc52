"""The profiling report opened from the dashboard's rule panel, in a real browser.

The report draws its figures with inline scripts; the UI serves it in a sandbox that lets them
run, without letting a report (which comes from a job folder) use the UI's API.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from stepscope.report import write_report
from stepscope.testing import TINY_JOB, generate_job
from tests.browser import chromium, needs_chromium, page_errors
from tests.servers import serve_app

sync_api = pytest.importorskip("playwright.sync_api")
expect = sync_api.expect

pytestmark = [pytest.mark.browser, needs_chromium]


@pytest.fixture(scope="module")
def base_url(tmp_path_factory) -> Iterator[str]:
    from stepscope.ui import create_app

    tmp = tmp_path_factory.mktemp("report")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STEPSCOPE_CACHE_DIR", str(tmp / "cache"))
        write_report(generate_job(tmp / "jobs" / "reported", **TINY_JOB))
        app = create_app([tmp / "jobs"], settings_path=tmp / "settings.json")
        with serve_app(app) as base:
            yield base


def test_the_report_shows_its_figures_and_cannot_use_the_api(base_url: str) -> None:
    with chromium() as browser:
        page = browser.new_page()
        page.set_default_timeout(60_000)
        errors = page_errors(page)
        jobs: Any = page.request.get(base_url + "/api/jobs").json()["jobs"]
        rules: Any = page.request.get(f"{base_url}/api/jobs/{jobs[0]['id']}/rules").json()
        assert rules["report_url"]
        page.goto(base_url + rules["report_url"])
        expect(page.locator(".main-svg").first).to_be_visible()
        assert errors == [], f"console errors: {errors}"
        refused = page.evaluate("() => fetch('/api/settings').then(() => false, () => true)")
        assert refused
