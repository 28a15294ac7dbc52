"""Cross-check: SageMaker Debugger's own system reader reads our system files exactly as we wrote them.

Writes system files two ways into a temporary profiler output folder:

1. the real monitor process (``start_monitor``) for a few seconds at 100 ms, with scripted GPUs,
   so every record type appears;
2. ``SystemMetricsWriter`` with synthetic records across a minute and an hour boundary (UTC),
   so file and folder naming is exercised.

Then runs smdebug 1.0.34's ``LocalSystemMetricsReader.get_events`` over the whole range in its
own virtualenv (``bench/peers.py``) and compares its events with the lines in our files: same
count, same (type, name, dimension, value, node, timestamp) multiset.

Usage::

    python bench/crosscheck_smdebug_system.py [--seconds 3]

Exit status: 0 when they agree, 1 on a mismatch, 3 when the smdebug virtualenv cannot be built
(e.g. no access to the package registry).
"""

from __future__ import annotations

import argparse
import calendar
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from peers import SMDEBUG, PeerSetupError, peer_python
from stepscope.collect import ScriptedGpuBackend, start_monitor
from stepscope.store import SystemMetricsWriter, SystemRecord

EXIT_MISMATCH = 1
EXIT_PEER_UNAVAILABLE = 3

_SMDEBUG_SIDE = """
import json, sys
from smdebug.profiler.system_metrics_reader import LocalSystemMetricsReader
root, start_us, end_us, result = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
reader = LocalSystemMetricsReader(root)
events = reader.get_events(start_us, end_us)
with open(result, "w") as out:  # smdebug logs to stdout
    json.dump([[e.type, e.name, e.dimension, e.value, e.node_id, e.timestamp] for e in events], out)
"""

Key = tuple[str, str, str, float, str, float]


def write_synthetic(output_dir: Path) -> None:
    """Records every 7 s from 10:58:30 to 11:01:30 UTC on 2026-02-03, on node algo-2."""
    start_s = calendar.timegm((2026, 2, 3, 10, 58, 30))
    with SystemMetricsWriter(output_dir, node="algo-2") as writer:
        for step in range(26):
            t_s = start_s + step * 7 + 0.123456
            writer.write(
                [
                    SystemRecord("cpu", "cpu0", "CPUUtilization", float(step % 100), t_s),
                    SystemRecord("gpu", "gpu0", "GPUUtilization", 50.5, t_s),
                    SystemRecord("memory", "MemoryUsedPercent", "", 12.25, t_s),
                    SystemRecord("i/o", "IOPS", "", 3.0, t_s),
                    SystemRecord("network", "TransmitBytesPerSecond", "Algorithm", 1e6, t_s),
                ]
            )


def our_records(output_dir: Path) -> list[Key]:
    keys = []
    for path in sorted((output_dir / "system").rglob("*.json")):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            keys.append(
                (r["Type"], r["Name"], r["Dimension"], r["Value"], r["NodeId"], r["Timestamp"])
            )
    return keys


def smdebug_records(python: Path, output_dir: Path, start_us: int, end_us: int) -> list[Key]:
    result = output_dir.parent / "smdebug-events.json"
    subprocess.run(
        [
            str(python),
            "-c",
            _SMDEBUG_SIDE,
            str(output_dir),
            str(start_us),
            str(end_us),
            str(result),
        ],
        capture_output=True,
        check=True,
    )
    return [tuple(event) for event in json.loads(result.read_text())]  # type: ignore[misc]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="how long the monitor runs")
    args = parser.parse_args(argv)
    try:
        python = peer_python("smdebug", SMDEBUG)
    except PeerSetupError as exc:
        print(f"smdebug is unavailable: {exc}", file=sys.stderr)
        return EXIT_PEER_UNAVAILABLE

    with tempfile.TemporaryDirectory(prefix="stepscope-crosscheck-") as tmp:
        output_dir = Path(tmp) / "profiler-output"
        gpus = ScriptedGpuBackend([[(10, 20), (30, 40)], [(55.5, 60), (70, 80.25)]])
        handle = start_monitor(output_dir, interval_ms=100, gpu_backend=gpus)
        time.sleep(args.seconds)
        handle.stop()
        write_synthetic(output_dir)

        ours = our_records(output_dir)
        start_us = int(min(key[5] for key in ours) * 1e6) - 1
        end_us = int(max(key[5] for key in ours) * 1e6) + 1
        theirs = smdebug_records(python, output_dir, start_us, end_us)

    types = Counter(key[0] for key in ours)
    print(f"records written by stepscope: {len(ours)} ({dict(types)})")
    print(f"records read by smdebug 1.0.34: {len(theirs)}")
    missing = Counter(ours) - Counter(theirs)
    extra = Counter(theirs) - Counter(ours)
    if missing or extra:
        print(
            f"MISMATCH: {sum(missing.values())} of ours not read by smdebug, e.g. {list(missing)[:3]}"
        )
        print(
            f"          {sum(extra.values())} read by smdebug that we did not write, e.g. {list(extra)[:3]}"
        )
        return EXIT_MISMATCH
    print("OK: smdebug reads every record exactly as written")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
