"""The collection clock: microseconds since the epoch on the monotonic ``perf_counter``.

Every timestamp the training process records is :func:`now_us`: ``time.perf_counter`` (the same
monotonic clock in every process of the machine) mapped to microseconds since the epoch once per
process. Durations are therefore immune to wall-clock jumps; cross-process alignment is recorded,
never applied (``framework/ranks/<node_id>.json``).
"""

from __future__ import annotations

import functools
import time

__all__ = ["epoch_offset_us", "now_us"]


@functools.cache
def epoch_offset_us() -> float:
    """Epoch µs minus ``perf_counter`` µs, measured once per process (a memoized constant)."""
    return time.time() * 1e6 - time.perf_counter() * 1e6


def now_us() -> float:
    """Microseconds since the epoch on the monotonic clock of this process."""
    return time.perf_counter() * 1e6 + epoch_offset_us()
