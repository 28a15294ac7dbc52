"""``stepscope.profile()`` without a job folder names a new one that commands can be given."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stepscope.cli import main

CODE = "import stepscope\nwith stepscope.profile():\n    pass\n"


@pytest.mark.parametrize("source", ["-c", "stdin"])
def test_code_without_a_script_file_gets_a_folder_that_is_no_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSCOPE_")}
    argv = [sys.executable, "-c", CODE] if source == "-c" else [sys.executable, "-"]
    subprocess.run(
        argv,
        input=None if source == "-c" else CODE,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    [job] = (tmp_path / "stepscope-jobs").iterdir()
    assert job.name.startswith("python-")
    monkeypatch.chdir(job.parent)
    assert main(["rules", job.name, "--rule", "MaxInitializationTime"]) == 0
