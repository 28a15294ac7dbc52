"""Timeline window latency and size on the 8-rank, 1.73 M-event set, and redraw time in a browser.

The timeline asks the server for one window per zoom or pan. This benchmark builds the job's
timeline index once, then replays what a user does — the whole job, then zooming in by halves
at random places down to a few microseconds, panning at each level — and reports, per request,
the server time and the number of items returned (slices + bins + counter points). Targets:
every window ≤ 100 ms and ≤ a few thousand items, whatever the zoom.

With ``--browser`` it also opens the timeline page in headless Chromium on the same job,
presses w/a/s/d a few dozen times, and reports the canvas redraw time the page measures.

    python bench/bench_timeline.py [--windows 200] [--browser]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_kineto import eight_ranks

SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "kineto"


def replay(index, windows: int, seed: int = 0) -> list[tuple[float, float, int]]:
    """(span µs, wall ms, CPU ms, items) for each window request of a zoom-and-pan session."""
    rng = random.Random(seed)
    lo, hi = index.bounds
    tracks = index.tracks
    results = []
    span = hi - lo
    centre = (lo + hi) / 2
    while len(results) < windows:
        start = max(lo, centre - span / 2)
        began, cpu_began = time.perf_counter(), time.process_time()
        answer = index.window(tracks, start, start + span, bins=800, max_items=6000)
        elapsed_ms = (time.perf_counter() - began) * 1e3
        cpu_ms = (time.process_time() - cpu_began) * 1e3
        items = sum(
            len(t.get("slices", ())) + len(t.get("bins", ())) + len(t.get("points", ()))
            for t in answer["tracks"].values()
        )
        results.append((span, elapsed_ms, cpu_ms, items))
        if rng.random() < 0.6 and span > 20:
            span /= 2
            centre = rng.uniform(lo + span / 2, hi - span / 2)
        elif rng.random() < 0.5:
            centre += span * rng.choice((-0.2, 0.2))
        else:
            span = min(hi - lo, span * 4)
    return results


def browser_redraw(job: Path, cache: Path) -> list[float]:
    import threading

    import uvicorn
    from playwright.sync_api import sync_playwright

    from stepscope.ui import create_app

    app = create_app([job], settings_path=cache / "settings.json")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    frames: list[float] = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(base + "/")
            job_id = page.evaluate("fetch('/api/jobs').then(r => r.json()).then(j => j.jobs[0].id)")
            page.evaluate(f"fetch('/api/jobs/{job_id}/load', {{method: 'POST'}})")
            page.wait_for_function(
                "fetch('/api/loaded').then(r => r.json()).then(l => l.loaded[0].state === 'loaded')",
                timeout=600_000,
                polling=500,
            )
            page.evaluate(f"localStorage.setItem('stepscope.selectedJob', '{job_id}')")
            page.goto(base + "/timeline")
            page.wait_for_selector("#tl-canvas[data-loaded='1']", timeout=600_000)
            page.locator("#tl-canvas").focus()
            for key in "wwwwdddaawwwwssdwwwwaaaaddsssswwwwwwdddd":
                page.keyboard.press(key)
                page.wait_for_timeout(150)
                frames.append(float(page.locator("#tl-canvas").get_attribute("data-frame-ms")))
            browser.close()
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    return frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=200)
    parser.add_argument("--browser", action="store_true", help="also measure redraws in Chromium")
    args = parser.parse_args()

    from stepscope.analysis.timeline import TimelineIndex
    from stepscope.store import open_job

    job = eight_ranks(SHARED / "v100_rank1of2_memory.json.gz")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["STEPSCOPE_CACHE_DIR"] = str(Path(tmp) / "cache")
        began = time.perf_counter()
        data = open_job(job)
        data.refresh()
        print(f"columnar cache built in {time.perf_counter() - began:.1f} s")
        began = time.perf_counter()
        index = TimelineIndex(data.connect())
        print(
            f"timeline index of {len(index.tracks)} tracks built in {time.perf_counter() - began:.1f} s"
        )
        results = replay(index, args.windows)
        times = [ms for _, ms, _, _ in results]
        cpu = [ms for _, _, ms, _ in results]
        items = [n for _, _, _, n in results]
        print(
            f"{len(results)} windows from {results[0][0] / 1e6:.2f} s down to "
            f"{min(r[0] for r in results):.0f} µs: server time median {statistics.median(times):.1f} ms, "
            f"p95 {sorted(times)[int(0.95 * len(times))]:.1f} ms, max {max(times):.1f} ms (target ≤ 100 ms); "
            f"CPU time median {statistics.median(cpu):.1f} ms, max {max(cpu):.1f} ms; "
            f"items median {statistics.median(items):.0f}, max {max(items)} (target ≤ a few thousand)"
        )
        if args.browser:
            frames = browser_redraw(job, Path(tmp))
            print(
                f"browser redraw over {len(frames)} key presses: median {statistics.median(frames):.1f} ms, "
                f"max {max(frames):.1f} ms (60 fps needs ≤ 16 ms)"
            )


if __name__ == "__main__":
    main()
