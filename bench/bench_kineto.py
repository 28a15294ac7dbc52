"""Kineto trace analysis: load + temporal breakdown + kernel breakdown, stepscope vs HTA 0.5.0.

Two scenarios on the largest recorded trace (``v100_rank1of2_memory.json.gz``, 216k events,
54 MB of JSON):

* ``single``: that one trace;
* ``eight``: eight copies of it relabelled as ranks 0-7 (1.73 M events), generated once into the
  bench cache (never into the repository).

Each run is its own process, started cold: stepscope opens the trace with ``open_job`` into a
fresh cache folder and runs ``temporal_breakdown``, ``kernel_type_breakdown`` and
``kernel_summary``; Holistic Trace Analysis (in its own virtualenv, see ``peers.py``) builds a
``TraceAnalysis`` and runs ``get_temporal_breakdown`` and ``get_gpu_kernel_breakdown``. Two sets
of figures per run:

* **process**: wall time from process start to exit (interpreter start and imports included),
  CPU time = user + system of the process and all its children (HTA parses ranks in a fork
  pool), and peak memory = the largest summed RSS of the process tree, sampled every 20 ms;
* **work**: the same process's wall and CPU time from just after the libraries are imported to
  the end of the analyses (both sides import their package and pandas first; stepscope also
  DuckDB, pyarrow.parquet and its Kineto reader, which it would otherwise import during the
  work), children included: the time a user waits in a session where the imports are done.

The sides take turns, ``--reps`` runs each; prints the medians and the ratios; both sides' idle time is printed to show they
agree.

    python bench/bench_kineto.py [--reps 3] [--scenario single|eight|all] [--fixtures DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

from peers import CACHE_DIR, HTA, PeerSetupError, peer_python

TRACE = "v100_rank1of2_memory.json.gz"
#: the in-process figures of one run: the work's wall and CPU seconds, imports excluded
WORK_KEYS = ("work_s", "work_cpu_s")
DEFAULT_FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "kineto"

OURS = """
import json, sys, tempfile, time
from stepscope.store import open_job
from stepscope.analysis import kernel_summary, kernel_type_breakdown, temporal_breakdown
import duckdb, pandas, pyarrow.parquet, stepscope.store.kineto  # what the work imports later
t0, c0 = time.perf_counter(), time.process_time()
with tempfile.TemporaryDirectory() as cache:
    job = open_job(sys.argv[1], cache_dir=cache)
    temporal = temporal_breakdown(job)
    kernel_type_breakdown(job)
    kernel_summary(job)
print(json.dumps({"idle_us": float(temporal["idle_us"].sum()), "ranks": len(temporal),
                  "work_s": time.perf_counter() - t0, "work_cpu_s": time.process_time() - c0}))
"""

PEER = """
import json, resource, sys, time, warnings
warnings.simplefilter("ignore")
from hta.trace_analysis import TraceAnalysis
import pandas
def cpu_s():  # HTA parses ranks in a pool of forked processes: their CPU counts
    own, children = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
t0, c0 = time.perf_counter(), cpu_s()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
temporal = analysis.get_temporal_breakdown(visualize=False)
analysis.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
# The idle column is "idle_time(ns)" or "(us)" by version; Kineto timestamps are µs.
idle = next(c for c in temporal.columns if c.startswith("idle_time("))
print(json.dumps({"idle_us": float(temporal[idle].sum()), "ranks": len(temporal),
                  "work_s": time.perf_counter() - t0, "work_cpu_s": cpu_s() - c0}))
