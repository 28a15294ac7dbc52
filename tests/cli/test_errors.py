"""What the ``stepscope`` command prints when it cannot do what it was asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepscope.cli import main
from stepscope.testing import TINY_JOB, generate_job


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_job(tmp_path_factory.mktemp("generated") / "job", **TINY_JOB)


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "{job}", "-o", "{missing}/trace.json"],
        ["rules", "{job}", "--rule", "StepOutlier", "--output-dir", "{file}/rules"],
    ],
    ids=["export-output-in-a-missing-folder", "rules-output-under-a-file"],
)
def test_an_output_that_cannot_be_written_is_named_without_a_traceback(
    job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    file = tmp_path / "a-file"
    file.write_text("")
    paths = {"job": job, "missing": tmp_path / "missing", "file": file}
    assert main([arg.format(**paths) for arg in argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("stepscope: error: ")
    assert str(tmp_path) in err
    assert "Traceback" not in err
