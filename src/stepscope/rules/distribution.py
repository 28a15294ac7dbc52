"""Bounded-memory summaries of long value series: quantile sketches, sample blocks, time intervals.

Rules run for the whole job, so they may not keep every sample. These three structures keep what
the rules need in bounded memory, and give the same answer however the data was split into
windows (they only count, or buffer less than one block):

* :class:`QuantileSketch` -- logarithmic buckets with 1 % relative accuracy (the DDSketch idea):
  percentiles, min, max and mean of any non-negative series (utilization %, bytes/s, durations);
* :class:`SampleBlocks` -- cuts a per-key series into consecutive blocks of ``size`` samples after
  skipping the first ``skip`` ones; this is how ``window`` and ``patience`` are applied (and
  once the job has ended, the last partial block of at least half a block is judged too);
* :class:`IntervalList` -- merged violation intervals, coarsened past a number of them.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Hashable
from typing import Any

import numpy as np

__all__ = ["IntervalList", "QuantileSketch", "SampleBlocks", "box_stats"]

_GAMMA = 1.02
_LOG_GAMMA = math.log(_GAMMA)
#: Values at or below this count as zero (utilization 0 %, no traffic).
_ZERO = 1e-9


class QuantileSketch:
    """Percentiles of a non-negative series within 1 % of the true value, in bounded memory.

    Negative values are clamped to 0 (as SageMaker's OverallSystemUsage did); NaN is ignored.
    """

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.zeros = 0
        self.count = 0
        self.total = 0.0
        self.minimum = math.inf
        self.maximum = -math.inf

    def add(self, values: Any) -> None:
        """Add an array (or sequence) of values."""
        array = np.asarray(values, dtype=np.float64).ravel()
        array = array[~np.isnan(array)]
        if array.size == 0:
            return
        array = np.maximum(array, 0.0)
        self.count += int(array.size)
        self.total += float(array.sum())
        self.minimum = min(self.minimum, float(array.min()))
        self.maximum = max(self.maximum, float(array.max()))
        positive = array[array > _ZERO]
        self.zeros += int(array.size - positive.size)
        if positive.size:
            index = np.ceil(np.log(positive) / _LOG_GAMMA).astype(np.int64)
            keys, counts = np.unique(index, return_counts=True)
            for key, count in zip(keys.tolist(), counts.tolist(), strict=True):
                self.buckets[key] = self.buckets.get(key, 0) + count

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (0..1); NaN when empty."""
        if self.count == 0:
            return math.nan
        if q <= 0:
            return self.minimum
        if q >= 1:
            return self.maximum
        rank = q * (self.count - 1)
        if rank < self.zeros:
            return max(self.minimum, 0.0)
        seen = self.zeros
        for key in sorted(self.buckets):
            seen += self.buckets[key]
            if seen > rank:
                value = 2.0 * _GAMMA**key / (_GAMMA + 1.0)
                return min(max(value, self.minimum), self.maximum)
        return self.maximum

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else math.nan

    def histogram(self, max_bins: int = 60) -> dict[str, Any]:
        """Counts over at most ``max_bins`` logarithmic bins: ``{"edges": [...], "counts": [...]}``.

        Zeros fall in a first bin ``[0, smallest edge)`` when there are any.
        """
        if not self.buckets:
            return (
                {"edges": [0.0, 0.0], "counts": [self.zeros]}
                if self.zeros
                else {"edges": [], "counts": []}
            )
        low, high = min(self.buckets), max(self.buckets)
        step = max(1, math.ceil((high - low + 1) / max_bins))
        starts = list(range(low, high + 1, step))
        counts = [0] * len(starts)
        for key, count in self.buckets.items():
            counts[(key - low) // step] += count
        edges = [_GAMMA ** (start - 1) for start in starts] + [_GAMMA ** (starts[-1] - 1 + step)]
        if self.zeros:
            edges.insert(0, 0.0)
            counts.insert(0, self.zeros)
        return {"edges": [round(e, 6) for e in edges], "counts": counts}

    def summary(self) -> dict[str, float]:
        """``max, p99, p95, p50, min, mean, count`` rounded to 2 decimals (the report's table)."""
        return {
            "max": _round(self.maximum if self.count else math.nan),
            "p99": _round(self.quantile(0.99)),
            "p95": _round(self.quantile(0.95)),
            "p50": _round(self.quantile(0.50)),
            "min": _round(self.minimum if self.count else math.nan),
            "mean": _round(self.mean),
            "count": self.count,
        }


def box_stats(sketch: QuantileSketch) -> dict[str, float]:
    """Box-plot figures of one series: quartiles, p5/p95, Tukey whiskers, min and max."""
    p25, p50, p75 = (sketch.quantile(q) for q in (0.25, 0.5, 0.75))
    iqr = p75 - p25
    return {
        "min": _round(sketch.minimum if sketch.count else math.nan),
        "p5": _round(sketch.quantile(0.05)),
        "p25": _round(p25),
        "p50": _round(p50),
        "p75": _round(p75),
        "p95": _round(sketch.quantile(0.95)),
        "max": _round(sketch.maximum if sketch.count else math.nan),
        "lower": _round(max(sketch.minimum, p25 - 1.5 * iqr) if sketch.count else math.nan),
        "upper": _round(min(sketch.maximum, p75 + 1.5 * iqr) if sketch.count else math.nan),
        "count": sketch.count,
    }


def _round(value: float) -> float:
    return round(value, 2) if math.isfinite(value) else math.nan


class SampleBlocks:
    """Cuts each key's series into blocks of ``size`` samples after skipping its first ``skip``.

    Only the unfinished block is buffered (fewer than ``size`` values per key), so memory is
    bounded and the blocks are the same whatever the window boundaries.

    :param size: samples per block (a rule's ``window``).
    :param skip: samples skipped at the start of each key's series (a rule's ``patience``).
    :ivar last_size: the fewest samples of a last, partial block that is judged once the job
        has ended (half a block), so a job ending mid-block is not left unjudged for its last
        minutes.
    """

    def __init__(self, size: int, skip: int) -> None:
        self.size = max(1, int(size))
        self.skip = max(0, int(skip))
        self.last_size = max(1, self.size // 2)
        self.seen: dict[Hashable, int] = {}
        self.pending: dict[Hashable, np.ndarray] = {}

    def feed(self, key: Hashable, values: Any) -> np.ndarray:
        """Add ``values`` (in time order) and return the blocks they complete.

        :param values: shape ``(n,)``, or ``(n, k)`` for ``k`` parallel series (e.g. time and
            value) cut at the same places.
        :returns: shape ``(blocks, size)`` or ``(blocks, size, k)``.
        """
        array = np.asarray(values, dtype=np.float64)
        flat = array.ndim == 1
        array = array.reshape(len(array), -1)
        seen = self.seen.get(key, 0)
        self.seen[key] = seen + len(array)
        array = array[max(0, self.skip - seen) :]
        previous = self.pending.get(key)
        buffer = array if previous is None else np.concatenate([previous, array])
        full = len(buffer) // self.size
        self.pending[key] = buffer[full * self.size :].copy()
        blocks = buffer[: full * self.size].reshape(full, self.size, buffer.shape[1])
        return blocks[:, :, 0] if flat else blocks

    def last_block(self, key: Hashable) -> np.ndarray | None:
        """The buffered samples of ``key`` that do not fill a block when they make a last block
        (at least :attr:`last_size`), else None; judge it only once the job has ended, because
        while it runs that block's samples are still coming."""
        pending = self.pending.get(key)
        return pending if pending is not None and len(pending) >= self.last_size else None

    def total(self, key: Hashable) -> int:
        """How many samples of ``key`` were fed, skipped ones included."""
        return self.seen.get(key, 0)


class IntervalList:
    """Violation intervals in time order, merging those closer than ``join_gap_us``.

    Up to ``limit`` intervals added, they are kept as they are. Past that, the list coarsens
    instead of growing: every interval is widened to whole cells of a time grid, the finest grid
    (cells of a power of two microseconds) that cuts the span from the first start to the last end
    into at most ``limit`` cells, so a long job's violations are still shown all through the job,
    in bounded memory. The grid depends only on that span, and a coarser grid's cells are unions
    of a finer one's, so the list does not depend on the order the intervals came in (live scans
    and one offline pass give the same list).

    :param join_gap_us: intervals separated by at most this much are merged into one.
    :param limit: intervals kept as they are before the list coarsens; it then holds at most
        ``limit + 1``.
    """

    def __init__(self, join_gap_us: int, limit: int = 200) -> None:
        self.join_gap_us = join_gap_us
        self.limit = limit
        self.intervals: list[list[int]] = []
        self.added = 0
        self.cell_us = 1
        self._span_us: tuple[int, int] | None = None

    def add(self, starts_us: Any, ends_us: Any) -> None:
        """Add intervals given as two arrays, in any order: the rules judging GPU by GPU add
        one GPU's blocks after another's, earlier ones included."""
        for start, end in zip(
            np.asarray(starts_us).tolist(), np.asarray(ends_us).tolist(), strict=True
        ):
            start, end = int(start), int(end)
            first, last = self._span_us or (start, end)
            self._span_us = (min(first, start), max(last, end))
            self.added += 1
            self._insert(start, end)
        if self.added > self.limit and self._span_us is not None:
            first, last = self._span_us
            cell_us = self.cell_us
            while (last - first) / cell_us > self.limit:
                cell_us *= 2
            if cell_us != self.cell_us:
                self.cell_us = cell_us
                intervals, self.intervals = self.intervals, []
                for start, end in intervals:
                    self._insert(start, end)

    def _insert(self, start: int, end: int) -> None:
        """Put ``[start, end]``, widened to whole cells, in its place, merged with the neighbours
        it comes close to."""
        cell = self.cell_us
        start, end = start // cell * cell, -(-end // cell) * cell
        at = bisect.bisect_left(self.intervals, [start, end])
        if at and start - self.intervals[at - 1][1] <= self.join_gap_us:
            at -= 1
            self.intervals[at][1] = max(self.intervals[at][1], end)
        else:
            self.intervals.insert(at, [start, end])
        following = at + 1
        while (
            following < len(self.intervals)
            and self.intervals[following][0] - self.intervals[at][1] <= self.join_gap_us
        ):
            self.intervals[at][1] = max(self.intervals[at][1], self.intervals.pop(following)[1])

    def as_list(self) -> list[list[int]]:
        """The intervals; widened ones end where the violations do, not on a cell's edge
        before the first or after the last."""
        if self._span_us is None:
            return []
        first, last = self._span_us
        return [[max(start, first), min(end, last)] for start, end in self.intervals]
