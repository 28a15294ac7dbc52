"""Cross-check: our readers and SageMaker Debugger's read the same records from the same folders.

For each folder — the recorded SageMaker Debugger outputs beside the repository (when present)
and a job written by ``stepscope.testing.generate_job`` — runs smdebug 1.0.34's
``LocalSystemMetricsReader`` and ``LocalAlgorithmMetricsReader`` (``get_events`` over the whole
time range) in smdebug's own virtualenv (``bench/peers.py``), and ``open_job`` here, then
compares:

* system records: the multiset of (type, name, dimension, value, node, timestamp in µs);
* framework events: the multiset of (phase, name, start µs, duration µs, step) of the spans
  (smdebug drops instant events, so only ours with ``ph = 'X'`` are compared).

Usage::

    python bench/crosscheck_smdebug_readers.py [--minutes 5]

Exit status: 0 when every folder agrees, 1 on a mismatch, 3 when the smdebug virtualenv cannot
be built (e.g. no access to the package registry).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from pathlib import Path

from peers import SMDEBUG, PeerSetupError, peer_python
from stepscope.store import open_job
from stepscope.testing import generate_job

EXIT_MISMATCH = 1
EXIT_PEER_UNAVAILABLE = 3

RECORDED = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "smdebug"
RECORDED_FOLDERS = (
    "test_traces",
    "merge_traces",
    "model_timeline_traces",
    "horovod_timeline_traces",
    "tfprofiler_timeline_traces",
)

SMDEBUG_SIDE = textwrap.dedent(
    """
    import json, logging, sys
    logging.disable(logging.CRITICAL)
    from smdebug.profiler.algorithm_metrics_reader import LocalAlgorithmMetricsReader
    from smdebug.profiler.system_metrics_reader import LocalSystemMetricsReader
    root, result = sys.argv[1], sys.argv[2]
    start_us, end_us = 0, 4_000_000_000_000_000
    system = LocalSystemMetricsReader(root).get_events(start_us, end_us)
    framework = LocalAlgorithmMetricsReader(root).get_events(start_us, end_us)
    def step(event):
        args = event.event_args or {}
        return int(args["step_num"]) if "step_num" in args else -1
    with open(result, "w") as out:  # smdebug prints to stdout
        json.dump({
            "system": [[e.type, e.name or "", e.dimension, e.value, e.node_id, e.timestamp]
                       for e in system],
            "framework": [[e.event_phase, e.event_name, e.start_time, e.duration, step(e)]
                          for e in framework],
        }, out)
    """
)


def smdebug_read(python: Path, root: Path, work: Path) -> dict[str, list[list[object]]]:
    script = work / "smdebug_side.py"
    script.write_text(SMDEBUG_SIDE)
    result = work / "smdebug.json"
    subprocess.run(
        [str(python), str(script), str(root), str(result)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return json.loads(result.read_text())


def ours_read(root: Path, work: Path) -> dict[str, list[tuple[object, ...]]]:
    con = open_job(root, cache_dir=work / "cache").connect()
    system = con.execute(
        "SELECT type, name, dimension, value, node, timestamp_us FROM system"
    ).fetchall()
    framework = con.execute(
        "SELECT category, name, start_us, dur_us, step FROM events WHERE ph = 'X'"
    ).fetchall()
    return {"system": system, "framework": framework}


def system_key(row: list[object] | tuple[object, ...], smdebug: bool) -> tuple[object, ...]:
    kind, name, dimension, value, node, ts = row
    ts_us = math.floor(float(ts) * 1e6 + 0.5) if smdebug else int(ts)  # type: ignore[arg-type]
    return (kind, name, dimension, round(float(value), 6), node, ts_us)  # type: ignore[arg-type]


def framework_key(row: list[object] | tuple[object, ...]) -> tuple[object, ...]:
    phase, name, start, duration, step = row
    return (phase, name, round(float(start), 3), round(float(duration), 3), int(step))  # type: ignore[arg-type]


def compare(label: str, theirs: Counter, ours: Counter) -> bool:
    if theirs == ours:
        print(f"  {label}: {sum(ours.values()):,} records, identical")
        return True
    missing = theirs - ours
    extra = ours - theirs
    print(
        f"  {label}: MISMATCH smdebug {sum(theirs.values()):,} vs ours {sum(ours.values()):,}; "
        f"only smdebug {sum(missing.values())} e.g. {list(missing)[:2]}; "
        f"only ours {sum(extra.values())} e.g. {list(extra)[:2]}"
    )
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=int, default=5, help="length of the generated job")
    args = parser.parse_args()
    try:
        python = peer_python("smdebug", SMDEBUG)
    except PeerSetupError as exc:
        print(f"smdebug is unavailable: {exc}", file=sys.stderr)
        return EXIT_PEER_UNAVAILABLE
    with tempfile.TemporaryDirectory(prefix="stepscope-crosscheck-") as tmp:
        work = Path(tmp)
        folders = [RECORDED / name for name in RECORDED_FOLDERS if (RECORDED / name).is_dir()]
        generated = generate_job(work / "generated", minutes=args.minutes, seed=1)
        folders.append(generated / "profiler-output")
        agree = True
        for index, root in enumerate(folders):
            print(f"{root.name if root != folders[-1] else 'generated job'}:")
            scratch = work / f"scratch-{index}"
            scratch.mkdir()
            theirs = smdebug_read(python, root, scratch)
            ours = ours_read(root, scratch)
            agree &= compare(
                "system",
                Counter(system_key(r, True) for r in theirs["system"]),
                Counter(system_key(r, False) for r in ours["system"]),
            )
            agree &= compare(
                "framework",
                Counter(framework_key(r) for r in theirs["framework"]),
                Counter(framework_key(r) for r in ours["framework"]),
            )
    print("all folders agree" if agree else "MISMATCH")
    return 0 if agree else EXIT_MISMATCH


if __name__ == "__main__":
    sys.exit(main())
