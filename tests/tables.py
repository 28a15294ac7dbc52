"""A small hand-made Kineto-like job, events and system rows, for the timeline and export tests.

Every figure in it is known by construction, so tests can assert exact results; open it with
``stepscope.testing.connect(events_table(SAMPLE_EVENTS), system_table(SAMPLE_SYSTEM))``.
"""

from __future__ import annotations

import json
from typing import Any

from stepscope.testing import event_row

T0 = 1_700_000_000_000_000.0  # epoch µs


def event(category: str, name: str, start: float, dur: float, **extra: Any) -> dict[str, Any]:
    """A Kineto event of process 1, thread 1, ``start`` µs after ``T0``."""
    fields = {"source": "kineto", "pid": 1, "tid": 1, **extra}
    return event_row(category=category, name=name, start_us=T0 + start, dur_us=dur, **fields)


SAMPLE_EVENTS = [
    event("user_annotation", "ProfilerStep#3", 0, 1000, step=3),
    event("cpu_op", "aten::linear", 10, 200, step=3, external_id=5),
    # ns rounding: the child ends 0.4 µs after its parent, and must still nest
    event("cpu_op", "aten::addmm", 20, 190.4, step=3, external_id=6),
    event("cuda_runtime", "cudaLaunchKernel", 50, 10, step=3, correlation=77, external_id=6),
    event(
        "kernel",
        "volta_sgemm_128x64_nn",
        300,
        120,
        device=0,
        stream=7,
        correlation=77,
        args=json.dumps({"grid": [1, 2, 1]}),
    ),
    event("cpu_op", "aten::relu", 400, 50, step=3),
    event("user_annotation", "ProfilerStep#4", 1000, 800, step=4),
    event("cpu_op", "aten::mul", 1100, 30, step=4),
    # two annotations that overlap without nesting: the second goes to a second lane
    event("Annotation", "load", 2000, 100, source="pythontimeline", tid=-1),
    event("Annotation", "decode", 2050, 100, source="pythontimeline", tid=-1),
    event(
        "cpu_instant_event",
        "[memory]",
        60,
        0,
        ph="i",
        device=0,
        args=json.dumps({"Total Allocated": 1024, "Total Reserved": 4096}),
    ),
]
SAMPLE_SYSTEM = [
    {
        "timestamp_us": int(T0) + 500_000 * k,
        "node": "algo-1",
        "type": kind,
        "name": name,
        "dimension": dim,
        "value": value,
    }
    for k in range(3)
    for kind, name, dim, value in [
        ("cpu", "cpu0", "CPUUtilization", 50.0 + k),
        ("cpu", "cpu1", "CPUUtilization", 70.0 + k),
        ("gpu", "gpu0", "GPUUtilization", 90.0),
        ("memory", "MemoryUsedPercent", "", 40.0),
    ]
]
