"""``stepscope demo``: its options are checked before a job starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepscope.cli import main


@pytest.mark.parametrize(
    "arguments", [["--steps-per-epoch", "0"], ["--epochs", "-1"], ["--epochs", "two"]]
)
def test_a_demo_of_no_steps_is_refused_before_a_job_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str]
) -> None:
    job_dir = tmp_path / "demo"
    with pytest.raises(SystemExit) as caught:
        main(["demo", "--job-dir", str(job_dir), *arguments])
    assert caught.value.code == 2
    assert f"argument {arguments[0]}: must be an integer >= 1, got {arguments[1]!r}" in (
        capsys.readouterr().err
    )
    assert not job_dir.exists()
