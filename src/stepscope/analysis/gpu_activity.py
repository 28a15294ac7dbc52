"""What the GPUs spent their busy time on: kernels, copies, memsets, syncs, and copy directions.

Two breakdowns of GPU-side events by kind, as Nsight Systems' ``cuda_gpu_sum`` and
``cuda_gpu_mem_time_sum`` / ``cuda_gpu_mem_size_sum`` report them:

* :func:`gpu_activity`: ``kernel`` (category ``kernel``), ``memcpy`` (``gpu_memcpy``), ``memset``
  (``gpu_memset``) and ``sync`` (``cuda_sync``: time a stream or the device waited).
* :func:`memory_operations`: copies by direction, read from the Kineto name
  (``Memcpy HtoD (Pinned -> Device)``): ``HtoD``, ``DtoH``, ``DtoD``, ``HtoH``, ``PtoP`` counts as
  ``DtoD``; memsets; anything else is ``other``. With the bytes moved.

Durations are summed per event (two overlapping kernels count twice); for the union of busy
time see :mod:`stepscope.analysis.gpu_time`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stepscope.analysis._events import events_connection, rank_clause

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["gpu_activity", "memory_operations"]

_ACTIVITY_SQL = """CASE category WHEN 'kernel' THEN 'kernel' WHEN 'gpu_memcpy' THEN 'memcpy'
    WHEN 'gpu_memset' THEN 'memset' ELSE 'sync' END"""

_COPY_KIND_SQL = """CASE
    WHEN category = 'gpu_memset' THEN 'memset'
    WHEN name LIKE '%HtoD%' THEN 'HtoD'
    WHEN name LIKE '%DtoH%' THEN 'DtoH'
    WHEN name LIKE '%DtoD%' OR name LIKE '%PtoP%' THEN 'DtoD'
    WHEN name LIKE '%HtoH%' THEN 'HtoH'
    ELSE 'other' END"""


def gpu_activity(job: Any, *, rank: int | None = None) -> pd.DataFrame:
    """GPU time by activity: kernel, memcpy, memset, sync.

    :param job: a JobData, a DuckDB connection with an ``events`` view, or a path.
    :param rank: only this rank; ``None`` for all ranks together.
    :returns: columns ``activity, count, total_us, pct`` (pct of the summed time), largest first.
    """
    con = events_connection(job, rank=rank)
    frame: pd.DataFrame = con.sql(
        f"""
        SELECT {_ACTIVITY_SQL} AS activity, count(*) AS count, sum(dur_us) AS total_us,
               100.0 * sum(dur_us) / nullif(sum(sum(dur_us)) OVER (), 0) AS pct
        FROM events
        WHERE ph = 'X' AND category IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'cuda_sync')
              {rank_clause(rank)}
        GROUP BY activity ORDER BY total_us DESC, activity
        """
    ).df()
    return frame


def memory_operations(job: Any, *, rank: int | None = None) -> pd.DataFrame:
    """GPU copies and memsets by kind, with their time and bytes.

    :param job: a JobData, a DuckDB connection with an ``events`` view, or a path.
    :param rank: only this rank; ``None`` for all ranks together.
    :returns: columns ``kind, count, total_us, bytes, pct`` (pct of copy + memset time),
        largest time first; ``bytes`` counts only events that report their size.
    """
    con = events_connection(job, rank=rank)
    frame: pd.DataFrame = con.sql(
        f"""
        SELECT {_COPY_KIND_SQL} AS kind, count(*) AS count, sum(dur_us) AS total_us,
               sum(CASE WHEN bytes > 0 THEN bytes ELSE 0 END) AS bytes,
               100.0 * sum(dur_us) / nullif(sum(sum(dur_us)) OVER (), 0) AS pct
        FROM events
        WHERE ph = 'X' AND category IN ('gpu_memcpy', 'gpu_memset'){rank_clause(rank)}
        GROUP BY kind ORDER BY total_us DESC, kind
        """
    ).df()
    return frame
