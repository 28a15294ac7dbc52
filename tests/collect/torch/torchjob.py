"""Run a real training script as ``stepscope run`` would, and read the files it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from stepscope.collect.bootstrap import BOOTSTRAP_DIR
from stepscope.config import ProfilerConfig


def profiled_env(job_dir: Path, config: ProfilerConfig, **extra: str) -> dict[str, str]:
    """The environment ``stepscope run`` gives the training command (the Launching contract)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    config_path = job_dir / "profiler-config.json"
    config.to_file(config_path)
    env = dict(os.environ)
    env.update(
        STEPSCOPE_CONFIG=str(config_path),
        STEPSCOPE_JOB_DIR=str(job_dir),
        STEPSCOPE_NODE="algo-1",
        PYTHONPATH=os.pathsep.join(
            [str(BOOTSTRAP_DIR), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        ),
    )
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK"):
        env.pop(name, None)
    env.update(extra)
    return env


def run_script(
    tmp_path: Path,
    source: str,
    config: ProfilerConfig | None,
    *args: str,
    launcher: tuple[str, ...] = (),
    timeout_s: float = 180,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Run ``source`` as a script, profiled with ``config`` (or not, with ``None``)."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source))
    job_dir = tmp_path / "job"
    if config is None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSCOPE_")}
    else:
        env = profiled_env(job_dir, config)
    result = subprocess.run(
        [sys.executable, *launcher, str(script), *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert result.returncode == 0, result.stderr
    return job_dir, result


def read_events(job_dir: Path, suffix: str = "pythontimeline.json") -> list[dict[str, Any]]:
    """Every span of the closed timeline files, with ``phase`` and absolute ``start_us``."""
    events: list[dict[str, Any]] = []
    output = job_dir / "profiler-output" / "framework" / "pevents"
    for path in sorted(output.rglob(f"*_{suffix}")):
        records = json.loads(path.read_text())
        base = next(
            r["args"]["start_time_since_epoch_in_micros"]
            for r in records
            if r.get("ph") == "M" and "start_time_since_epoch_in_micros" in r.get("args", {})
        )
        phases = {
            r["pid"]: r["args"]["name"]
            for r in records
            if r.get("ph") == "M" and r["name"] == "process_name" and "name" in r["args"]
        }
        node_id = path.name.split("_", 1)[1].removesuffix(f"_{suffix}")
        for r in records:
            if r.get("ph") == "X":
                events.append(
                    {
                        "phase": phases[r["pid"]],
                        "name": r["name"],
                        "start_us": base + r["ts"],
                        "end_us": base + r["ts"] + r["dur"],
                        "args": r.get("args", {}),
                        "node_id": node_id,
                    }
                )
    return sorted(events, key=lambda e: e["start_us"])


def in_phase(events: list[dict[str, Any]], phase: str) -> list[dict[str, Any]]:
    """The events of one phase (``Forward``, ``Backward(post-forward)``, ...), in order."""
    return [e for e in events if e["phase"] == phase]


def steps(events: list[dict[str, Any]], mode: str = "TRAIN") -> list[dict[str, Any]]:
    return in_phase(events, f"Step:ModeKeys.{mode}")


def losses(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The ``loss <value>`` lines a test script prints, as printed (exact comparison)."""
    return [line.split()[1] for line in result.stdout.splitlines() if line.startswith("loss ")]


#: A tiny real training job: ``--epochs`` x (``--steps`` training steps, ``--eval-steps`` eval
#: batches), a DataLoader with ``--workers`` workers (``--persistent-workers``: kept between
#: epochs, to the end of the script), SGD, training from ``--start-at`` (a Unix time) on;
#: prints every loss and the pids of the
#: processes that loaded the data. ``--annotate`` wraps each step in nested stepscope annotations.
TRAIN_SCRIPT = """
import argparse, os, sys, time
import torch
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--eval-steps", type=int, default=0)
parser.add_argument("--workers", type=int, default=0)
parser.add_argument("--persistent-workers", action="store_true")
parser.add_argument("--annotate", action="store_true")
parser.add_argument("--no-optimizer", action="store_true")
parser.add_argument("--sleep-s", type=float, default=0.0, help="sleep in every training step")
parser.add_argument("--start-at", type=float, default=0.0, help="Unix time to start training at")
args = parser.parse_args()
time.sleep(max(args.start_at - time.time(), 0.0))

class Data(Dataset):
    def __init__(self, n, seed):
        self.n, self.seed = n, seed
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        g = torch.Generator().manual_seed(self.seed * 10007 + i)
        return torch.randn(8, generator=g), torch.randn(1, generator=g), os.getpid()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
loading = dict(num_workers=args.workers, persistent_workers=args.persistent_workers)
train = DataLoader(Data(4 * args.steps, 0), batch_size=4, **loading)
evaluate = DataLoader(Data(4 * args.eval_steps, 1), batch_size=4, **loading)
if args.annotate:
    import stepscope
pids = set()
for epoch in range(args.epochs):
    model.train()
    for i, (x, y, pid) in enumerate(train):
        pids.update(pid.tolist())
        if args.annotate:
            step = stepscope.annotation_begin(f"step_{epoch}_{i}")
            with stepscope.annotate("forward"):
                with stepscope.annotate("inner"):
                    out = model(x)
        else:
            out = model(x)
        loss = torch.nn.functional.mse_loss(out, y)
        if args.no_optimizer:
            model.zero_grad()
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.05 * p.grad
        else:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if args.sleep_s:
            time.sleep(args.sleep_s)
        if args.annotate:
            stepscope.annotation_end(step)
        print("loss", repr(loss.item()), flush=True)
    model.eval()
    with torch.no_grad():
        for x, y, pid in evaluate:
            pids.update(pid.tolist())
            model(x)
print("pids", " ".join(str(p) for p in sorted(pids - {os.getpid()})), flush=True)
"""


def loader_pids(result: subprocess.CompletedProcess[str]) -> set[int]:
    """The pids of the data-loader workers that produced batches (the script prints them)."""
    line = next(line for line in result.stdout.splitlines() if line.startswith("pids"))
    return {int(p) for p in line.split()[1:]}


def run_under_stepscope_run(
    tmp_path: Path, source: str, run_config: dict[str, Any], *, script_name: str = "train.py"
) -> subprocess.CompletedProcess[str]:
    """``stepscope run --job-dir job --config <run_config>`` of a script made of ``source``, in
    ``tmp_path``, without the report; asserts that it succeeded."""
    config = tmp_path / "profiler.json"
    config.write_text(json.dumps(run_config))
    script = tmp_path / script_name
    script.write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSCOPE_")}
    result = subprocess.run(
        [sys.executable, "-m", "stepscope", "run", "--job-dir", "job", "--config", str(config)]
        + ["--no-report", "--", sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    return result
