"""Suite-wide fixtures: where the recorded fixtures live, and skipping cleanly without them;
the processes the tests start get Ctrl-C as from a terminal."""

from __future__ import annotations

import signal
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


@pytest.fixture(autouse=True, scope="session")
def ctrl_c_reaches_started_processes() -> None:
    """A test run started with SIGINT ignored (a background job of a non-interactive shell,
    ``nohup``) passed that on to every process the tests start: ``stepscope run`` and its
    command then ignored the tests' Ctrl-C, as they should, and those tests failed every time.
    Handled here, SIGINT is back to its default in the processes started."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
