"""Fixtures of the rule tests: an empty in-memory job to fill with numpy."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepscope.testing import TableJob


@pytest.fixture
def job(tmp_path: Path) -> TableJob:
    return TableJob(tmp_path / "job")
