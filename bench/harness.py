"""What the side-by-side benchmarks share: generated jobs kept in the bench cache, running one
measurement script in a fresh process, and alternating stepscope (cold and warm cache) with
smdebug.

A measurement runs in its own process so imports, caches and peak memory start from zero for
every side; the script prints one JSON object as its last line, which is returned as a dict.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from peers import CACHE_DIR, SMDEBUG, PeerSetupError, peer_python

__all__ = ["alternate_with_smdebug", "generated_job", "run_script"]


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


class Runs(dict[str, list[dict[str, Any]]]):
    """Each side's measurements (``cold``, ``warm``, ``smdebug``), in the order they ran."""

    def median(self, side: str, key: str) -> float:
        return statistics.median(r[key] for r in self[side])


def alternate_with_smdebug(
    job: Path,
    ours: str,
    smdebug_script: str,
    reps: int,
    describe: Callable[[dict[str, Any]], str],
) -> Runs:
    """Measure stepscope cold, stepscope warm and smdebug in turn, ``reps`` times.

    ``ours`` gets the job and a cache folder (empty for the cold run, the same one for the warm
    run); ``smdebug_script`` runs in smdebug's virtualenv on the job's ``profiler-output``.
    ``describe`` turns one measurement into the text printed after each round.
    """
    try:
        smdebug = peer_python("smdebug", SMDEBUG)
    except PeerSetupError as exc:
        raise SystemExit(f"cannot set up the smdebug peer: {exc}") from None
    runs = Runs(cold=[], warm=[], smdebug=[])
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(reps):
            cache = Path(tmp) / f"cache-{rep}"
            runs["cold"].append(run_script(sys.executable, ours, str(job), str(cache)))
            runs["warm"].append(run_script(sys.executable, ours, str(job), str(cache)))
            runs["smdebug"].append(
                run_script(smdebug, smdebug_script, str(job / "profiler-output"))
            )
            line = ", ".join(f"{side} {describe(r[-1])}" for side, r in runs.items())
            print(f"rep {rep + 1}: {line}", flush=True)
    return runs


def compare_from_command_line(
    description: str,
    ours: str,
    smdebug_script: str,
    describe: Callable[[dict[str, Any]], str],
) -> tuple[Path, int, Runs]:
    """The read benchmarks' command line (``--reps``, ``--minutes``): generate or reuse the job,
    then :func:`alternate_with_smdebug`. Returns the job, the repetitions and the runs."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--minutes", type=int, default=60)
    args = parser.parse_args()
    job = generated_job(args.minutes)
    return job, args.reps, alternate_with_smdebug(job, ours, smdebug_script, args.reps, describe)
