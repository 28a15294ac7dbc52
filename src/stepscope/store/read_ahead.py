"""Reading the next few large files in worker threads while the current one is written.

A folder of PyTorch profiler traces (one per rank) is converted one trace after another, and
most of a trace's reading happens outside the GIL: inflating the gzip stream, writing the event
array to a temporary file and DuckDB's JSON parse. :class:`ReadAhead` overlaps those of the next
traces with the current one, so a job of many ranks converts on every core the machine has,
while at most ``depth`` files are held in memory at once (those being read, and the one the
caller is writing).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

__all__ = ["ReadAhead", "default_depth"]

_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")


def default_depth() -> int:
    """How many files to keep in flight: one per core, at least one and at most four."""
    return max(1, min(4, os.cpu_count() or 1))


class ReadAhead(Generic[_K, _V]):
    """``read(key)`` for ``keys``, in their order, up to ``depth`` of them at once in threads.

    Use it as a context manager and :meth:`take` the keys in the order given: each call waits
    for that key's result (re-raising what ``read`` raised), and starts the next read once the
    caller is done with the previous result, so the results alive stay at most ``depth``. A
    key not in ``keys`` is read on the calling thread. Leaving the context cancels the reads
    not yet started and waits for the running ones.

    :param read: the function run in the workers; it must be safe to run in several threads.
    :param depth: how many reads may be in flight or held; 1 reads each key when it is taken.
    """

    def __init__(self, keys: Iterable[_K], read: Callable[[_K], _V], depth: int) -> None:
        self._waiting: deque[_K] = deque(keys)
        self._read = read
        self._depth = max(1, depth)
        self._started: dict[_K, Future[_V]] = {}
        self._pool: ThreadPoolExecutor | None = None

    def __enter__(self) -> ReadAhead[_K, _V]:
        if self._depth > 1 and len(self._waiting) > 1:
            self._pool = ThreadPoolExecutor(self._depth, thread_name_prefix="stepscope-read")
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._started.clear()

    def take(self, key: _K) -> _V:
        """The result of ``read(key)``; the previous result must no longer be needed."""
        self._start_more(room=self._depth)
        future = self._started.pop(key, None)
        if future is None:
            if key in self._waiting:
                self._waiting.remove(key)
            return self._read(key)
        # the result about to be returned is held by the caller: keep its place
        self._start_more(room=self._depth - 1)
        return future.result()

    def _start_more(self, room: int) -> None:
        pool = self._pool
        while pool is not None and self._waiting and len(self._started) < room:
            key = self._waiting.popleft()
            self._started[key] = pool.submit(self._read, key)
