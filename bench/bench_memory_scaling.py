"""Peak memory as the job grows: a 10x longer generated job must not need 10x the memory.

Two generated jobs of the reference shape (one node, 32 CPUs, 8 GPUs; ``generate_job``), a 1x and a
10x one, are processed step by step, each step in a fresh process. The default sizes are the
1-hour reference job and a 10-hour one (6.3 M system records, 2.8 M events, 1.1 GB of JSON): at
6 minutes the imported libraries dominate every peak and a ratio says little, and the 10-hour job
still runs in about two minutes on two cores.

* **cache**: ``open_job(job).refresh()`` from an empty cache (raw JSON to Parquet);
* **analyses**: from the warm cache, ``job_statistics``, ``step_statistics``,
  ``utilization_statistics`` and the data-loader analysis (``PT_dataloader_analysis``: iterator
  initialization, workers, GetNext, batch time);
* **rules**: ``run_rules(job, output_dir=...)``, every built-in rule offline;
* **report**: ``write_report(job, output=...)`` (its rule results are computed beside it first).

Each process reports its peak resident set (``VmHWM`` of ``/proc/self/status``; not ``ru_maxrss``,
which on Linux keeps the parent's resident set across fork and exec), the peak once every module
is imported (the part that does not depend on the job), and its CPU time (all threads). The table
prints both sizes and the ratio 10x/1x of the peak and of the growth over the imports; the script
exits 1 if a peak ratio reaches the size ratio.

    python bench/bench_memory_scaling.py [--minutes 60,600]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from peers import CACHE_DIR

#: Imported by every step before it starts, so the baseline is the same for all of them.
PRELUDE = textwrap.dedent(
    """
    import json, sys, time
    from stepscope.store import open_job
    from stepscope.analysis import (
        PT_dataloader_analysis, PandasFrame, job_statistics, step_statistics,
        utilization_statistics,
    )
    from stepscope.rules import run_rules
    from stepscope.report import write_report
    import duckdb, pandas, pyarrow, plotly.offline

    def _hwm_bytes():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return 0

    imported_bytes = _hwm_bytes()
    job_dir, cache_dir, out_dir = sys.argv[1:4]
    t0, c0 = time.perf_counter(), time.process_time()
    """
)

EPILOGUE = textwrap.dedent(
    """
    t1, c1 = time.perf_counter(), time.process_time()
    peak = _hwm_bytes()
    print(json.dumps({"peak_bytes": peak, "imported_bytes": imported_bytes,
                      "cpu_s": c1 - c0, "wall_s": t1 - t0, **extra}))
    """
)

STEPS: dict[str, str] = {
    "cache": """
        job = open_job(job_dir, cache_dir=cache_dir)
        job.refresh()
        extra = {}
    """,
    "analyses": """
        job = open_job(job_dir, cache_dir=cache_dir)
        job.refresh()
        job_statistics(job)
        step_statistics(job)
        utilization_statistics(job)
        loader = PT_dataloader_analysis(PandasFrame(job))
        loader.analyze_dataloaderIter_initialization()
        loader.analyze_dataloaderWorkers()
        loader.analyze_dataloader_getnext()
        loader.analyze_batchtime()
        extra = {}
    """,
    "rules": """
        job = open_job(job_dir, cache_dir=cache_dir)
        job.refresh()
        results = run_rules(job, output_dir=out_dir)
        extra = {"issues": sorted(n for n, r in results.items() if r.triggered)}
    """,
    "report": """
        job = open_job(job_dir, cache_dir=cache_dir)
        job.refresh()
        write_report(job, output=out_dir + "/profiler-report.html")
        extra = {}
    """,
}

GENERATE = textwrap.dedent(
    """
    import sys
    from stepscope.testing import generate_job
    generate_job(sys.argv[1], minutes=int(sys.argv[2]))
    """
)

COUNT_ROWS = textwrap.dedent(
    """
    import json, sys
    from stepscope.store import open_job
    con = open_job(sys.argv[1], cache_dir=sys.argv[2]).connect()
    print(json.dumps({kind: con.execute(f"SELECT count(*) FROM {kind}").fetchone()[0]
                      for kind in ("system", "events")}))
    """
)


def _run(script: str, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, check=False
    )
    if done.returncode:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"a measured step failed (exit {done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _job(minutes: int) -> Path:
    """The generated job, made once (in its own process) and kept in the bench cache."""
    folder = CACHE_DIR / f"memory-job-{minutes}min"
    if not (folder / "profiler-output" / "training_job_end.ts").exists():
        shutil.rmtree(folder, ignore_errors=True)
        print(f"generating a {minutes}-minute job in {folder} ...", flush=True)
        subprocess.run([sys.executable, "-c", GENERATE, str(folder), str(minutes)], check=True)
    return folder


def _measure(minutes: int) -> tuple[dict[str, int], dict[str, dict]]:
    """Every step over the job of ``minutes``, in order, each in a fresh process."""
    job = _job(minutes)
    measured: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cache = str(Path(tmp) / "cache")
        for step, body in STEPS.items():
            out = Path(tmp) / f"out-{step}"
            out.mkdir()
            script = PRELUDE + textwrap.dedent(body) + EPILOGUE
            measured[step] = _run(script, str(job), cache, str(out))
            m = measured[step]
            print(
                f"{minutes:>4} min  {step:<9} peak {m['peak_bytes'] / 2**20:7.0f} MiB "
                f"(imports {m['imported_bytes'] / 2**20:4.0f} MiB), cpu {m['cpu_s']:6.1f} s, "
                f"wall {m['wall_s']:6.1f} s",
                flush=True,
            )
        rows = _run(COUNT_ROWS, str(job), cache)
    return rows, measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--minutes", default="60,600", help="the 1x and 10x job lengths, comma-separated"
    )
    args = parser.parse_args()
    small_min, large_min = (int(m) for m in args.minutes.split(","))
    small_rows, small = _measure(small_min)
    large_rows, large = _measure(large_min)
    mib = 2**20
    print()
    print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for minutes, rows in ((small_min, small_rows), (large_min, large_rows)):
        print(f"{minutes}-minute job: {rows['system']:,} system records, {rows['events']:,} events")
    size = large_min / small_min
    print(
        f"{'step':<10}{'peak 1x':>9}{'peak ' + f'{size:g}x':>10}{'ratio':>7}"
        f"{'growth 1x':>11}{'growth ' + f'{size:g}x':>12}{'ratio':>7}"
        f"{'cpu 1x':>9}{'cpu ' + f'{size:g}x':>9}{'ratio':>7}"
    )
    worst = 0.0
    for step in STEPS:
        s, g = small[step], large[step]
        peak_ratio = g["peak_bytes"] / s["peak_bytes"]
        grow_s = s["peak_bytes"] - s["imported_bytes"]
        grow_g = g["peak_bytes"] - g["imported_bytes"]
        worst = max(worst, peak_ratio)
        print(
            f"{step:<10}{s['peak_bytes'] / mib:>6.0f}MiB{g['peak_bytes'] / mib:>7.0f}MiB"
            f"{peak_ratio:>6.2f}x{grow_s / mib:>8.0f}MiB{grow_g / mib:>9.0f}MiB"
            f"{grow_g / max(grow_s, 1):>6.2f}x"
            f"{s['cpu_s']:>8.1f}s{g['cpu_s']:>8.1f}s{g['cpu_s'] / max(s['cpu_s'], 1e-9):>6.2f}x"
        )
    print("(peak = resident high-water mark; growth = peak minus the resident set after imports)")
    if worst >= size:
        print(f"FAIL: a step's peak memory grew {worst:.1f}x for a {size:g}x job")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
