"""All built-in rules over a 1-hour 8-GPU job, and one live scan of one minute of new data.

The generated reference job of the SageMaker format notes (60 minutes, 8 GPUs, 32 cores: 633,600
system records, about 282,000 framework events) is opened with a warm columnar cache, then:

* **all rules**: ``run_rules(job)`` with ProfilerReport (its eleven rules), one offline pass,
  in a fresh process per repetition;
* **live scan**: a RuleSession that has already scanned the job up to its last minute scans
  that minute (``RuleSession.advance``: one window of new data through every rule, then the
  verdicts). The store's own share of a live scan (``JobData.refresh()`` with nothing new, and
  ``JobData.connect()``) is printed beside it.
* **live replay**: the job's raw files are published into an empty job folder in the order and
  at the (replayed) times their writers closed them, one minute at a time, and a RuleSession
  over ``open_job`` of that folder scans after each minute, as the live engine of
  ``stepscope run`` does: the store's segments are those of a running job (merged and
  compacted as files settle), the session keeps its DuckDB connection. Each scan's time less
  its ``refresh()`` (the conversion of the new raw files, the store's share) is recorded; the
  figure is the median over the scans of one minute of data after the first ten minutes.

The reference figure is SageMaker Debugger's: 76 s for ProfilerReport's rules over the same job
in 60-second windows on 2 cores. smdebug 1.0.34 (the last release) no longer ships the profiler
rules, so that side cannot run here; the figure comes from the format notes.

    python bench/bench_rules.py [--reps 5] [--minutes 60]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

from harness import generated_job, run_script

#: SageMaker Debugger's ProfilerReport over the 1-hour reference job on 2 cores (format notes).
SAGEMAKER_ALL_RULES_S = 76.0

ALL_RULES = textwrap.dedent(
    """
    import json, sys, tempfile, time
    from stepscope.rules import run_rules
    from stepscope.store import open_job
    job = open_job(sys.argv[1], cache_dir=sys.argv[2])
    job.refresh()
    job.connect()
    with tempfile.TemporaryDirectory() as out:
        t0, c0 = time.perf_counter(), time.process_time()
        results = run_rules(job, output_dir=out)
        t1, c1 = time.perf_counter(), time.process_time()
    print(json.dumps({"rules_s": t1 - t0, "rules_cpu_s": c1 - c0,
                      "issues": sorted(n for n, r in results.items() if r.triggered)}))
    """
)

LIVE_SCAN = textwrap.dedent(
    """
    import json, sys, time
    from stepscope.rules import RuleSession
    from stepscope.store import open_job

    class Replay:
        # the job as it was at ``until_us``: the views limited to what had been written then;
        # the raw files' time bounds are the whole job's, which bound those rows too (a live
        # job's manifest lists fewer files, so its bounds can only be tighter)
        def __init__(self, con, until_us, job):
            self.con, self.until_us, self.path = con, until_us, job.path
            self.time_spans = job.time_spans
            self.db = con.execute("SELECT current_database()").fetchone()[0]
        def connect(self):
            for view, end in (("system", "timestamp_us"), ("events", "start_us + dur_us")):
                self.con.execute(
                    f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT * FROM {self.db}.main.{view} "
                    f"WHERE {end} < {self.until_us}"
                )
            return self.con

    job = open_job(sys.argv[1], cache_dir=sys.argv[2])
    job.refresh()
    t0 = time.perf_counter()
    unchanged = job.refresh()
    t1 = time.perf_counter()
    con = job.connect()
    t2 = time.perf_counter()
    last = con.execute("SELECT max(timestamp_us) FROM system").fetchone()[0]
    replay = Replay(con, last - 60_000_000, job)  # the last minute is not written yet
    session = RuleSession(replay)
    session.advance()
    before = session.watermark_us
    replay.until_us += 60_000_000  # ... and now it is
    t3, c3 = time.perf_counter(), time.process_time()
    session.advance()
    session.results()
    t4, c4 = time.perf_counter(), time.process_time()
    print(json.dumps({"scan_s": t4 - t3, "scan_cpu_s": c4 - c3,
                      "window_s": (session.watermark_us - before) / 1e6,
                      "refresh_s": t1 - t0, "connect_s": t2 - t1}))
    """
)

LIVE_REPLAY = textwrap.dedent(
    """
    import json, os, shutil, sys, time, types
    from pathlib import Path
    import stepscope.store.cache
    from stepscope.rules import RuleSession
    from stepscope.store import open_job

    recorded, live = Path(sys.argv[1]) / "profiler-output", Path(sys.argv[2])
    (live / "profiler-output").mkdir(parents=True)
    shutil.copyfile(recorded.parent / "job.json", live / "job.json")
    shutil.copytree(recorded / "framework" / "ranks", live / "profiler-output/framework/ranks")

    def closed_s(path):
        # a system file is named after its minute and closed at its end; a framework file is
        # named after its last event's end
        if path.name.endswith(".json") and ".algo-" in path.name:
            return int(path.name.split(".")[0]) + 60.0
        return int(path.name.split("_")[0]) / 1e6

    files = sorted(
        (closed_s(p), p) for p in recorded.rglob("*.json") if "_" in p.name or ".algo-" in p.name
    )
    # the store's clock follows the replayed job: its files carry their close times, so they
    # settle and are compacted as in a running job
    now = [files[0][0]]
    stepscope.store.cache.time = types.SimpleNamespace(time=lambda: now[0])
    job = open_job(live)
    refresh, refresh_cost = job.refresh, [0.0, 0.0]
    def timed_refresh():
        t, c = time.perf_counter(), time.process_time()
        changed = refresh()
        refresh_cost[:] = [time.perf_counter() - t, time.process_time() - c]
        return changed
    job.refresh = timed_refresh
    session = RuleSession(job)  # ProfilerReport, as `stepscope run` starts it
    scans, published = [], 0
    for minute in range(1, int(sys.argv[3]) + 1):
        now[0] = files[0][0] + 60 * minute
        while published < len(files) and files[published][0] <= now[0]:
            closed, path = files[published]
            target = live / "profiler-output" / path.relative_to(recorded)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, live / ".partial")
            os.replace(live / ".partial", target)
            os.utime(target, (closed, closed))
            published += 1
        before = session.watermark_us
        t, c = time.perf_counter(), time.process_time()
        session.advance()
        session.results()
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        scans.append({"minute": minute, "window_s": (session.watermark_us - before) / 1e6,
                      "scan_s": wall - refresh_cost[0], "scan_cpu_s": cpu - refresh_cost[1],
                      "refresh_s": refresh_cost[0]})
    print(json.dumps({"scans": scans}))
    """
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--minutes", type=int, default=60)
    args = parser.parse_args()
    job = generated_job(args.minutes)
    with tempfile.TemporaryDirectory() as tmp:
        cache = str(Path(tmp) / "cache")
        run_script(
            sys.executable, ALL_RULES, str(job), cache
        )  # builds the cache: every later run is warm
        rules, scans, replayed = [], [], []
        for rep in range(args.reps):
            rules.append(run_script(sys.executable, ALL_RULES, str(job), cache))
            scans.append(run_script(sys.executable, LIVE_SCAN, str(job), cache))
            live = str(Path(tmp) / f"live-{rep}")
            replay = run_script(sys.executable, LIVE_REPLAY, str(job), live, str(args.minutes - 1))
            minute_scans = [
                scan
                for scan in replay["scans"]
                if scan["minute"] > 10 and 50 <= scan["window_s"] <= 70
            ]
            replayed.extend(minute_scans)
            print(
                f"rep {rep + 1}: all rules {rules[-1]['rules_s']:.2f} s, "
                f"live scan of {scans[-1]['window_s']:.0f} s of data {scans[-1]['scan_s'] * 1e3:.0f} ms "
                f"(+ store refresh {scans[-1]['refresh_s'] * 1e3:.0f} ms, "
                f"connect {scans[-1]['connect_s'] * 1e3:.0f} ms), "
                f"live replay: {len(minute_scans)} one-minute scans, median "
                f"{statistics.median(s['scan_s'] for s in minute_scans) * 1e3:.0f} ms",
                flush=True,
            )
    all_rules_s = statistics.median(r["rules_s"] for r in rules)
    all_rules_cpu_s = statistics.median(r["rules_cpu_s"] for r in rules)
    scan_ms = statistics.median(s["scan_s"] for s in scans) * 1e3
    scan_cpu_ms = statistics.median(s["scan_cpu_s"] for s in scans) * 1e3
    refresh_ms = statistics.median(s["refresh_s"] for s in scans) * 1e3
    connect_ms = statistics.median(s["connect_s"] for s in scans) * 1e3
    replay_ms = statistics.median(s["scan_s"] for s in replayed) * 1e3
    replay_cpu_ms = statistics.median(s["scan_cpu_s"] for s in replayed) * 1e3
    replay_refresh_ms = statistics.median(s["refresh_s"] for s in replayed) * 1e3
    print()
    print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"job: {job.name}; rules that found issues: {', '.join(rules[-1]['issues'])}")
    print(f"{'median':<44}{'stepscope':>10}{'SageMaker':>11}{'ratio':>8}")
    print(
        f"{'all rules, 1-hour job (s)':<44}{all_rules_s:>10.2f}{SAGEMAKER_ALL_RULES_S:>11.1f}"
        f"{SAGEMAKER_ALL_RULES_S / all_rules_s:>7.0f}x"
    )
    print(f"{'  CPU time of all threads (s)':<44}{all_rules_cpu_s:>10.2f}")
    print(f"{'live scan of one minute of new data (ms)':<44}{scan_ms:>10.0f}{'–':>11}{'':>8}")
    print(f"{'  CPU time of all threads (ms)':<44}{scan_cpu_ms:>10.0f}")
    print(f"{'  store: refresh with nothing new (ms)':<44}{refresh_ms:>10.0f}")
    print(f"{'  store: first connect of the process (ms)':<44}{connect_ms:>10.0f}")
    print(f"{'live replay, scan of one minute (ms)':<44}{replay_ms:>10.0f}")
    print(f"{'  CPU time of all threads (ms)':<44}{replay_cpu_ms:>10.0f}")
    print(f"{'  store: refresh of the new files (ms)':<44}{replay_refresh_ms:>10.0f}")


if __name__ == "__main__":
    main()
