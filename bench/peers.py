"""Peer virtualenvs for side-by-side benchmarks: one cached virtualenv per pinned set of packages.

Benchmarks compare stepscope with the tools it replaces (smdebug, Holistic Trace Analysis) in the
same run. Those peers pin old libraries (pandas < 3, numpy < 2.3) that must not leak into
stepscope's own environment, so each peer lives in its own virtualenv under ``.bench-cache/``
(git-ignored), built with the interpreter running the benchmark and reused while its package
specs stay the same.

Usage::

    from peers import SMDEBUG, peer_python, PeerSetupError

    try:
        python = peer_python("smdebug", SMDEBUG)
    except PeerSetupError as exc:       # no network, pip failure, ...
        raise SystemExit(f"skipping the smdebug side: {exc}")
    subprocess.run([str(python), "-c", "import smdebug"], check=True)

A test that needs a peer calls :func:`peer_python` and skips on :class:`PeerSetupError`.
Concurrent callers (two benchmarks, or pytest workers) wait on a lock file, so one virtualenv is
built once.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["CACHE_DIR", "HTA", "SMDEBUG", "PeerSetupError", "peer_python"]

log = logging.getLogger(__name__)

#: Where peer virtualenvs live (override with ``STEPSCOPE_BENCH_CACHE``).
CACHE_DIR = Path(
    os.environ.get("STEPSCOPE_BENCH_CACHE", Path(__file__).resolve().parents[1] / ".bench-cache")
)

#: SageMaker Debugger's last release, with what its profiler readers import at run time.
SMDEBUG: tuple[str, ...] = ("smdebug==1.0.34", "requests", "pandas", "psutil")

#: Holistic Trace Analysis, with the pandas/numpy it still works with.
HTA: tuple[str, ...] = ("holistictraceanalysis==0.5.0", "pandas<3", "numpy<2.3")

_STAMP = ".peer-specs"
_PIP_TIMEOUT_S = 900


class PeerSetupError(RuntimeError):
    """A peer virtualenv could not be created or its packages could not be installed."""


def peer_python(name: str, specs: Sequence[str], *, cache_dir: Path | None = None) -> Path:
    """Return the python executable of the peer virtualenv ``name`` with ``specs`` installed.

    The virtualenv is ``<cache_dir>/<name>``. It is reused when its recorded specs and the
    interpreter version equal the requested ones; otherwise it is rebuilt from scratch.

    :param name: a folder name for the peer, e.g. ``"smdebug"``.
    :param specs: pip requirement specifiers; pin the peer itself (``"smdebug==1.0.34"``).
    :param cache_dir: parent folder of the virtualenvs; default :data:`CACHE_DIR`.
    :raises PeerSetupError: when ``venv`` or ``pip install`` fails (e.g. the registry is
        unreachable); the message ends with pip's last output lines.
    """
    root = Path(cache_dir) if cache_dir is not None else CACHE_DIR
    root.mkdir(parents=True, exist_ok=True)
    venv = root / name
    python = venv / "bin" / "python"
    wanted = _specs_key(specs)
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = venv / _STAMP
        if python.exists() and stamp.exists() and stamp.read_text() == wanted:
            return python
        log.info("building peer virtualenv %s with %s", venv, " ".join(specs))
        _run([sys.executable, "-m", "venv", "--clear", str(venv)], "create the virtualenv")
        _run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *specs],
            f"pip install {' '.join(specs)}",
        )
        stamp.write_text(wanted)
    return python


def _specs_key(specs: Sequence[str]) -> str:
    """What identifies a built virtualenv: the interpreter version and the sorted specs."""
    text = "\n".join([sys.version, *sorted(specs)])
    return hashlib.sha256(text.encode()).hexdigest()


def _run(command: list[str], what: str) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PeerSetupError(f"could not {what}: {exc}") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        raise PeerSetupError(f"could not {what} (exit {done.returncode}):\n{tail}")
