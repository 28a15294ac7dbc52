"""HTA's temporal breakdown: per rank, how the GPU window splits into idle, compute, other work.

For each rank the window runs from the start of its first GPU work to the end of its last
(after HTA's last-step filter, see :mod:`stepscope.analysis.kernel_types`). Inside it:

* ``idle_us``: no kernel, copy or memset runs on any stream of the rank;
* ``compute_us``: at least one COMPUTATION kernel runs;
* ``non_compute_us``: only communication or memory work runs (not hidden under compute).

The three add up to ``span_us``. This reproduces ``TraceAnalysis.get_temporal_breakdown()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stepscope.analysis._events import events_connection
from stepscope.analysis._intervals import overlap_masks_sql
from stepscope.analysis.kernel_types import gpu_work_sql, warn_of_ranks_left_empty

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["temporal_breakdown"]


def temporal_breakdown(
    job: Any, *, rank: int | None = None, include_last_step: bool = False
) -> pd.DataFrame:
    """Idle, compute and non-compute GPU time per rank.

    :param job: a JobData, a DuckDB connection with an ``events`` view, or a path.
    :param rank: only this rank; ``None`` for every rank.
    :param include_last_step: keep each rank's last ``ProfilerStep`` (default False, as HTA).
    :returns: columns ``rank, span_us, idle_us, compute_us, non_compute_us, idle_pct,
        compute_pct, non_compute_pct``, one row per rank that has GPU work.
    """
    con = events_connection(job, rank=rank)
    work = gpu_work_sql(rank=rank, include_last_step=include_last_step)
    masks = overlap_masks_sql("SELECT rank, bit, start_us, end_us FROM work", ("rank",))
    # one pass over the GPU work: its span per rank and the busy time of each overlap of types
    out: pd.DataFrame = con.sql(
        f"""WITH work AS MATERIALIZED ({work}),
                spans AS (
                    SELECT rank, max(end_us) - min(start_us) AS span_us FROM work GROUP BY rank
                ),
                masks AS ({masks})
            SELECT s.rank, s.span_us,
                   coalesce(sum(m.dur_us), 0) AS busy,
                   coalesce(sum(m.dur_us) FILTER (WHERE m.mask & 1 = 1), 0) AS compute
            FROM spans s LEFT JOIN masks m ON m.rank = s.rank
            GROUP BY s.rank, s.span_us ORDER BY s.rank"""
    ).df()
    warn_of_ranks_left_empty(con, out["rank"], rank=rank, include_last_step=include_last_step)
    out["idle_us"] = out["span_us"] - out["busy"]
    out["compute_us"] = out["compute"]
    out["non_compute_us"] = out["busy"] - out["compute"]
    for part in ("idle", "compute", "non_compute"):
        out[f"{part}_pct"] = 100.0 * out[f"{part}_us"] / out["span_us"].where(out["span_us"] > 0)
    out["rank"] = out["rank"].astype(int)
    return out[
        [
            "rank",
            "span_us",
            "idle_us",
            "compute_us",
            "non_compute_us",
            "idle_pct",
            "compute_pct",
            "non_compute_pct",
        ]
    ]
