"""The browser the tests drive: the distribution's Chromium, headless, through Playwright.

Tests that drive it are marked ``browser`` and :data:`needs_chromium` (skipped where that Chromium
is not installed); screenshots for a human to look at go to :data:`ARTIFACTS`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"

needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is not installed")


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (Playwright ``Browser``), closed on leaving.

    ``--no-sandbox`` because test machines often run as root, where Chromium's sandbox refuses
    to start.
    """
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


def page_errors(page: Any) -> list[str]:
    """The console errors and uncaught exceptions of ``page`` (a Playwright ``Page``), collected
    as they happen: a test that drives the page asserts the list stays empty."""
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return errors


def fail_first_request(page: Any, url_pattern: str, detail: str, times: int = 1) -> list[str]:
    """Make the server seem to fail the first ``times`` requests of ``page`` to ``url_pattern``
    (a 500 with ``detail``); later ones reach it. Returns the URLs failed, as they are."""
    failed: list[str] = []

    def fail_first(route: Any) -> None:
        if len(failed) == times:
            route.continue_()
            return
        failed.append(route.request.url)
        route.fulfill(status=500, json={"detail": detail})

    page.route(url_pattern, fail_first)
    return failed
