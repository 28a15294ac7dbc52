"""GPU busy time per device: active vs idle, utilization, estimated SM efficiency, over time.

All of it rests on the *union* of busy intervals on a device (two kernels on two streams at the
same time count once), computed in SQL (:mod:`stepscope.analysis._intervals`):

* :func:`gpu_active_time`: from the device's first to its last kernel, copy or memset, how long
  at least one of them ran (``active_us``) and how long none did (``idle_us``).
* :func:`gpu_utilization`: the PyTorch profiler TensorBoard plugin's Overview figures, per device:
  *GPU utilization* = kernel busy time inside the profiled steps / the steps' wall time;
  *estimated SM efficiency* = Σ over time of min(Σ ``blocks per SM`` of the kernels running, 1)
  / the steps' wall time; *estimated achieved occupancy* = the kernel-duration-weighted mean of
  ``est. achieved occupancy %``. The steps' window runs from the first ``ProfilerStep`` start to
  the last one's end, or to the end of the GPU work launched in the steps when that is later
  (the whole trace when there is no step). Only kernels count, not copies.
* :func:`gpu_utilization_timeline` and :func:`sm_efficiency_timeline`: the same plugin's counter
  tracks. Utilization is averaged in buckets of a power-of-ten µs, as few as gives at most 100
  buckets over the trace (first to last span event; the last bucket absorbs the remainder);
  SM efficiency is a step function with one segment per change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stepscope.analysis._events import (
    GPU_WORK_CATEGORIES,
    events_connection,
    rank_clause,
    sql_list,
)
from stepscope.analysis._intervals import covered_pieces_sql

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "gpu_active_time",
    "gpu_utilization",
    "gpu_utilization_timeline",
    "sm_efficiency_timeline",
]

#: At most this many utilization buckets per device (the TensorBoard plugin's choice).
MAX_BUCKETS = 100

_BLOCKS_PER_SM = "TRY_CAST(json_extract(nullif(args, ''), '$.\"blocks per SM\"') AS DOUBLE)"
_OCCUPANCY = (
    "coalesce(TRY_CAST(json_extract(nullif(args, ''), '$.\"est. achieved occupancy %\"') AS DOUBLE), "
    "TRY_CAST(json_extract(nullif(args, ''), '$.\"theoretical occupancy %\"') AS DOUBLE))"
)


def _kernel_intervals(rank: int | None, categories: tuple[str, ...] = ("kernel",)) -> str:
    return f"""
        SELECT rank, device, start_us, start_us + dur_us AS end_us FROM events
        WHERE ph = 'X' AND category IN ({sql_list(categories)}){rank_clause(rank)}
    """


def _steps_window(rank: int | None) -> str:
    """Per rank: the profiled steps' window, or the span of all span events without steps.

    As the plugin's, the window ends where the last step ends on the GPU when its work runs
    behind the CPU: at the end of the GPU work launched inside a step, if that is later than
    the last ``ProfilerStep`` range (as :mod:`stepscope.analysis.step_breakdown` ends steps).
    """
    return f"""
        SELECT rank,
               coalesce(min(start_us) FILTER (WHERE is_step), min(start_us)) AS window_start,
               CASE WHEN bool_or(is_step)
                    THEN greatest(max(start_us + dur_us) FILTER (WHERE is_step),
                                  max(start_us + dur_us) FILTER (WHERE is_step_work))
                    ELSE max(start_us + dur_us) END AS window_end
        FROM (
            SELECT rank, start_us, dur_us,
                   name LIKE 'ProfilerStep#%' AND category IN ('user_annotation', 'cpu_op')
                       AS is_step,
                   category IN ({sql_list(GPU_WORK_CATEGORIES)}) AND step >= 0 AS is_step_work
            FROM events WHERE ph = 'X'{rank_clause(rank)}
        )
        GROUP BY rank
    """


def _sm_segments(rank: int | None) -> str:
    """Per rank/device: the SM-efficiency step function ``(start_us, end_us, value)``."""
    return f"""
        SELECT rank, device, t AS start_us, next_t AS end_us, least(level, 1.0) AS value
        FROM (
            SELECT rank, device, t,
                   sum(delta) OVER (PARTITION BY rank, device ORDER BY t, delta
                                    ROWS UNBOUNDED PRECEDING) AS level,
                   lead(t) OVER (PARTITION BY rank, device ORDER BY t, delta) AS next_t
            FROM (
                SELECT rank, device, start_us AS t, {_BLOCKS_PER_SM} AS delta FROM events
                WHERE ph = 'X' AND category = 'kernel' AND {_BLOCKS_PER_SM} > 0{rank_clause(rank)}
                UNION ALL
                SELECT rank, device, start_us + dur_us, -{_BLOCKS_PER_SM} FROM events
                WHERE ph = 'X' AND category = 'kernel' AND {_BLOCKS_PER_SM} > 0{rank_clause(rank)}
            )
        )
        WHERE next_t > t AND level > 1e-9
    """


def gpu_active_time(job: Any, *, rank: int | None = None) -> pd.DataFrame:
    """Active and idle time of each GPU, from its first to its last GPU work.

    :param job: a JobData, a DuckDB connection with an ``events`` view, or a path.
    :param rank: only this rank; ``None`` for all.
    :returns: columns ``rank, device, span_us, active_us, idle_us, active_pct``.
    """
    con = events_connection(job, rank=rank)
    # The pieces keep the first start and the last end, so they give the span as well.
    pieces = covered_pieces_sql(_kernel_intervals(rank, GPU_WORK_CATEGORIES), ("rank", "device"))
    frame: pd.DataFrame = con.sql(
        f"""
        SELECT rank, device, max(end_us) - min(start_us) AS span_us,
               sum(end_us - start_us) AS active_us,
               max(end_us) - min(start_us) - sum(end_us - start_us) AS idle_us,
               100.0 * sum(end_us - start_us) / nullif(max(end_us) - min(start_us), 0)
                   AS active_pct
        FROM ({pieces})
        GROUP BY rank, device ORDER BY rank, device
        """
    ).df()
    return frame


def gpu_utilization(job: Any, *, rank: int | None = None) -> pd.DataFrame:
    """GPU utilization, estimated SM efficiency and achieved occupancy per device (see above).

    :param job: a JobData, a DuckDB connection with an ``events`` view, or a path.
    :param rank: only this rank; ``None`` for all.
    :returns: columns ``rank, device, window_us, busy_us, utilization_pct,
        sm_efficiency_pct, achieved_occupancy_pct`` (NaN when kernels lack those args).
    """
    con = events_connection(job, rank=rank)
    pieces = covered_pieces_sql(_kernel_intervals(rank), ("rank", "device"))
    frame: pd.DataFrame = con.sql(
        f"""
        WITH w AS ({_steps_window(rank)}),
        busy AS (
            SELECT i.rank, i.device,
                   sum(greatest(0, least(i.end_us, w.window_end)
                                   - greatest(i.start_us, w.window_start))) AS busy_us
            FROM ({pieces}) i JOIN w ON w.rank = i.rank GROUP BY i.rank, i.device
        ),
        sm AS (
            SELECT s.rank, s.device,
                   sum(s.value * greatest(0, least(s.end_us, w.window_end)
                                             - greatest(s.start_us, w.window_start))) AS weighted
            FROM ({_sm_segments(rank)}) s JOIN w ON w.rank = s.rank GROUP BY s.rank, s.device
        ),
        occupancy AS (
            SELECT k.rank, k.device,
                   sum(o * clipped) / nullif(sum(clipped), 0) AS occupancy_pct
            FROM (
                SELECT e.rank, e.device, {_OCCUPANCY} AS o,
                       greatest(0, least(e.start_us + e.dur_us, w.window_end)
                                   - greatest(e.start_us, w.window_start)) AS clipped
                FROM events e JOIN w ON w.rank = e.rank
                WHERE e.ph = 'X' AND e.category = 'kernel'{rank_clause(rank, column="e.rank")}
            ) k
            WHERE o IS NOT NULL AND o >= 0 GROUP BY k.rank, k.device
        )
        SELECT b.rank, b.device, w.window_end - w.window_start AS window_us, b.busy_us,
               100.0 * b.busy_us / nullif(w.window_end - w.window_start, 0) AS utilization_pct,
               100.0 * sm.weighted / nullif(w.window_end - w.window_start, 0)
                   AS sm_efficiency_pct,
               occupancy.occupancy_pct AS achieved_occupancy_pct
        FROM busy b JOIN w ON w.rank = b.rank
        LEFT JOIN sm ON sm.rank = b.rank AND sm.device = b.device
        LEFT JOIN occupancy ON occupancy.rank = b.rank AND occupancy.device = b.device
        ORDER BY b.rank, b.device
        """
    ).df()
    return frame


def gpu_utilization_timeline(job: Any, *, rank: int | None = None) -> pd.DataFrame:
    """Kernel busy fraction of each GPU per time bucket (see the module docstring).

    :returns: columns ``rank, device, start_us, end_us, utilization`` (0–1), one row per bucket.
    """
    con = events_connection(job, rank=rank)
    kernels = "SELECT rank, device, start_us, end_us FROM spans WHERE category = 'kernel'"
    pieces = covered_pieces_sql(kernels, ("rank", "device"))
    frame: pd.DataFrame = con.sql(
        f"""
        WITH spans AS MATERIALIZED (
            SELECT rank, device, category, start_us, start_us + dur_us AS end_us FROM events
            WHERE ph = 'X'{rank_clause(rank)}
        ),
        pieces AS MATERIALIZED ({pieces}),
        span AS (SELECT rank, min(start_us) AS g0, max(end_us) AS g1 FROM spans GROUP BY rank),
        sized AS (
            SELECT rank, g0, g1,
                   CAST(pow(10, greatest(0, ceil(log10(greatest(g1 - g0, 1) / {MAX_BUCKETS}))))
                        AS DOUBLE) AS size
            FROM span
        ),
        buckets AS (
            SELECT rank, b AS bucket, g0 + b * size AS b0,
                   CASE WHEN b = n - 1 THEN g1 ELSE g0 + (b + 1) * size END AS b1
            FROM (SELECT *, greatest(CAST(floor((g1 - g0) / size) AS BIGINT), 1) AS n FROM sized),
                 LATERAL (SELECT unnest(range(n)) AS b)
        ),
        devices AS (SELECT DISTINCT rank, device FROM pieces)
        SELECT d.rank, d.device, b.b0 AS start_us, b.b1 AS end_us,
               sum(CASE WHEN i.rank IS NULL THEN 0
                        ELSE greatest(0, least(i.end_us, b.b1) - greatest(i.start_us, b.b0)) END)
                   / (b.b1 - b.b0) AS utilization
        FROM devices d JOIN buckets b ON b.rank = d.rank
        LEFT JOIN pieces i ON i.rank = d.rank AND i.device = d.device
             AND i.start_us < b.b1 AND i.end_us > b.b0
        GROUP BY d.rank, d.device, b.bucket, b.b0, b.b1
        ORDER BY d.rank, d.device, b.b0
        """
    ).df()
    return frame


def sm_efficiency_timeline(job: Any, *, rank: int | None = None) -> pd.DataFrame:
    """Estimated SM efficiency of each GPU as a step function (see the module docstring).

    :returns: columns ``rank, device, start_us, end_us, sm_efficiency`` (0–1), one row per
        segment where some kernel with a ``blocks per SM`` arg ran.
    """
    con = events_connection(job, rank=rank)
    frame: pd.DataFrame = con.sql(
        f"""SELECT rank, device, start_us, end_us, value AS sm_efficiency
            FROM ({_sm_segments(rank)}) ORDER BY rank, device, start_us"""
    ).df()
    return frame
