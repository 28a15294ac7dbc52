"""Kernel launch delays: how long each GPU operation waited between its launch call and its start.

Each kernel, copy and memset is joined to the CUDA runtime or driver call that launched it (same
rank, same ``correlation``). Two delays per operation:

* ``launch_to_start_us``: from the start of the launch call to the start of the GPU work;
* ``call_end_to_start_us``: from the end of the launch call to the start of the GPU work (HTA's
  "launch delay"; large values mean the stream's queue was full or the GPU was busy elsewhere,
  negative values that the GPU started before the call returned).

GPU work without a launch in the trace (launched before profiling started) is left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stepscope.analysis._events import (
    GPU_WORK_CATEGORIES,
    LAUNCH_CATEGORIES,
    events_connection,
    rank_clause,
    sql_list,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["launch_delays"]


def launch_delays(job: Any, *, rank: int | None = None) -> pd.DataFrame:
    """One row per launched GPU operation with its launch call and delays.

    :param job: a JobData, a DuckDB connection with an ``events`` view, or a path.
    :param rank: only this rank; ``None`` for all.
    :returns: columns ``rank, correlation, name, category, launch_name, launch_start_us,
        launch_dur_us, gpu_start_us, gpu_dur_us, launch_to_start_us, call_end_to_start_us``,
        in launch order.
    """
    con = events_connection(job, rank=rank)
    frame: pd.DataFrame = con.sql(
        f"""
        SELECT g.rank, g.correlation, g.name, g.category, l.name AS launch_name,
               l.start_us AS launch_start_us, l.dur_us AS launch_dur_us,
               g.start_us AS gpu_start_us, g.dur_us AS gpu_dur_us,
               g.start_us - l.start_us AS launch_to_start_us,
               g.start_us - (l.start_us + l.dur_us) AS call_end_to_start_us
        FROM events g
        JOIN events l ON l.rank = g.rank AND l.correlation = g.correlation
        WHERE g.ph = 'X' AND g.category IN ({sql_list(GPU_WORK_CATEGORIES)}) AND g.correlation >= 0
          AND l.ph = 'X' AND l.category IN ({sql_list(LAUNCH_CATEGORIES)})
          {rank_clause(rank, column="g.rank")}
        ORDER BY g.rank, l.start_us
        """
    ).df()
    return frame
