"""Export speed: a job written as a Perfetto protobuf trace and as Chrome trace JSON.

Two scenarios built from the largest recorded PyTorch profiler trace
(``v100_rank1of2_memory.json.gz``, 216k events):

* ``single``: that one trace;
* ``eight``: eight copies of it relabelled as ranks 0-7 (1.73 M events), made once into the bench
  cache by ``bench_kineto.eight_ranks``.

The job is opened once per scenario into a columnar cache in the bench cache folder (not
timed); every measured run is then its own fresh process that opens that warm cache and calls
``write_perfetto_trace`` or ``write_chrome_trace`` on the whole job. Only the writer call is
timed, as wall and CPU seconds (CPU time counts every thread; the median of ``--reps`` runs is
printed); the counts of slices, tracks and flows show what each run wrote. Peak RSS is that of
the measuring process at exit, which bounds what the export held.

    python bench/bench_export.py [--reps 5] [--scenario single|eight|all] [--fixtures DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from bench_kineto import DEFAULT_FIXTURES, TRACE, eight_ranks, single_folder
from peers import CACHE_DIR

RUN = """
import json, resource, sys, tempfile, time
from pathlib import Path
from stepscope.store import open_job
from stepscope.export.chrome import write_chrome_trace
from stepscope.export.perfetto import write_perfetto_trace
from stepscope.export.window import resolve_window
source, cache, fmt = sys.argv[1:4]
job = open_job(source, cache_dir=cache)
job.refresh()
con = job.connect()
window = resolve_window(con)
writer = write_chrome_trace if fmt == "chrome" else write_perfetto_trace
suffix = ".trace.json.gz" if fmt == "chrome" else ".perfetto-trace"
with tempfile.TemporaryDirectory() as folder:
    output = Path(folder) / f"export{suffix}"
    wall, cpu = time.perf_counter(), time.process_time()
    summary = writer(con, output, window)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    size = output.stat().st_size
rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "bytes": size, "rss_mb": rss_mb,
                  "slices": summary.slices, "tracks": summary.tracks, "flows": summary.flows}))
"""


def run(source: Path, cache: Path, fmt: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(source), str(cache), fmt],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"export run failed:\n{done.stderr[-2000:]}")
    # DuckDB may draw a progress bar on stdout during long queries: take the result line
    line = next(x for x in reversed(done.stdout.splitlines()) if x.startswith('{"wall_s"'))
    return json.loads(line)


def measure(label: str, source: Path, reps: int) -> None:
    cache = CACHE_DIR / f"export-cache-{label}"
    run(source, cache, "perfetto")  # fills the columnar cache; not measured
    for fmt in ("perfetto", "chrome"):
        runs = [run(source, cache, fmt) for _ in range(reps)]
        wall = statistics.median(r["wall_s"] for r in runs)
        cpu = statistics.median(r["cpu_s"] for r in runs)
        rss = statistics.median(r["rss_mb"] for r in runs)
        last = runs[-1]
        print(
            f"{label:7} {fmt:9} wall {wall:6.2f} s  cpu {cpu:6.2f} s  peak RSS {rss:6.0f} MB  "
            f"{last['bytes'] / 1e6:6.1f} MB written, {last['slices']:,} slices on "
            f"{last['tracks']} tracks, {last['flows']:,} flows"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--scenario", choices=["single", "eight", "all"], default="all")
    parser.add_argument("--fixtures", type=Path, default=DEFAULT_FIXTURES)
    args = parser.parse_args()
    source = args.fixtures / TRACE
    if not source.is_file():
        raise SystemExit(f"{source} not found; pass --fixtures")
    if args.scenario in ("single", "all"):
        measure("single", single_folder(source), args.reps)
    if args.scenario in ("eight", "all"):
        measure("eight", eight_ranks(source), args.reps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
