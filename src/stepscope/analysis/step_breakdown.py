"""Step time breakdown: each profiled step's wall time split into what filled it, counted once.

The PyTorch profiler TensorBoard plugin's Overview chart, per rank and ``ProfilerStep#N``.

**The step's window**, as the plugin draws it: a step ends at the later of its
``ProfilerStep#N`` range's end on the CPU and the end of the last GPU work it launched (GPU work
runs behind the CPU); the next step starts at the later of that end and its own range's start.
So when the GPU runs a step behind the CPU, each step is its GPU work, not a slice of the host
loop that leaves the whole backlog to the last step. Each range is a step of its own: a rank
profiled twice into one folder (two profilers, a relaunch) numbers its steps from the start
again, and its two step 1s stay two rows.

**Categories, in precedence order.** At each instant of the window the highest category busy
then takes that instant, so the parts add up to the window and nothing is counted twice:

1. ``kernel``: a GPU kernel that is not a collective runs (any stream, any device of the rank);
2. ``memcpy``: a GPU copy runs;
3. ``memset``: a GPU memset runs;
4. ``communication``: a collective kernel (NCCL, RCCL, HCCL) runs, or the CPU is inside a
   collective call (``nccl:*``, ``gloo:*``, ``c10d::*``, ``record_param_comms``);
5. ``runtime``: the CPU is inside a CUDA runtime or driver call (launches, syncs, copies);
6. ``dataloader``: the CPU is inside a data-loader range (``enumerate(DataLoader)#...``);
7. ``cpu_exec``: the CPU runs any other operator, annotation or Python function;
8. ``other``: none of the above (the host is outside every recorded range and the GPU idles).

Collectives rank below copies and above CPU work, as in the plugin; placing collective kernels
below compute kernels means time where both run counts as ``kernel`` (the overlap is the goal).
All durations are µs.
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
from stepscope.analysis.kernel_types import kernel_type_sql

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["STEP_CATEGORIES", "step_time_breakdown"]

#: The categories in precedence order (the breakdown's columns, in µs).
STEP_CATEGORIES: tuple[str, ...] = (
    "kernel",
    "memcpy",
    "memset",
    "communication",
    "runtime",
    "dataloader",
    "cpu_exec",
    "other",
)

_CPU_CATEGORIES = ("cpu_op", "user_annotation", "python_function")
_COLLECTIVE_CPU = (
    "name LIKE 'nccl:%' OR name LIKE 'gloo:%' OR name LIKE 'c10d::%' OR name = 'record_param_comms'"
)


def _priority_sql() -> str:
    """SQL: each event's category index (1-based, see STEP_CATEGORIES) or NULL if none."""
    cpu = sql_list(_CPU_CATEGORIES)
    return f"""CASE
        WHEN category = 'kernel' AND {kernel_type_sql()} = 'COMMUNICATION' THEN 4
        WHEN category = 'kernel' THEN 1
        WHEN category = 'gpu_memcpy' THEN 2
        WHEN category = 'gpu_memset' THEN 3
        WHEN category IN ({cpu}) AND ({_COLLECTIVE_CPU}) THEN 4
        WHEN category IN ({sql_list(LAUNCH_CATEGORIES)}) THEN 5
        WHEN category IN ({cpu}) AND name ILIKE '%dataloader%' THEN 6
        WHEN category IN ({cpu}) AND name NOT LIKE 'ProfilerStep#%' THEN 7
        ELSE NULL END"""


def _ranges_sql(rank: int | None) -> str:
    """SQL: the steps' windows and every range with a category, from one scan of ``events``.

    Columns ``rank, start_us, end_us, level, step``: a window (see the module docstring) has
    ``level`` 0 and its ``step``; a range has its category's 1-based place in
    :data:`STEP_CATEGORIES` and no step. Only ranks with a window keep their ranges.

    :param rank: only this rank; ``None`` for every rank.
    """
    return f"""
        WITH base AS MATERIALIZED (
            SELECT rank, start_us, dur_us,
                   CASE WHEN name LIKE 'ProfilerStep#%' AND category IN ('user_annotation', 'cpu_op')
                        THEN TRY_CAST(substr(name, 14) AS BIGINT) END AS profiler_step,
                   CASE WHEN category IN ({sql_list(GPU_WORK_CATEGORIES)}) AND step >= 0
                        THEN step END AS gpu_step,
                   {_priority_sql()} AS level
            FROM events WHERE ph = 'X'{rank_clause(rank)}
        ),
        host_steps AS (
            SELECT rank, profiler_step AS step, start_us AS s0, start_us + dur_us AS s1,
                   coalesce(lead(start_us) OVER (PARTITION BY rank, profiler_step
                                                 ORDER BY start_us), 'infinity') AS next_same_s0
            FROM base WHERE profiler_step IS NOT NULL
        ),
        gpu_end AS (
            SELECT h.rank, h.s0, max(b.start_us + b.dur_us) AS g1
            FROM host_steps h
            JOIN base b ON b.rank = h.rank AND b.gpu_step = h.step
                       AND b.start_us < h.next_same_s0
            GROUP BY h.rank, h.s0
        ),
        ends AS (
            SELECT h.rank, h.step, h.s0,
                   max(greatest(h.s1, coalesce(g.g1, h.s1)))
                       OVER (PARTITION BY h.rank ORDER BY h.s0 ROWS UNBOUNDED PRECEDING) AS e
            FROM host_steps h LEFT JOIN gpu_end g ON g.rank = h.rank AND g.s0 = h.s0
        ),
        windows AS (
            SELECT rank, step,
                   greatest(s0, coalesce(lag(e) OVER (PARTITION BY rank ORDER BY s0), s0)) AS w0,
                   e AS w1
            FROM ends
        )
        SELECT rank, w0 AS start_us, w1 AS end_us, 0::TINYINT AS level, step FROM windows
        UNION ALL
        SELECT rank, start_us, start_us + dur_us, level::TINYINT, NULL FROM base
        WHERE level IS NOT NULL AND dur_us > 0 AND rank IN (SELECT rank FROM windows)
    """


