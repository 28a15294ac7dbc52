"""Suite-wide checks of the package's shape: public API, import weight, import direction, errors."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import stepscope
from stepscope import errors

PACKAGE = Path(stepscope.__file__).parent

#: stage -> the stages it may import (docs/style.md §2.1); leaves may be imported by anyone.
ALLOWED = {
    "config": set(),
    "store": {"config"},
    "collect": {"config", "store"},
    "analysis": {"config", "store"},
    "rules": {"config", "store", "analysis"},
    "report": {"config", "store", "analysis", "rules"},
    "ui": {"config", "store", "analysis", "rules", "report"},
    "export": {"config", "store", "analysis"},
}
LEAVES = {"errors", "_optional", "_lazy", "_gzip", "_atomic", "_sql", "_natural", "_utf8"}


def test_every_public_name_resolves() -> None:
    for name in stepscope.__all__:
        assert getattr(stepscope, name) is not None, name


def test_every_error_class_is_a_public_name() -> None:
    # `except stepscope.StorageAccessError` (docs/analysis.md: what open_job raises for refused
    # credentials) failed with AttributeError, though the other errors were there
    assert set(errors.__all__) <= set(stepscope.__all__)


def test_no_public_name_is_also_a_module_that_would_hide_it() -> None:
    # importing stepscope.<name> binds the module to stepscope.<name>, so
    # `from stepscope import <name>` would give the module, not the function or class
    modules = {path.stem for path in PACKAGE.glob("*.py")} | {
        path.parent.name for path in PACKAGE.glob("*/__init__.py")
    }
    assert not set(stepscope.__all__) & modules


def test_unknown_attribute_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = stepscope.no_such_name  # type: ignore[attr-defined]


def test_import_stays_light() -> None:
    heavy = ["torch", "pandas", "duckdb", "pyarrow", "fastapi", "pynvml", "s3fs", "pyinstrument"]
    code = (
        "import sys, stepscope\n"
        "with stepscope.annotate('x'):\n    pass\n"
        "from stepscope.store import SystemMetricsWriter, TimelineWriter\n"
        f"print(','.join(m for m in {heavy!r} if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "", f"import stepscope loaded: {result.stdout.strip()}"


def _stepscope_imports(path: Path) -> set[str]:
    """The first component below ``stepscope`` of every stepscope import in a module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "stepscope" and len(parts) > 1:
                found.add(parts[1])
    return found


@pytest.mark.parametrize("stage", sorted(ALLOWED))
def test_imports_point_one_way(stage: str) -> None:
    allowed = ALLOWED[stage] | LEAVES | {stage}
    offenders = {
        str(module.relative_to(PACKAGE)): sorted(_stepscope_imports(module) - allowed)
        for module in (PACKAGE / stage).rglob("*.py")
    }
    offenders = {module: bad for module, bad in offenders.items() if bad}
    assert not offenders, f"{stage} may only import {sorted(allowed)}: {offenders}"


def test_every_error_class_is_raised_with_a_message_that_names_the_problem() -> None:
    cases = [
        errors.ConfigError("FrameworkProfile.num_steps", 0, "an integer >= 1"),
        errors.MissingDependencyError("torch", "torch", "PyTorch instrumentation"),
        errors.SessionError("a profiling session is already running"),
        errors.StoreError("write failed"),
        errors.JobNotFoundError("/nowhere"),
        errors.UnsupportedFormatError("x.txt", "a job folder or a Kineto trace"),
        errors.CorruptFileError("a.json", "line 3", "unterminated string"),
        errors.RuleError("StepOutlier", "no steps"),
        errors.ServeError("127.0.0.1", 8765, "Address already in use"),
        errors.StorageAccessError("s3://b/run", "access denied (Forbidden)", "Check the keys."),
    ]
    assert {type(e) for e in cases} == {
        getattr(errors, name) for name in errors.__all__ if name != "StepscopeError"
    }
    for error in cases:
        assert isinstance(error, errors.StepscopeError)
        assert str(error)
    assert str(cases[0]) == "FrameworkProfile.num_steps must be an integer >= 1, got 0."
    assert "pip install 'stepscope[torch]'" in str(cases[1])
    assert isinstance(cases[0], ValueError) and isinstance(cases[4], FileNotFoundError)
    assert isinstance(cases[8], OSError) and "port 8765" in str(cases[8])


def test_require_names_the_extra_for_a_missing_package() -> None:
    from stepscope._optional import require

    with pytest.raises(errors.MissingDependencyError, match=r"stepscope\[s3\]"):
        require("no_such_package_here", extra="s3", feature="s3:// paths")
