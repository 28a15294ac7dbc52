"""Every PyTorch instrumentation test leaves no profiling session and no hook behind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stepscope.collect.session import get_active_session
from stepscope.collect.torch import is_instrumented


@pytest.fixture(autouse=True)
def _no_session_left_behind() -> Iterator[None]:
    assert get_active_session() is None and not is_instrumented()
    yield
    assert get_active_session() is None, "a test left a profiling session running"
    assert not is_instrumented(), "a test left PyTorch hooks installed"
