"""Reading a whole 1-hour job into DataFrames: stepscope's store against smdebug 1.0.34's readers.

The input is the reference 1-hour job written by ``stepscope.testing.generate_job`` (one node,
32 CPUs, 8 GPUs: 633,600 system records in 60 files, 281,694 framework events in 120 files),
made once under ``.bench-cache/``. Each measurement runs in a fresh process and reports its wall
time and CPU time (user + system, all threads) twice, for the whole process (interpreter start
and imports included) and for the read alone (from just after the imports: what a session that
has imported the libraries waits; stepscope's store, pandas and pyarrow.parquet on our side, where
a cold read imports DuckDB inside the read; pandas and the two readers on smdebug's), and its
peak RSS:

* **stepscope cold**: empty cache; ``open_job`` → ``refresh`` (raw JSON to Parquet) →
  ``JobData.table`` of ``system`` and ``events`` (every row of the two views, read from the
  Parquet segments) into pandas DataFrames with Arrow-backed columns
  (``to_pandas(types_mapper=pd.ArrowDtype)``: no copy, no Python string objects);
* **stepscope warm**: the same with the cache already built (every read after the first);
* **smdebug**: ``LocalSystemMetricsReader.get_events`` and
  ``LocalAlgorithmMetricsReader.get_events`` over the whole job, each list of event objects
  turned into a pandas DataFrame of the same columns, in smdebug's own virtualenv.

The three sides alternate ``--reps`` times; the medians and the ratios are printed.

    python bench/bench_read.py [--reps 3] [--minutes 60]
"""

from __future__ import annotations

import textwrap

from harness import compare_from_command_line

OURS = textwrap.dedent(
    """
    import json, resource, sys, time
    t0 = time.perf_counter()
    from stepscope.store import open_job
    import pandas as pd
    import pyarrow.parquet  # a cold read also imports DuckDB, inside its read
    t1, c1 = time.perf_counter(), time.process_time()
    job = open_job(sys.argv[1], cache_dir=sys.argv[2])
    job.refresh()
    system = job.table("system").to_pandas(types_mapper=pd.ArrowDtype)
    events = job.table("events").to_pandas(types_mapper=pd.ArrowDtype)
    t2, c2 = time.perf_counter(), time.process_time()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"seconds": t2 - t0, "cpu_s": usage.ru_utime + usage.ru_stime,
                      "read_s": t2 - t1, "read_cpu_s": c2 - c1,
                      "system_rows": len(system), "event_rows": len(events),
                      "peak_rss_mb": usage.ru_maxrss / 1024}))
    """
)

SMDEBUG_SCRIPT = textwrap.dedent(
    """
    import json, logging, resource, sys, time
    logging.disable(logging.CRITICAL)
    t0 = time.perf_counter()
    import pandas as pd
    from smdebug.profiler.algorithm_metrics_reader import LocalAlgorithmMetricsReader
    from smdebug.profiler.system_metrics_reader import LocalSystemMetricsReader
    t1, c1 = time.perf_counter(), time.process_time()
    start_us, end_us = 0, 4_000_000_000_000_000
    records = LocalSystemMetricsReader(sys.argv[1]).get_events(start_us, end_us)
    system = pd.DataFrame(
        [(e.timestamp, e.node_id, e.type, e.name, e.dimension, e.value) for e in records],
        columns=["timestamp", "node", "type", "name", "dimension", "value"],
    )
    del records
    spans = LocalAlgorithmMetricsReader(sys.argv[1]).get_events(start_us, end_us)
    events = pd.DataFrame(
        [(e.node_id, e.event_phase, e.event_name, e.start_time, e.duration, e.pid, e.tid,
          json.dumps(e.event_args)) for e in spans],
        columns=["node", "category", "name", "start_us", "dur_us", "pid", "tid", "args"],
    )
    t2, c2 = time.perf_counter(), time.process_time()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"seconds": t2 - t0, "cpu_s": usage.ru_utime + usage.ru_stime,
                      "read_s": t2 - t1, "read_cpu_s": c2 - c1,
                      "system_rows": len(system), "event_rows": len(events),
                      "peak_rss_mb": usage.ru_maxrss / 1024}))
    """
)


def main() -> None:
    job, reps, runs = compare_from_command_line(
        __doc__.splitlines()[0],
        OURS,
        SMDEBUG_SCRIPT,
        lambda r: f"{r['seconds']:.2f} s (cpu {r['cpu_s']:.2f} s) {r['peak_rss_mb']:.0f} MB",
    )
    median = runs.median

    print()
    print(f"job: {job.name}; rows system / events:")
    for side in runs:
        print(
            f"  {side:<8}{int(median(side, 'system_rows')):>10,}"
            f"{int(median(side, 'event_rows')):>10,}"
        )
    theirs_mb = median("smdebug", "peak_rss_mb")
    for title, keys in (
        ("whole process (imports included)", ("seconds", "cpu_s")),
        ("the read alone (imports excluded)", ("read_s", "read_cpu_s")),
    ):
        theirs_s, theirs_cpu = (median("smdebug", key) for key in keys)
        print(f"\n{title}")
        print(
            f"{'median of ' + str(reps):<12}{'wall s':>9}{'faster':>8}"
            f"{'cpu s':>9}{'faster':>8}{'peak RSS MB':>13}"
        )
        for side in ("cold", "warm", "smdebug"):
            seconds, cpu = (median(side, key) for key in keys)
            rss = median(side, "peak_rss_mb")
            print(
                f"{side:<12}{seconds:>9.2f}{theirs_s / seconds:>7.1f}x"
                f"{cpu:>9.2f}{theirs_cpu / cpu:>7.1f}x{rss:>13.0f}"
            )
    print(f"smdebug peak RSS / stepscope warm: {theirs_mb / median('warm', 'peak_rss_mb'):.1f}x")


if __name__ == "__main__":
    main()