def step_time_breakdown(job: Any, *, rank: int | None = None) -> pd.DataFrame:
    """One row per rank and profiled step with its time by category (see the module docstring).

    One sweep over every range's start and end, in time order per rank: a range of category
    ``level`` opens with +1 and closes with -1 on that level's running count, step window ``i``
    opens with +i and closes with -i on the window's. Each rank's edges sum to zero, so the
    running sums over all ranks one after the other restart at every rank. Between two edges the
    lowest level with a positive count takes the stretch, credited to the open window. The sweep
    runs as numpy vector passes over the ranges' columns, so a million ranges cost one sort.

    :param job: a JobData, a DuckDB connection with an ``events`` view, or a path (a Kineto
        trace, a folder of traces, a job folder).
    :param rank: only this rank; ``None`` for every rank.
    :returns: columns ``rank, step, start_us, duration_us`` and then :data:`STEP_CATEGORIES`
        (µs, summing to ``duration_us``), in time order per rank; no rows when the trace has no
        ``ProfilerStep``.
    """
    import numpy as np
    import pandas as pd

    con = events_connection(job, rank=rank)
    columns = ["rank", "step", "start_us", "duration_us", *STEP_CATEGORIES]
    ranges = con.sql(_ranges_sql(rank)).fetchnumpy()
    all_rank = np.asarray(ranges["rank"], dtype=np.int64)
    all_level = np.asarray(ranges["level"], dtype=np.int8)
    all_start = np.asarray(ranges["start_us"], dtype=float)
    all_end = np.asarray(ranges["end_us"], dtype=float)
    windows = np.flatnonzero(all_level == 0)
    if not len(windows):
        return pd.DataFrame({name: [] for name in columns})
    windows = windows[np.lexsort((all_start[windows], all_rank[windows]))]
    w_rank, w0, w1 = all_rank[windows], all_start[windows], all_end[windows]
    w_step = np.asarray(ranges["step"])[windows].astype(np.int64)
    # What each row adds when it opens: a range 1, window number i (from 1) i; an empty window
    # never opens.
    opens = np.ones(len(all_rank), dtype=np.int64)
    opens[windows] = np.where(w1 > w0, np.arange(1, len(windows) + 1), 0)
    edge_rank = np.concatenate([all_rank, all_rank])
    t = np.concatenate([all_start, all_end])
    level = np.concatenate([all_level, all_level])
    delta = np.concatenate([opens, -opens])
    order = np.lexsort((t, edge_rank))
    edge_rank, t, level, delta = edge_rank[order], t[order], level[order], delta[order]
    levels = len(STEP_CATEGORIES) - 1
    width = len(STEP_CATEGORIES)
    # Lowest level busy after each edge (levels + 1: none); lower levels overwrite higher ones.
    top = np.full(len(t), levels + 1, dtype=np.int64)
    for busy in range(levels, 0, -1):
        top[np.cumsum(np.where(level == busy, delta, 0)) > 0] = busy
    window = np.cumsum(np.where(level == 0, delta, 0))  # the step window open after each edge
    length = np.zeros(len(t))
    length[:-1] = np.where(edge_rank[1:] == edge_rank[:-1], t[1:] - t[:-1], 0.0)
    inside = (window > 0) & (length > 0)
    per_level = np.bincount(
        (window[inside] - 1) * width + (top[inside] - 1),
        weights=length[inside],
        minlength=len(w_rank) * width,
    ).reshape(len(w_rank), width)[:, :levels]
    out = pd.DataFrame(
        {
            "rank": w_rank.astype(int),
            "step": w_step.astype(int),
            "start_us": w0,
            "duration_us": w1 - w0,
        }
    )
    for index, category in enumerate(STEP_CATEGORIES[:-1]):
        out[category] = per_level[:, index]
    out["other"] = out["duration_us"] - per_level.sum(axis=1)
    return out.sort_values(["rank", "start_us"], ignore_index=True)[columns]
