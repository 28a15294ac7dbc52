"""Profiler UI dashboard: time to compute every panel of a loaded job whose cache exists.

The scenario is the largest Kineto benchmark set: eight relabelled copies of
``v100_rank1of2_memory.json.gz`` as ranks 0-7 (1.73 M events, made once into the bench cache by
``bench_kineto.eight_ranks``). The job's columnar cache is built before timing starts (a warm-up
run), so the figures are what a user sees when opening a job the UI has read before.

Each run builds a fresh app (``create_app``), so no panel answer is cached between runs, loads
the job through the API, waits until it is loaded, then requests every panel the dashboard lists,
in its order, and the annotation names, as the page does when it opens. Wall time (``perf_counter``) and CPU time of this
process (``process_time``, all threads) are taken per panel. One warm-up run, then the median of
``--reps`` runs per panel and for the whole dashboard.

There is no peer to run side by side: SageMaker Profiler's dashboard is a hosted service. The
yardstick is the acceptance target, the whole dashboard in at most 2 s; the ratio to it is
printed.

    python bench/bench_dashboard.py [--reps 3] [--fixtures DIR]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from pathlib import Path

from bench_kineto import DEFAULT_FIXTURES, TRACE, eight_ranks

TARGET_S = 2.0
_LOAD_TIMEOUT_S = 600.0


def run_once(root: Path) -> dict[str, tuple[float, float]]:
    """Load the job under ``root`` in a fresh app; (wall s, CPU s) per panel and ``total``."""
    from fastapi.testclient import TestClient

    from stepscope.ui.app import create_app

    client = TestClient(create_app([str(root)]), base_url="http://127.0.0.1")
    jobs = client.get("/api/jobs").json()["jobs"]
    if len(jobs) != 1:
        raise SystemExit(f"expected one job under {root}, got {[j['name'] for j in jobs]}")
    job_id = jobs[0]["id"]
    client.post(f"/api/jobs/{job_id}/load").raise_for_status()
    deadline = time.monotonic() + _LOAD_TIMEOUT_S
    while True:
        states = {p["id"]: p for p in client.get("/api/loaded").json()["loaded"]}
        state = states.get(job_id, {}).get("state")
        if state == "loaded":
            break
        if state == "error" or time.monotonic() > deadline:
            raise SystemExit(f"job did not load: {states.get(job_id)}")
        time.sleep(0.05)
    listed = client.get("/api/panels").json()["panels"]
    # What the page requests on opening: every panel but the custom histogram (drawn on a
    # click), and the annotation names for that histogram's drop-down.
    urls = {p["name"]: f"dashboard/{p['name']}" for p in listed if not p["uses_annotation"]}
    urls["annotations"] = "annotations"
    times: dict[str, tuple[float, float]] = {}
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for name, url in urls.items():
        w, c = time.perf_counter(), time.process_time()
        client.get(f"/api/jobs/{job_id}/{url}").raise_for_status()
        times[name] = (time.perf_counter() - w, time.process_time() - c)
    times["total"] = (time.perf_counter() - wall0, time.process_time() - cpu0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--fixtures", type=Path, default=DEFAULT_FIXTURES)
    options = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    source = options.fixtures / TRACE
    if not source.exists():
        raise SystemExit(f"missing fixture {source}")
    root = eight_ranks(source)
    run_once(root)  # warm-up: builds the job's columnar cache if needed, warms the file cache
    runs = [run_once(root) for _ in range(options.reps)]
    print(f"dashboard of {root.name}, median of {options.reps} runs after one warm-up")
    print(f"{'panel':24} {'wall s':>8} {'CPU s':>8}")
    for panel in runs[0]:
        wall = statistics.median(r[panel][0] for r in runs)
        cpu = statistics.median(r[panel][1] for r in runs)
        if panel == "total":
            print("-" * 42)
        print(f"{panel:24} {wall:8.3f} {cpu:8.3f}")
    total_wall = statistics.median(r["total"][0] for r in runs)
    print(f"total wall / {TARGET_S:.0f} s target: {total_wall / TARGET_S:.2f}x")


if __name__ == "__main__":
    main()
