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
