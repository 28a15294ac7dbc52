"""Step-time overhead of ``stepscope run`` (default configuration) against the bare script.

The same CPU training loop runs bare and under ``stepscope run``, alternating, several times. The
script times its own steps with ``perf_counter`` (start-up and shut-down are excluded), so the
figure is what a user's training loop feels. Prints the median step time of each side and the
overhead in percent; the target is under 1 % at the defaults.

    python bench/bench_run_overhead.py [--reps 5] [--steps 300]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

TRAIN = textwrap.dedent(
    """
    import json, sys, time
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    steps, out = int(sys.argv[1]), sys.argv[2]
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(32, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(512, 3, 32, 32), torch.randint(0, 10, (512,)))
    loader = torch.utils.data.DataLoader(data, batch_size=32, shuffle=True)
    times, step = [], 0
    while step < steps:
        for x, y in loader:
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            times.append(time.perf_counter() - t0)
            step += 1
            if step == steps:
                break
    json.dump(times[20:], open(out, "w"))  # the first steps warm up allocators and caches
    """
)


def _run(command: list[str], times_file: Path) -> float:
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return statistics.median(json.loads(times_file.read_text()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "train.py"
        script.write_text(TRAIN)
        times_file = Path(tmp) / "times.json"
        train = [sys.executable, str(script), str(args.steps), str(times_file)]
        bare: list[float] = []
        profiled: list[float] = []
        for rep in range(args.reps):
            bare.append(_run(train, times_file))
            job_dir = Path(tmp) / f"job-{rep}"
            run = [sys.executable, "-m", "stepscope", "run", "--job-dir", str(job_dir), "--"]
            profiled.append(_run(run + train, times_file))
            print(
                f"rep {rep + 1}: bare {bare[-1] * 1e3:.2f} ms, stepscope {profiled[-1] * 1e3:.2f} ms"
            )
    b, p = statistics.median(bare), statistics.median(profiled)
    print(f"median step time: bare {b * 1e3:.3f} ms, under stepscope run {p * 1e3:.3f} ms")
    print(f"overhead: {100 * (p / b - 1):+.2f} % (target < 1 %)")


if __name__ == "__main__":
    main()
