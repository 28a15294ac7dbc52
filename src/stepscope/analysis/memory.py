"""Device memory over time from the profiler's allocator events (``profile_memory=True``).

Every ``[memory]`` event is one allocation or free (negative ``Bytes``). Since torch 1.10 each
carries the allocator's ``Total Allocated`` and ``Total Reserved`` after the operation; the 2021
format lacks them, and there allocated memory is the running sum of ``Bytes`` from the start of
the trace (so it starts at 0 rather than at what was allocated before profiling) and reserved
memory is unknown (NaN).

A trace holds tens of thousands of such events per step, so the timeline is cut into at most
``max_points`` equal time bins per device and each bin reports its *peak* (not its mean), which
keeps every spike visible at any zoom-out. ``device`` is the CUDA device index, -1 for host
memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stepscope.analysis._events import events_connection, rank_clause
from stepscope.config.validation import check_int, plain_number

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["memory_timeline"]

_TOTAL = "TRY_CAST(json_extract(nullif(args, ''), '$.\"Total {}\"') AS BIGINT)"


def memory_timeline(job: Any, *, rank: int | None = None, max_points: int = 1000) -> pd.DataFrame:
    """Allocated and reserved memory per device over time, downsampled to peaks per time bin.

    :param job: a JobData, a DuckDB connection with an ``events`` view, or a path.
    :param rank: only this rank; ``None`` for all.
    :param max_points: at most this many points per rank and device (>= 1; default 1000).
    :returns: columns ``rank, device, time_us, allocated_bytes, reserved_bytes, events`` (the
        bin's first event time, its peaks, and how many allocator events it holds).
    :raises ConfigError: ``max_points`` is not a positive integer.
    """
    max_points = check_int("memory_timeline.max_points", plain_number(max_points), minimum=1)
    con = events_connection(job, rank=rank)
    frame: pd.DataFrame = con.sql(
        f"""
        WITH m AS (
            SELECT rank, device, start_us, bytes, {_TOTAL.format("Allocated")} AS allocated,
                   {_TOTAL.format("Reserved")} AS reserved
            FROM events
            WHERE category = 'cpu_instant_event' AND name = '[memory]'{rank_clause(rank)}
        ),
        filled AS (
            SELECT rank, device, start_us, reserved,
                   coalesce(allocated, sum(CASE WHEN bytes = -1 THEN 0 ELSE bytes END)
                       OVER (PARTITION BY rank, device ORDER BY start_us
                             ROWS UNBOUNDED PRECEDING)) AS allocated
            FROM m
        ),
        bounds AS (
            SELECT rank, device, min(start_us) AS t0, max(start_us) AS t1 FROM filled
            GROUP BY rank, device
        )
        SELECT f.rank, f.device, min(f.start_us) AS time_us, max(f.allocated) AS allocated_bytes,
               max(f.reserved) AS reserved_bytes, count(*) AS events
        FROM filled f JOIN bounds b ON b.rank = f.rank AND b.device = f.device
        GROUP BY f.rank, f.device,
                 CASE WHEN b.t1 > b.t0
                      THEN least(floor((f.start_us - b.t0) / (b.t1 - b.t0) * {max_points}),
                                 {max_points - 1})
                      ELSE 0 END
        ORDER BY f.rank, f.device, time_us
        """
    ).df()
    return frame
