"""Communication/computation overlap per rank: how much collective time compute kernels hide.

HTA's definition (``get_comm_comp_overlap``): merge each rank's COMPUTATION kernels into busy
intervals, do the same for its COMMUNICATION kernels, and divide the time both are busy by the
time communication is busy. 100 % means every collective ran under compute; a low figure means
the GPUs wait on the network. Kernel types and the last-step filter are those of
:mod:`stepscope.analysis.kernel_types`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stepscope.analysis._events import events_connection
from stepscope.analysis.kernel_types import type_overlap_durations

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["comm_compute_overlap"]

_COMPUTE_BIT = 1
_COMM_BIT = 2


def comm_compute_overlap(
    job: Any, *, rank: int | None = None, include_last_step: bool = False
) -> pd.DataFrame:
    """Share of each rank's communication time that overlaps computation.

    :param job: a JobData, a DuckDB connection with an ``events`` view, or a path.
    :param rank: only this rank; ``None`` for every rank.
    :param include_last_step: keep each rank's last ``ProfilerStep`` (default False, as HTA).
    :returns: columns ``rank, comm_us, overlap_us, overlap_pct`` (``overlap_pct`` is NaN for a
        rank without communication), one row per rank with GPU work.
    """
    masks = type_overlap_durations(
        events_connection(job, rank=rank), rank=rank, include_last_step=include_last_step
    )
    mask = masks["mask"].astype(int)
    masks["comm"] = masks["dur_us"].where((mask & _COMM_BIT) != 0, 0.0)
    masks["overlap"] = masks["dur_us"].where(
        ((mask & _COMM_BIT) != 0) & ((mask & _COMPUTE_BIT) != 0), 0.0
    )
    out = masks.groupby("rank", as_index=False)[["comm", "overlap"]].sum()
    out = out.rename(columns={"comm": "comm_us", "overlap": "overlap_us"})
    out["overlap_pct"] = 100.0 * out["overlap_us"] / out["comm_us"].where(out["comm_us"] > 0)
    out["rank"] = out["rank"].astype(int)
    return out[["rank", "comm_us", "overlap_us", "overlap_pct"]]
