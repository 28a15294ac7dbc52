"""Benchmark: the system monitor's CPU share of one core at 500 ms and 100 ms sampling.

Starts the real monitor process (``start_monitor``, NVML backend as in production), lets it start
up, then reads the monitor process's own CPU time (user + system) over several windows and prints,
per interval: the median CPU share of one core, the startup CPU cost, records written per second
and the resident memory. SageMaker's system agent ran on the host outside the job and has no
public counterpart to run beside it, so there is no peer column; the figure to beat is "well
under 1 % of one core at the default 500 ms".

Usage::

    python bench/bench_monitor.py [--seconds 20] [--windows 4] [--intervals 500,100]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import psutil

from stepscope.collect import start_monitor

_STARTUP_S = 2.0


def cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def count_records(output_dir: Path) -> int:
    return sum(path.read_bytes().count(b"\n") for path in (output_dir / "system").rglob("*.json"))


def measure(interval_ms: int, seconds: float, windows: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="stepscope-bench-monitor-") as tmp:
        output_dir = Path(tmp)
        handle = start_monitor(output_dir, interval_ms=interval_ms)
        try:
            process = psutil.Process(handle.pid)
            time.sleep(_STARTUP_S)
            startup_cpu_s = cpu_s(process)
            records_before = count_records(output_dir)
            shares = []
            started = time.monotonic()
            for _ in range(windows):
                cpu_before, wall_before = cpu_s(process), time.monotonic()
                time.sleep(seconds / windows)
                shares.append(
                    100.0 * (cpu_s(process) - cpu_before) / (time.monotonic() - wall_before)
                )
            elapsed_s = time.monotonic() - started
            records_per_s = (count_records(output_dir) - records_before) / elapsed_s
            rss_mb = process.memory_info().rss / 2**20
        finally:
            handle.stop()
    return {
        "interval_ms": interval_ms,
        "median_pct": statistics.median(shares),
        "min_pct": min(shares),
        "max_pct": max(shares),
        "startup_cpu_s": startup_cpu_s,
        "records_per_s": records_per_s,
        "rss_mb": rss_mb,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="CPU share of the system monitor process.")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured time per interval")
    parser.add_argument("--windows", type=int, default=4, help="windows per interval (median)")
    parser.add_argument("--intervals", default="500,100", help="sampling intervals in ms")
    args = parser.parse_args()
    print(f"{psutil.cpu_count()} CPUs; {args.seconds:.0f} s per interval in {args.windows} windows")
    print("interval_ms  cpu_%_of_one_core(median [min-max])  startup_cpu_s  records/s  rss_MB")
    for interval_ms in (int(text) for text in args.intervals.split(",")):
        r = measure(interval_ms, args.seconds, args.windows)
        print(
            f"{interval_ms:>11}  {r['median_pct']:>6.2f} [{r['min_pct']:.2f}-{r['max_pct']:.2f}]"
            f"{'':>18}{r['startup_cpu_s']:>8.2f}  {r['records_per_s']:>9.1f}  {r['rss_mb']:>6.1f}"
        )


if __name__ == "__main__":
    main()
