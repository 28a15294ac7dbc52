"""The commands of an install without an optional extra: what needs the extra names it.

Each command runs where the extra's packages cannot be imported, in its own processes too (the
rule engine, the monitor): a ``sitecustomize`` on ``PYTHONPATH`` marks them absent the way Python
does (``sys.modules[name] = None``), as in an environment where ``pip install stepscope`` left
the extra out.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _stepscope_without(
    packages: list[str], argv: list[str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    absent = cwd / "absent-packages"
    absent.mkdir(exist_ok=True)
    (absent / "sitecustomize.py").write_text(
        "import sys\n" + "".join(f"sys.modules[{package!r}] = None\n" for package in packages)
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(absent), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "stepscope", *argv],
        cwd=cwd,
        env=env,
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


@pytest.mark.parametrize(
    ("argv", "feature"),
    [
        (["demo", "--steps-per-epoch", "2"], "stepscope demo"),
        (
            ["run", "--nproc-per-node", "2", "--", "train.py"],
            "running several processes per node through torch.distributed.run",
        ),
    ],
    ids=["demo", "run-nproc-per-node"],
)
def test_a_command_that_trains_in_stepscopes_interpreter_needs_torch_before_it_starts(
    tmp_path: Path, argv: list[str], feature: str
) -> None:
    # both ran the job anyway: torch's import failed in the child, the job ended Failed
    (tmp_path / "train.py").write_text("print('trained')\n")
    result = _stepscope_without(["torch"], argv, tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        f"stepscope: error: {feature} needs the 'torch' package, which is not installed. "
        "Install it with: pip install 'stepscope[torch]'\n"
    )
    assert "trained" not in result.stdout
    assert not (tmp_path / "stepscope-jobs").exists(), "no job folder for a job that cannot run"


def test_a_run_without_plotly_says_once_that_it_writes_no_report(tmp_path: Path) -> None:
    # the rule engine logged a traceback at each report update, then the end warned again
    (tmp_path / "train.py").write_text("print('trained')\n")
    result = _stepscope_without(["plotly"], ["run", "--", "train.py"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "trained" in result.stdout
    assert "Traceback" not in result.stderr
    warning = (
        "stepscope: the HTML profiling report needs the 'plotly' package, which is not "
        "installed. Install it with: pip install 'stepscope[ui]' (this job runs without it)"
    )
    assert result.stderr.count("needs the 'plotly' package") == 1, result.stderr
    assert warning in result.stderr
    (job,) = (tmp_path / "stepscope-jobs").iterdir()
    assert (job / "rule-output" / "ProfilerReport" / "status.json").is_file()
    assert not (job / "rule-output" / "profiler-report.html").exists()
    assert "Report:" not in result.stdout + result.stderr


def test_a_run_without_the_ui_extra_says_what_its_ui_command_needs(tmp_path: Path) -> None:
    # "Watch it live: stepscope ui ..." and "Open the Profiler UI: ..." were printed as they are
    # with the extra, for a command that then fails
    (tmp_path / "train.py").write_text("print('trained')\n")
    result = _stepscope_without(["fastapi"], ["run", "--no-report", "--", "train.py"], tmp_path)
    assert result.returncode == 0, result.stderr
    lines = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if line.startswith(("Watch it live:", "Open the Profiler UI:"))
    ]
    assert len(lines) == 2, result.stderr
    for line in lines:
        assert "stepscope ui " in line and "pip install 'stepscope[ui]'" in line, line
