"""The collection clock: microseconds since the epoch on the monotonic ``perf_counter``.

Every timestamp the training process records is :func:`now_us`: ``time.perf_counter`` (the same
monotonic clock in every process of the machine) mapped to microseconds since the epoch once per
process, when this module is imported. Durations are therefore immune to wall-clock jumps;
cross-process alignment is recorded, never applied (``framework/ranks/<node_id>.json``). The
system monitor samples on it too (:func:`now_s`): NTP stepping the wall clock back during a job
would otherwise date its samples into the past, out of order with what came before.
"""

from __future__ import annotations

import time

__all__ = ["EPOCH_OFFSET_US", "now_s", "now_us"]

_perf_counter = time.perf_counter

#: Epoch µs minus ``perf_counter`` µs, measured once per process. A forked child keeps it:
#: ``perf_counter`` is the machine's monotonic clock, the same in parent and child.
EPOCH_OFFSET_US: float = time.time() * 1e6 - _perf_counter() * 1e6


def now_us() -> float:
    """Microseconds since the epoch on the monotonic clock of this process."""
    return _perf_counter() * 1e6 + EPOCH_OFFSET_US


def now_s() -> float:
    """Seconds since the epoch on the monotonic clock of this process (:func:`now_us`)."""
    return now_us() / 1e6
