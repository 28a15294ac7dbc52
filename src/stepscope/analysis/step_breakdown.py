"""Step time breakdown: each profiled step's wall time split into what filled it, counted once.

The PyTorch profiler TensorBoard plugin's Overview chart, per rank and ``ProfilerStep#N``.

**The step's window** starts at the ``ProfilerStep#N`` range's start on the CPU and ends at the
later of its end and the end of the last GPU work the step launched (GPU work runs behind the
CPU), but never after the next step's start.

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
    sql_list,
)
from stepscope.analysis._intervals import merged_intervals_sql
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


def step_time_breakdown(job_or_path: Any) -> pd.DataFrame:
    """One row per rank and profiled step with its time by category (see the module docstring).

    :param job_or_path: a JobData, a DuckDB connection with an ``events`` view, or a path (a
        Kineto trace, a folder of traces, a job folder).
    :returns: columns ``rank, step, start_us, duration_us`` and then :data:`STEP_CATEGORIES`
        (µs, summing to ``duration_us``); no rows when the trace has no ``ProfilerStep``.
    """
    import pandas as pd

    con = events_connection(job_or_path)
    levels = len(STEP_CATEGORIES) - 1
    lengths = con.sql(
        f"""
        WITH host_steps AS (
            SELECT rank, step_number AS step, min(start_us) AS s0, max(start_us + dur_us) AS s1
            FROM (
                SELECT rank, start_us, dur_us,
                       TRY_CAST(substr(name, 14) AS BIGINT) AS step_number
                FROM events
                WHERE ph = 'X' AND name LIKE 'ProfilerStep#%'
                  AND category IN ('user_annotation', 'cpu_op')
            )
            WHERE step_number IS NOT NULL
            GROUP BY rank, step_number
        ),
        gpu_end AS (
            SELECT rank, step, max(start_us + dur_us) AS g1 FROM events
            WHERE ph = 'X' AND category IN ({sql_list(GPU_WORK_CATEGORIES)}) AND step >= 0
            GROUP BY rank, step
        ),
        windows AS (
            SELECT h.rank, h.step, h.s0 AS w0,
                   least(greatest(h.s1, coalesce(g.g1, h.s1)),
                         coalesce(lead(h.s0) OVER (PARTITION BY h.rank ORDER BY h.s0), 'infinity'))
                       AS w1
            FROM host_steps h LEFT JOIN gpu_end g ON g.rank = h.rank AND g.step = h.step
        ),
        intervals AS (
            SELECT w.rank, w.step, e.priority,
                   greatest(e.start_us, w.w0) AS start_us, least(e.end_us, w.w1) AS end_us
            FROM (
                SELECT rank, start_us, start_us + dur_us AS end_us, {_priority_sql()} AS priority
                FROM events WHERE ph = 'X'
            ) e
            JOIN windows w ON w.rank = e.rank AND e.start_us < w.w1 AND e.end_us > w.w0
            WHERE e.priority IS NOT NULL
        ),
        cumulative AS (
            SELECT i.rank, i.step, l.level AS level, i.start_us, i.end_us
            FROM intervals i JOIN range(1, {levels + 1}) l(level) ON i.priority <= l.level
        ),
        unions AS (
            SELECT rank, step, level, sum(end_us - start_us) AS covered_us
            FROM ({merged_intervals_sql("SELECT * FROM cumulative", ("rank", "step", "level"))})
            GROUP BY rank, step, level
        )
        SELECT w.rank, w.step, w.w0 AS start_us, w.w1 - w.w0 AS duration_us, l.level,
               coalesce(u.covered_us, 0) AS covered_us
        FROM windows w CROSS JOIN range(1, {levels + 1}) l(level)
        LEFT JOIN unions u ON u.rank = w.rank AND u.step = w.step AND u.level = l.level
        ORDER BY w.rank, w.step, l.level
        """
    ).df()
    columns = ["rank", "step", "start_us", "duration_us", *STEP_CATEGORIES]
    if lengths.empty:
        return pd.DataFrame({name: [] for name in columns})
    covered = lengths.pivot_table(
        index=["rank", "step", "start_us", "duration_us"],
        columns="level",
        values="covered_us",
        aggfunc="sum",
        fill_value=0.0,
    )
    # Level n holds the union of categories 1..n, so each category's own time is a difference.
    out = covered.diff(axis=1)
    out[1] = covered[1]
    out = out.rename(columns=dict(enumerate(STEP_CATEGORIES[:-1], start=1)))
    out = out.reset_index()
    out.columns.name = None
    out["other"] = out["duration_us"] - covered[levels].to_numpy()
    out["rank"] = out["rank"].astype(int)
    out["step"] = out["step"].astype(int)
    return out[columns].reset_index(drop=True)
