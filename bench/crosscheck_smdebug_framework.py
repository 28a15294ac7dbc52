"""Cross-check: SageMaker Debugger's own readers read the framework files stepscope writes.

Runs the demo training script under ``stepscope run``'s machinery (system monitor included, so
smdebug's ``PandasFrame`` finds its start time), counts the events of each phase in our
``framework/pevents`` files, then asks smdebug 1.0.34 (in its own virtualenv, see ``peers.py``)
for the same through ``LocalAlgorithmMetricsReader`` and ``PT_dataloader_analysis``, and prints
both side by side. Exit status 1 if any count differs.

    python bench/crosscheck_smdebug_framework.py [--steps 24] [--workers 2]
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from peers import SMDEBUG, PeerSetupError, peer_python

SMDEBUG_SIDE = r"""
import collections, json, sys
from smdebug.profiler.algorithm_metrics_reader import LocalAlgorithmMetricsReader
from smdebug.profiler.analysis.utils.profiler_data_to_pandas import PandasFrame
from smdebug.profiler.analysis.utils.pytorch_dataloader_analysis import PT_dataloader_analysis

path = sys.argv[1]
reader = LocalAlgorithmMetricsReader(path)
events = reader.get_events(0, 10**17)
phases = collections.Counter(e.event_phase for e in events)
frame = PandasFrame(path)
analysis = PT_dataloader_analysis(frame)
framework = frame.get_all_framework_metrics()
result = {
    "phases": dict(phases),
    "pandas_train_steps": int((framework["process"] == "Step:ModeKeys.TRAIN").sum()),
    "pandas_eval_steps": int((framework["process"] == "Step:ModeKeys.EVAL").sum()),
    "getnext": len(analysis.dataIter_metric.index),
    "iter_init": len(analysis.initialize_metric.index),
    "workers": len(analysis.dataWorker_metric.index),
    "worker_ids": sorted(set(int(w) for w in analysis.dataWorker_metric["worker_id"])),
}
print("RESULT " + json.dumps(result))
"""


def _run_job(job_dir: Path, steps: int, workers: int) -> Path:
    from stepscope.config import DataloaderProfilingConfig, FrameworkProfile, ProfilerConfig
    from stepscope.launcher import launch

    config = ProfilerConfig(
        system_monitor_interval_millis=200,
        framework_profile_params=FrameworkProfile(
            dataloader_profiling_config=DataloaderProfilingConfig(start_step=0, num_steps=10_000)
        ),
    )
    command = [sys.executable, "-m", "stepscope.examples.demo_train", "--epochs", "1"]
    command += ["--steps-per-epoch", str(steps), "--eval-steps", "4", "--num-workers", str(workers)]
    command += ["--slow-step", "3", "--slow-step-s", "0.2", "--load-delay-ms", "1"]
    job = launch(command, profiler_config=config, job_dir=job_dir, report=False)
    if job.exit_code != 0:
        raise SystemExit(f"the training job failed with exit code {job.exit_code}")
    return job.profiler_output


def _our_counts(profiler_output: Path) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for path in (profiler_output / "framework" / "pevents").rglob("*.json"):
        records = json.loads(path.read_text())
        phases = {
            r["pid"]: r["args"]["name"]
            for r in records
            if r.get("ph") == "M" and r["name"] == "process_name" and "name" in r["args"]
        }
        counts.update(phases[r["pid"]] for r in records if r.get("ph") == "X")
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    try:
        python = peer_python("smdebug", SMDEBUG)
    except PeerSetupError as exc:
        print(f"smdebug is not available, nothing to compare: {exc}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        output = _run_job(Path(tmp) / "job", args.steps, args.workers)
        ours = _our_counts(output)
        done = subprocess.run(
            [str(python), "-c", SMDEBUG_SIDE, str(output)], capture_output=True, text=True
        )
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        print(done.stdout[-2000:], done.stderr[-4000:])
        return 1
    theirs = json.loads(line.removeprefix("RESULT "))
    rows = [(phase, ours[phase], theirs["phases"].get(phase, 0)) for phase in sorted(ours)]
    rows += [
        (
            "PandasFrame Step:ModeKeys.TRAIN rows",
            ours["Step:ModeKeys.TRAIN"],
            theirs["pandas_train_steps"],
        ),
        (
            "PandasFrame Step:ModeKeys.EVAL rows",
            ours["Step:ModeKeys.EVAL"],
            theirs["pandas_eval_steps"],
        ),
        ("PT_dataloader_analysis GetNext", ours["DataLoaderIter"], theirs["getnext"]),
        (
            "PT_dataloader_analysis initializations",
            ours["DataLoaderIterInitialize"],
            theirs["iter_init"],
        ),
        ("PT_dataloader_analysis workers", ours["DataLoaderWorker"], theirs["workers"]),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'what':{width}}  stepscope  smdebug 1.0.34")
    for what, mine, peer in rows:
        print(f"{what:{width}}  {mine:9d}  {peer:9d}  {'ok' if mine == peer else 'MISMATCH'}")
    print(f"worker ids seen by PT_dataloader_analysis: {theirs['worker_ids']}")
    return 0 if all(mine == peer for _, mine, peer in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