"""


def run_measured(command: list[str]) -> tuple[float, float, float, dict]:
    """Run ``command``; return wall s, CPU s of its process tree, peak summed RSS MB, result."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    parent = psutil.Process(child.pid)
    peak = 0
    while child.poll() is None:
        try:
            processes = [parent, *parent.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in processes if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.02)
    wall = time.perf_counter() - start
    out, err = child.communicate()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if child.returncode != 0:
        raise SystemExit(f"{command[0]} failed:\n{err[-2000:]}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return wall, cpu, peak / 1e6, json.loads(out.strip().splitlines()[-1])


def eight_ranks(source: Path) -> Path:
    """Eight relabelled copies of ``source`` (ranks 0-7) in the bench cache, made once."""
    folder = CACHE_DIR / "kineto-eight-ranks"
    if len(list(folder.glob("rank-*.json.gz"))) == 8:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(source, "rb") as handle:
        text = handle.read()
    head_end = text.index(b'"traceEvents"')
    for rank in range(8):
        head = re.sub(rb'"rank":\s*\d+', f'"rank": {rank}'.encode(), text[:head_end], count=1)
        head = re.sub(rb'"world_size":\s*\d+', b'"world_size": 8', head, count=1)
        with gzip.open(folder / f"rank-{rank}.json.gz", "wb", compresslevel=6) as handle:
            handle.write(head + text[head_end:])
    return folder


def single_folder(source: Path) -> Path:
    """A folder holding only ``source`` (HTA reads folders), as a symlink in the bench cache."""
    folder = CACHE_DIR / "kineto-single"
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / source.name
    if not link.exists():
        link.symlink_to(source.resolve())
    return folder


def measure(label: str, target: Path, reps: int, hta_python: Path | None) -> None:
    sides = {"stepscope": [sys.executable, "-c", OURS, str(target)]}
    if hta_python is not None:
        sides["HTA 0.5.0"] = [str(hta_python), "-c", PEER, str(target)]
    # the sides take turns, so a change of the machine's load hits both
    all_runs: dict[str, list[tuple[float, float, float, dict]]] = {name: [] for name in sides}
    for _ in range(reps):
        for name, command in sides.items():
            all_runs[name].append(run_measured(command))
    results: dict[str, tuple[float, ...]] = {}
    for name, runs in all_runs.items():
        wall, cpu, rss = (statistics.median(r[i] for r in runs) for i in range(3))
        work, work_cpu = (statistics.median(r[3][key] for r in runs) for key in WORK_KEYS)
        results[name] = (wall, cpu, rss, work, work_cpu)
        print(
            f"{label:8} {name:10} process: wall {wall:6.2f} s  CPU {cpu:6.2f} s  peak RSS"
            f" {rss:4.0f} MB;  work: wall {work:6.2f} s  CPU {work_cpu:6.2f} s;"
            f"  idle {runs[-1][3]['idle_us']:,.0f} µs over {runs[-1][3]['ranks']} rank(s)"
        )
    if len(results) == 2:
        ours, peer = results["stepscope"], results["HTA 0.5.0"]
        print(
            f"{label:8} ratio      process: {peer[0] / ours[0]:.1f}x faster (wall), "
            f"{peer[1] / ours[1]:.1f}x less CPU, {peer[2] / ours[2]:.1f}x less memory;  "
            f"work: {peer[3] / ours[3]:.1f}x faster (wall), {peer[4] / ours[4]:.1f}x less CPU"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--scenario", choices=["single", "eight", "all"], default="all")
    parser.add_argument("--fixtures", type=Path, default=DEFAULT_FIXTURES)
    parser.add_argument("--skip-hta", action="store_true", help="measure stepscope only")
    args = parser.parse_args()
    source = args.fixtures / TRACE
    if not source.is_file():
        raise SystemExit(f"{source} not found; pass --fixtures")
    hta_python = None
    if not args.skip_hta:
        try:
            hta_python = peer_python("hta", HTA)
        except PeerSetupError as exc:
            print(f"skipping the HTA side: {exc}")
    if args.scenario in ("single", "all"):
        measure("single", single_folder(source), args.reps, hta_python)
    if args.scenario in ("eight", "all"):
        measure("eight", eight_ranks(source), args.reps, hta_python)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
