"""Per-kernel statistics: Nsight Systems' ``cuda_gpu_kern_sum`` table from a Kineto trace.

One row per kernel name with its count and the total, mean, median, min, max and standard
deviation of its durations, and its share of all kernel time. Only the ``top_k`` names are kept;
a final ``others`` row aggregates every other kernel (its statistics are over the individual
kernels it holds), so the shares always sum to 100 %.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from stepscope.analysis._events import events_connection, rank_clause
from stepscope.config.validation import check_int, plain_number
from stepscope.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["OTHERS", "KernelOrder", "kernel_summary"]

#: The name of the row that aggregates the kernels beyond ``top_k``.
OTHERS = "others"

#: Which kernels make the top: most total time, or most launches.
KernelOrder = Literal["total", "count"]

_ORDER_SQL = {"total": "total_us DESC, count DESC", "count": "count DESC, total_us DESC"}


def kernel_summary(
    job: Any, *, top_k: int = 15, order_by: KernelOrder = "total", rank: int | None = None
) -> pd.DataFrame:
    """Kernel statistics by name, the ``top_k`` first and an ``others`` row last.

    :param job: a JobData, a DuckDB connection with an ``events`` view, or a path.
    :param top_k: how many kernel names get their own row (>= 1; default 15).
    :param order_by: ``"total"`` (GPU time, default) or ``"count"`` (launches).
    :param rank: only this rank; ``None`` pools all ranks.
    :returns: columns ``name, count, total_us, avg_us, med_us, min_us, max_us, std_us, pct``;
        ``std_us`` is 0 for a single kernel; no ``others`` row when nothing is left over.
    :raises ConfigError: ``top_k`` is not a positive integer or ``order_by`` is unknown.
    """
    top_k = check_int("kernel_summary.top_k", plain_number(top_k), minimum=1)
    if order_by not in _ORDER_SQL:
        raise ConfigError("kernel_summary.order_by", order_by, "'total' or 'count'")
    con = events_connection(job, rank=rank)
    frame: pd.DataFrame = con.sql(
        f"""
        WITH k AS (
            SELECT name, dur_us FROM events WHERE category = 'kernel' AND ph = 'X'{rank_clause(rank)}
        ),
        ranked AS (
            SELECT name, row_number() OVER (ORDER BY {_ORDER_SQL[order_by]}, name) AS position
            FROM (SELECT name, count(*) AS count, sum(dur_us) AS total_us FROM k GROUP BY name)
        ),
        labelled AS (
            SELECT CASE WHEN r.position <= {top_k} THEN k.name ELSE '{OTHERS}' END AS name,
                   CASE WHEN r.position <= {top_k} THEN r.position ELSE {top_k} + 1 END
                       AS position,
                   k.dur_us
            FROM k JOIN ranked r ON r.name = k.name
        )
        SELECT name, count(*) AS count, sum(dur_us) AS total_us, avg(dur_us) AS avg_us,
               median(dur_us) AS med_us, min(dur_us) AS min_us, max(dur_us) AS max_us,
               coalesce(stddev_samp(dur_us), 0) AS std_us,
               100.0 * sum(dur_us) / nullif(sum(sum(dur_us)) OVER (), 0) AS pct
        FROM labelled GROUP BY name, position ORDER BY position
        """
    ).df()
    return frame
