"""What the side-by-side benchmarks share: generated jobs kept in the bench cache, and running
one measurement script in a fresh process.

A measurement runs in its own process so imports, caches and peak memory start from zero for
every side; the script prints one JSON object as its last line, which is returned as a dict.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from peers import CACHE_DIR

__all__ = ["generated_job", "run_script"]


def generated_job(minutes: int) -> Path:
    """The reference job (``stepscope.testing.generate_job`` defaults) of ``minutes``, made once."""
    folder = CACHE_DIR / f"job-{minutes}min"
    if not (folder / "profiler-output" / "training_job_end.ts").exists():
        from stepscope.testing import generate_job

        shutil.rmtree(folder, ignore_errors=True)
        print(f"generating a {minutes}-minute job in {folder} ...", flush=True)
        generate_job(folder, minutes=minutes)
    return folder


def run_script(python: str | Path, script: str, *args: str) -> dict[str, Any]:
    """Run ``python -c script args...`` and return the JSON object on its last output line."""
    done = subprocess.run(
        [str(python), "-c", script, *args], capture_output=True, text=True, check=True
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
