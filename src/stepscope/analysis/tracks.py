"""Timeline tracks: which track each event belongs to, and the lanes that keep a track nested.

A timeline shows one row (track) per thread, GPU stream or kind of framework event. Trace viewers
(Perfetto, chrome://tracing, our own timeline) need the slices of one track to nest strictly: a
slice either lies inside the one before it or starts after it ends. Real data breaks that — ns
rounding makes nested Kineto ops overlap by a few ns, data-loader workers run concurrently,
asynchronous collectives overlap compute. :func:`assign_lanes` fixes both without losing
anything: overshoots under :data:`NEST_TOLERANCE_US` are clamped to the parent's end, and a slice
that truly overlaps its neighbour moves to an extra lane of the same track ("stream 7 · 2").

Track identity is a pure function of an event's columns (:func:`tracked_events_sql`), so the
export and the UI's timeline group events the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "GPU_CATEGORIES",
    "NEST_TOLERANCE_US",
    "Track",
    "UNKNOWN_NODE",
    "assign_lanes",
    "tracked_events_sql",
]

#: Kineto categories that run on a GPU stream (``device`` and ``stream`` say which).
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync")

#: A child may end this much after its parent (ns-resolution rounding) and still nest.
NEST_TOLERANCE_US = 1.0

_GPU_LIST = ", ".join(f"'{c}'" for c in GPU_CATEGORIES)

#: Shown for events whose source did not say which host recorded them (a lone trace file).
UNKNOWN_NODE = "host"


def tracked_events_sql(where: str = "TRUE") -> str:
    """A query over the ``events`` view: every span with the columns that name its track.

    ``side`` is ``cpu`` or ``gpu``; ``gpu`` the device on the GPU side (else -1); ``thread``
    the track's label within its process; ``node`` is never empty; ``dur_us`` is never
    negative (a span timed by a clock that stepped back ends where it starts, not before).
    """
    return f"""
        SELECT * REPLACE (
                CASE WHEN node = '' THEN '{UNKNOWN_NODE}' ELSE node END AS node,
                greatest(dur_us, 0.0) AS dur_us
            ),
            CASE WHEN category IN ({_GPU_LIST}) THEN 'gpu' ELSE 'cpu' END AS side,
            CASE WHEN category IN ({_GPU_LIST}) THEN device ELSE -1 END AS gpu,
            CASE
                WHEN category = 'gpu_user_annotation' THEN 'stream ' || stream || ' annotations'
                WHEN category IN ({_GPU_LIST}) THEN 'stream ' || stream
                WHEN source = 'kineto' AND tid < 0 THEN coalesce(nullif(category, ''), 'no thread')
                WHEN source = 'kineto' THEN 'thread ' || tid
                WHEN category = 'DataLoaderWorker' THEN 'DataLoaderWorker pid ' || pid
                WHEN tid >= 0 THEN category || ' thread ' || tid
                ELSE category
            END AS thread
        FROM events WHERE ph = 'X' AND ({where})
    """


@dataclass(frozen=True)
class Track:
    """One row of the timeline.

    :param node: the host-level node (``algo-1``).
    :param rank: the rank, ``-1`` when unknown.
    :param side: ``cpu`` or ``gpu``.
    :param gpu: the device index on the GPU side, else ``-1``.
    :param thread: the track's label within its process (``thread 12``, ``stream 7``, ``Forward``).
    :param lane: ``0`` for the track itself, ``1..`` for the extra lanes of overlapping slices.
    """

    node: str
    rank: int
    side: str
    gpu: int
    thread: str
    lane: int = 0

    @property
    def process_label(self) -> str:
        rank = f"rank {self.rank}" if self.rank >= 0 else "rank ?"
        where = f"GPU {self.gpu}" if self.side == "gpu" else "CPU"
        return f"{self.node} · {rank} · {where}"

    @property
    def label(self) -> str:
        return self.thread if self.lane == 0 else f"{self.thread} · {self.lane + 1}"


def assign_lanes(start_us: np.ndarray, end_us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lanes that make every lane strictly nested, and the (possibly clamped) end times.

    The events must belong to one track and be sorted by start time, longer first on ties (so a
    parent precedes the children that start with it). Returns ``(lane, end_us)`` arrays of the
    same length.

    A slice that starts after every earlier slice has ended opens a fresh group: nothing before
    it can hold it or push it to another lane. Slices alone in their group (most GPU kernels)
    stay on lane 0 untouched, found with NumPy; only groups of several slices go through the
    stack walk, each starting from empty stacks.

    :param start_us: slice starts, µs, sorted ascending.
    :param end_us: slice ends, µs.
    """
    starts = np.asarray(start_us, dtype=np.float64)
    ends = np.asarray(end_us, dtype=np.float64).copy()
    count = len(starts)
    lanes = np.zeros(count, dtype=np.int32)
    if count < 2:
        return lanes, ends
    ended_before = np.empty(count, dtype=np.float64)
    ended_before[0] = -np.inf
    np.maximum.accumulate(ends[:-1], out=ended_before[1:])
    fresh = starts >= ended_before
    alone = fresh & np.append(fresh[1:], True)
    grouped = np.flatnonzero(~alone)
    if len(grouped) == 0:
        return lanes, ends
    group_lanes, group_ends = _walk(
        starts[grouped].tolist(), ends[grouped].tolist(), fresh[grouped].tolist()
    )
    lanes[grouped] = group_lanes
    ends[grouped] = group_ends
    return lanes, ends


def _walk(
    starts: list[float], ends: list[float], fresh: list[bool]
) -> tuple[list[int], list[float]]:
    """The stack walk of :func:`assign_lanes` over plain lists; ``fresh`` restarts the stacks."""
    lanes = [0] * len(starts)
    stacks: list[list[float]] = []  # per lane: the end times of the slices still open
    for i, start in enumerate(starts):
        if fresh[i]:
            stacks = []
        end = ends[i]
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1] + NEST_TOLERANCE_US:
                if stack and end > stack[-1]:
                    end = ends[i] = stack[-1]
                stack.append(end)
                lanes[i] = lane
                break
        else:
            stacks.append([end])
            lanes[i] = len(stacks) - 1
    return lanes, ends
