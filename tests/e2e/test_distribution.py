"""The sdist and the wheel as a user gets them: what they hold, and stepscope installed from the
wheel, outside this checkout, profiling a script and serving the UI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest
from tests.collect.torch.torchjob import read_events, steps
from tests.servers import START_TIMEOUT_S, free_port

import stepscope

REPO = Path(__file__).resolve().parents[2]
#: what a release is built from (the rest of the checkout is caches and virtualenvs)
SOURCE = [
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "MANIFEST.in",
    "src",
    "docs",
    "tests",
    "scripts",
]
#: the first lines of the Apache License 2.0, as the Apache Software Foundation publishes it
APACHE_2_HEADER = (
    "\n                                 Apache License\n"
    "                           Version 2.0, January 2004\n"
    "                        http://www.apache.org/licenses/\n"
)


def _files(root: Path, folder: str) -> set[str]:
    """The files under ``root/folder``, relative to ``root``, without Python's caches."""
    return {
        path.relative_to(root).as_posix()
        for path in (root / folder).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("source")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCE:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, copy / name, ignore=ignore)
        elif path.is_file():
            shutil.copy2(path, copy / name)
    return copy


def _build(kind: str, source: Path) -> Path:
    """Build the ``sdist`` or ``wheel`` with the project's build backend, as pip or build do."""
    out = source.parent / f"{source.name}-dist"
    out.mkdir(exist_ok=True)
    code = f"from setuptools import build_meta\nprint(build_meta.build_{kind}({str(out)!r}))\n"
    built = subprocess.run(
        [sys.executable, "-c", code],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return out / built.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def wheel(source: Path) -> Path:
    return _build("wheel", source)


def test_the_sdist_holds_the_docs_the_tests_and_the_scripts(source: Path) -> None:
    # it held tests/test_atomic.py and tests/test_launch.py alone (setuptools' default pick),
    # and none of the docs the README links to nor the scripts its quick start runs
    sdist = _build("sdist", source)
    with tarfile.open(sdist) as archive:
        top = f"stepscope-{stepscope.__version__}/"
        held = {name.removeprefix(top) for name in archive.getnames()}
    for folder in ("src/stepscope", "docs", "tests", "scripts"):
        missing = _files(source, folder) - held
        assert not missing, f"the sdist lacks {sorted(missing)}"
    # pyproject declared Apache-2.0, and neither the checkout nor the sdist held its text
    with tarfile.open(sdist) as archive:
        license_file = archive.extractfile(f"{top}LICENSE")
        assert license_file is not None
        assert license_file.read().decode().startswith(APACHE_2_HEADER)


def test_the_wheel_holds_every_file_of_the_package(source: Path, wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        held = set(archive.namelist())
        metadata = archive.read(f"stepscope-{stepscope.__version__}.dist-info/METADATA").decode()
        entry_points = archive.read(
            f"stepscope-{stepscope.__version__}.dist-info/entry_points.txt"
        ).decode()
    package = {name.removeprefix("src/") for name in _files(source, "src/stepscope")}
    assert package <= held, f"the wheel lacks {sorted(package - held)}"
    assert f"\nVersion: {stepscope.__version__}\n" in metadata
    # it said >=3.10, where pip found no duckdb>=2.0 and failed on that instead of naming Python
    assert "\nRequires-Python: >=3.11\n" in metadata
    assert "stepscope = stepscope.cli:main" in entry_points
    assert "\nLicense-Expression: Apache-2.0\n" in metadata
    assert "\nLicense-File: LICENSE\n" in metadata
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(f"stepscope-{stepscope.__version__}.dist-info/licenses/LICENSE")
    assert text.decode().startswith(APACHE_2_HEADER)


@pytest.mark.slow
def test_installed_from_the_wheel_it_profiles_a_script_and_serves_the_ui(
    wheel: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site-packages"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", site, wheel],
        capture_output=True,
        check=True,
        timeout=300,
    )
    work = tmp_path / "work"
    work.mkdir()
    # the installed copy only: not this checkout (the dependencies come from this environment)
    env = {**os.environ, "PYTHONPATH": str(site)}
    (work / "train.py").write_text(
        "import torch\n"
        "model = torch.nn.Linear(4, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(5):\n"
        "    optimizer.zero_grad()\n"
        "    model(torch.randn(8, 4)).sum().backward()\n"
        "    optimizer.step()\n"
    )

    def stepscope_command(*argv: str) -> list[str]:
        return [sys.executable, "-m", "stepscope", *argv]

    where = subprocess.run(
        [sys.executable, "-c", "import stepscope; print(stepscope.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(site)
    ran = subprocess.run(
        stepscope_command("run", "--no-report", "--", sys.executable, "train.py"),
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    (job,) = (work / "stepscope-jobs").iterdir()
    assert len(steps(read_events(job))) == 5, "the installed bootstrap did not instrument it"

    port = free_port()
    ui = subprocess.Popen(
        stepscope_command("ui", "--no-browser", "--port", str(port), str(work / "stepscope-jobs")),
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for asset in ["/", "/static/js/main.js", "/static/app.css", "/vendor/plotly.min.js"]:
            assert _get(f"http://127.0.0.1:{port}{asset}"), asset
    finally:
        ui.terminate()
        ui.wait(timeout=30)


def _get(url: str) -> bytes:
    """The body of ``url``, waiting for the server to start listening."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return bytes(response.read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
