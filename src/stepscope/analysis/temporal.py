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
from stepscope.analysis.kernel_types import gpu_work_sql, type_overlap_durations

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["temporal_breakdown"]


def temporal_breakdown(job: Any, *, include_last_step: bool = False) -> pd.DataFrame:
    """Idle, compute and non-compute GPU time per rank.

    :param job: a JobData, a DuckDB connection with an ``events`` view, or a path.
    :param include_last_step: keep each rank's last ``ProfilerStep`` (default False, as HTA).
    :returns: columns ``rank, span_us, idle_us, compute_us, non_compute_us, idle_pct,
        compute_pct, non_compute_pct``, one row per rank that has GPU work.
    """
    con = events_connection(job)
    spans: pd.DataFrame = con.sql(
        f"""SELECT rank, max(end_us) - min(start_us) AS span_us
            FROM ({gpu_work_sql(include_last_step=include_last_step)})
            GROUP BY rank ORDER BY rank"""
    ).df()
    masks = type_overlap_durations(con, include_last_step=include_last_step)
    masks["busy"] = masks["dur_us"]
    masks["compute"] = masks["dur_us"].where((masks["mask"].astype(int) & 1) == 1, 0.0)
    per_rank = masks.groupby("rank", as_index=False)[["busy", "compute"]].sum()
    out = spans.merge(per_rank, on="rank", how="left").fillna(0.0)
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
