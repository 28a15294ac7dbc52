"""The commands of an install without an optional extra: what needs the extra names it.

Each command runs in its own interpreter in which the extra's packages cannot be imported
(``sys.modules[name] = None`` is how Python marks a module as absent), as in an environment where
``pip install stepscope`` left the extra out.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def _stepscope_without(
    packages: list[str], argv: list[str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    code = "".join(f"sys.modules[{package!r}] = None\n" for package in packages)
    code = f"import sys\n{code}from stepscope.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("package", ["fastapi", "uvicorn", "plotly"])
def test_the_ui_without_the_ui_extra_names_the_extra(tmp_path: Path, package: str) -> None:
    # it was a traceback from deep inside the UI's modules, even for --help
    helped = _stepscope_without([package], ["ui", "--help"], tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert "--port" in helped.stdout

    served = _stepscope_without([package], ["ui", "--no-browser", "--port", "0"], tmp_path)
    assert served.returncode == 1
    assert "Traceback" not in served.stderr
    assert served.stderr.startswith(f"stepscope: error: the Profiler UI needs the '{package}'")
    assert "pip install 'stepscope[ui]'" in served.stderr
