"""A tiny job built by hand in the store's schemas, with numbers small enough to check by hand.

Timeline (seconds after ``T0``, one node ``algo-1``; ``T0`` is 5 s after a whole minute):

* system, one sample per second at 0..9 s: ``cpu0`` CPUUtilization = 10*k, ``cpu0``
  I/OWaitPercentage = 1, ``gpu0`` GPUUtilization = 50, MemoryUsedPercent = 30;
* TRAIN steps 0 [1, 2], 1 [2, 3.5], 2 [3.5, 4.5]; EVAL steps 0 [6, 6.5], 1 [6.5, 7.5];
* a ``Forward`` event (step -1) inside each TRAIN step: [1.1, 1.6], [2.1, 2.6], [3.6, 4.1];
* ``DataLoaderIter::GetNext`` at each TRAIN step start lasting 100, 100 and 500 µs (no step);
* one ``_MultiProcessingDataLoaderIter.__init__`` at 0.2 s for 300 ms (4 workers, pin_memory);
* two ``DataLoaderWorker`` events [0.5, 8] (outside every step) and [0.5, 2.5].
"""

from __future__ import annotations

import json

import duckdb
import pyarrow as pa

from stepscope import testing
from stepscope.store.schema import SYSTEM_SCHEMA

MINUTE0 = 26_666_667 * 60_000_000
T0 = MINUTE0 + 5_000_000
S = 1_000_000

TRAIN_STEPS = [(0, 1.0, 2.0), (1, 2.0, 3.5), (2, 3.5, 4.5)]
EVAL_STEPS = [(0, 6.0, 6.5), (1, 6.5, 7.5)]


def system_table() -> pa.Table:
    rows = []
    for k in range(10):
        t = T0 + k * S
        rows += [
            (t, "algo-1", "cpu", "cpu0", "CPUUtilization", 10.0 * k),
            (t, "algo-1", "cpu", "cpu0", "I/OWaitPercentage", 1.0),
            (t, "algo-1", "gpu", "gpu0", "GPUUtilization", 50.0),
            (t, "algo-1", "memory", "MemoryUsedPercent", "", 30.0),
        ]
    return testing.system_table(
        **dict(zip(SYSTEM_SCHEMA.names, zip(*rows, strict=True), strict=True))
    )


def event(source, category, name, start_s, dur_s, step=-1, args=None):
    return testing.event_row(
        source=source,
        category=category,
        name=name,
        start_us=float(T0 + round(start_s * S)),
        dur_us=float(round(dur_s * S)),
        pid=100,
        step=step,
        args=json.dumps(args) if args else "",
    )


def event_rows() -> list[dict]:
    rows = []
    for step, lo, hi in TRAIN_STEPS:
        rows.append(
            event("pythontimeline", "Step:ModeKeys.TRAIN", "Step:ModeKeys.TRAIN", lo, hi - lo, step)
        )
        rows.append(event("pythontimeline", "Forward", "Net", lo + 0.1, 0.5))
        dur = 500e-6 if step == 2 else 100e-6
        rows.append(
            event(
                "model_timeline",
                "DataLoaderIter",
                "DataLoaderIter::GetNext",
                lo,
                dur,
                args={"worker_id": step % 2},
            )
        )
    for step, lo, hi in EVAL_STEPS:
        rows.append(
            event("pythontimeline", "Step:ModeKeys.EVAL", "Step:ModeKeys.EVAL", lo, hi - lo, step)
        )
    rows.append(
        event(
            "model_timeline",
            "DataLoaderIterInitialize",
            "_MultiProcessingDataLoaderIter.__init__",
            0.2,
            0.3,
            args={"num_workers": 4, "pin_memory": True},
        )
    )
    rows.append(
        event("model_timeline", "DataLoaderWorker", "worker_loop", 0.5, 7.5, args={"worker_id": 0})
    )
    rows.append(
        event("model_timeline", "DataLoaderWorker", "worker_loop", 0.5, 2.0, args={"worker_id": 1})
    )
    return rows


def events_table(rows: list[dict] | None = None) -> pa.Table:
    return testing.events_table(event_rows() if rows is None else rows)


def connect(
    system: pa.Table | None = None, events: pa.Table | None = None
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with ``system`` and ``events`` views over the given tables."""
    return testing.connect(
        events_table() if events is None else events,
        system_table() if system is None else system,
    )
