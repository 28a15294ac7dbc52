"""Suite-wide fixtures: where the recorded fixtures live, and skipping cleanly without them."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"


@pytest.fixture(scope="session")
def shared_fixtures() -> Path:
    """The recorded real-world data beside the repository; tests using it skip without it."""
    if not SHARED_FIXTURES.is_dir():
        pytest.skip(f"recorded fixtures not found at {SHARED_FIXTURES} (they live beside the repo)")
    return SHARED_FIXTURES
