"""PandasFrame system and framework tables of a 1-hour job: stepscope against smdebug 1.0.34.

A generated 1-hour job (the reference job of the SageMaker format notes: 633,600 system records,
about 282,000 framework events) is read by both ``PandasFrame`` classes, each measurement in a
fresh process, alternating, ``--reps`` times. stepscope is measured twice: *cold* (an empty
cache, so the raw JSON files are converted to Parquet first) and *warm* (the cache exists, as for
every query after the first). smdebug has no cache: each of its calls parses the JSON files.
Prints the median seconds of each side and the ratio smdebug / stepscope.

    python bench/bench_pandas_frame.py [--reps 3] [--minutes 60]

smdebug runs in its own virtualenv under ``.bench-cache/`` (see ``peers.py``).
"""

from __future__ import annotations

import argparse
import statistics
import textwrap

from harness import alternate_with_smdebug, generated_job

OURS = textwrap.dedent(
    """
    import json, sys, time
    t0 = time.perf_counter()
    from stepscope.analysis import PandasFrame
    from stepscope.store import open_job
    pf = PandasFrame(open_job(sys.argv[1], cache_dir=sys.argv[2]))
    t1 = time.perf_counter()
    system = pf.get_all_system_metrics()
    t2 = time.perf_counter()
    framework = pf.get_all_framework_metrics()
    t3 = time.perf_counter()
    print(json.dumps({"open_s": t1 - t0, "system_s": t2 - t1, "framework_s": t3 - t2,
                      "system_rows": len(system), "framework_rows": len(framework)}))
    """
)

SMDEBUG_SCRIPT = textwrap.dedent(
    """
    import json, logging, sys, time
    logging.disable(logging.WARNING)
    t0 = time.perf_counter()
    from smdebug.profiler.analysis.utils.profiler_data_to_pandas import PandasFrame
    pf = PandasFrame(sys.argv[1])
    t1 = time.perf_counter()
    system = pf.get_all_system_metrics()
    t2 = time.perf_counter()
    framework = pf.get_all_framework_metrics()
    t3 = time.perf_counter()
    print(json.dumps({"open_s": t1 - t0, "system_s": t2 - t1, "framework_s": t3 - t2,
                      "system_rows": len(system), "framework_rows": len(framework)}))
    """
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--minutes", type=int, default=60)
    args = parser.parse_args()
    job = generated_job(args.minutes)
    runs = alternate_with_smdebug(
        job,
        OURS,
        SMDEBUG_SCRIPT,
        args.reps,
        lambda r: f"system {r['system_s']:.2f} s framework {r['framework_s']:.2f} s",
    )

    def median(side: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[side])

    print()
    print(f"job: {job.name}; rows (stepscope / smdebug):")
    for key in ("system_rows", "framework_rows"):
        print(f"  {key}: {int(median('warm', key)):,} / {int(median('smdebug', key)):,}")
    print(f"{'median seconds':<34}{'stepscope':>10}{'smdebug':>10}{'ratio':>8}")
    rows = [
        ("system table (warm cache)", median("warm", "system_s"), median("smdebug", "system_s")),
        (
            "framework table (warm cache)",
            median("warm", "framework_s"),
            median("smdebug", "framework_s"),
        ),
        (
            "open + both tables (warm cache)",
            sum(median("warm", k) for k in ("open_s", "system_s", "framework_s")),
            sum(median("smdebug", k) for k in ("open_s", "system_s", "framework_s")),
        ),
        (
            "open + both tables (cold cache)",
            sum(median("cold", k) for k in ("open_s", "system_s", "framework_s")),
            sum(median("smdebug", k) for k in ("open_s", "system_s", "framework_s")),
        ),
    ]
    for label, ours, theirs in rows:
        print(f"{label:<34}{ours:>10.2f}{theirs:>10.2f}{theirs / ours:>7.1f}x")


if __name__ == "__main__":
    main()
