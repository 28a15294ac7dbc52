"""PandasFrame system and framework tables of a 1-hour job: stepscope against smdebug 1.0.34.

A generated 1-hour job (the reference job of the SageMaker format notes: 633,600 system records,
about 282,000 framework events) is read by both ``PandasFrame`` classes, each measurement in a
fresh process, alternating, ``--reps`` times. stepscope is measured twice: *cold* (an empty
cache, so the raw JSON files are converted to Parquet first) and *warm* (the cache exists, as for
every query after the first). smdebug has no cache: each of its calls parses the JSON files.
Prints the median wall and CPU seconds (user + system, all threads; imports included in the
open) of each side and the ratios smdebug / stepscope.

    python bench/bench_pandas_frame.py [--reps 3] [--minutes 60]

smdebug runs in its own virtualenv under ``.bench-cache/`` (see ``peers.py``).
"""

from __future__ import annotations

import textwrap

from harness import compare_from_command_line

OURS = textwrap.dedent(
    """
    import json, sys, time
    t0, c0 = time.perf_counter(), time.process_time()
    from stepscope.analysis import PandasFrame
    from stepscope.store import open_job
    pf = PandasFrame(open_job(sys.argv[1], cache_dir=sys.argv[2]))
    t1, c1 = time.perf_counter(), time.process_time()
    system = pf.get_all_system_metrics()
    t2, c2 = time.perf_counter(), time.process_time()
    framework = pf.get_all_framework_metrics()
    t3, c3 = time.perf_counter(), time.process_time()
    print(json.dumps({"open_s": t1 - t0, "system_s": t2 - t1, "framework_s": t3 - t2,
                      "open_cpu_s": c1 - c0, "system_cpu_s": c2 - c1, "framework_cpu_s": c3 - c2,
                      "system_rows": len(system), "framework_rows": len(framework)}))
    """
)

SMDEBUG_SCRIPT = textwrap.dedent(
    """
    import json, logging, sys, time
    logging.disable(logging.WARNING)
    t0, c0 = time.perf_counter(), time.process_time()
    from smdebug.profiler.analysis.utils.profiler_data_to_pandas import PandasFrame
    pf = PandasFrame(sys.argv[1])
    t1, c1 = time.perf_counter(), time.process_time()
    system = pf.get_all_system_metrics()
    t2, c2 = time.perf_counter(), time.process_time()
    framework = pf.get_all_framework_metrics()
    t3, c3 = time.perf_counter(), time.process_time()
    print(json.dumps({"open_s": t1 - t0, "system_s": t2 - t1, "framework_s": t3 - t2,
                      "open_cpu_s": c1 - c0, "system_cpu_s": c2 - c1, "framework_cpu_s": c3 - c2,
                      "system_rows": len(system), "framework_rows": len(framework)}))
    """
)


def main() -> None:
    job, _, runs = compare_from_command_line(
        __doc__.splitlines()[0],
        OURS,
        SMDEBUG_SCRIPT,
        lambda r: f"system {r['system_s']:.2f} s framework {r['framework_s']:.2f} s",
    )
    median = runs.median

    print()
    print(f"job: {job.name}; rows (stepscope / smdebug):")
    for key in ("system_rows", "framework_rows"):
        print(f"  {key}: {int(median('warm', key)):,} / {int(median('smdebug', key)):,}")
    print(f"{'median seconds (wall / cpu)':<34}{'stepscope':>16}{'smdebug':>16}{'ratio':>16}")
    stages = {
        "system table (warm cache)": ("warm", ("system",)),
        "framework table (warm cache)": ("warm", ("framework",)),
        "open + both tables (warm cache)": ("warm", ("open", "system", "framework")),
        "open + both tables (cold cache)": ("cold", ("open", "system", "framework")),
    }
    for label, (side, keys) in stages.items():
        ours = [sum(median(side, f"{k}{unit}") for k in keys) for unit in ("_s", "_cpu_s")]
        theirs = [sum(median("smdebug", f"{k}{unit}") for k in keys) for unit in ("_s", "_cpu_s")]
        print(
            f"{label:<34}{ours[0]:>8.2f}{ours[1]:>8.2f}{theirs[0]:>8.2f}{theirs[1]:>8.2f}"
            f"{theirs[0] / ours[0]:>7.1f}x{theirs[1] / ours[1]:>7.1f}x"
        )


if __name__ == "__main__":
    main()
