"""GPU work by type (computation, communication, memory) and how the types overlap in time.

The types are Holistic Trace Analysis's, so figures can be compared with it:

* **MEMORY**: ``gpu_memcpy`` / ``gpu_memset`` events, and any name starting with ``Memcpy``,
  ``Memset`` or ``dma``;
* **COMMUNICATION**: names starting with ``nccl`` or ``hccl`` or containing ``ncclKernel`` /
  ``ncclDevKernel`` (NCCL and RCCL collectives);
* **COMPUTATION**: every other kernel.

Which GPU work counts, as HTA loads it: kernels, copies and memsets (not ``cuda_sync`` markers
nor ``gpu_user_annotation`` ranges). With ``include_last_step=False`` (HTA's default) a rank's
last ``ProfilerStep`` is dropped, because the profiler often cuts it short: only GPU work whose
launching runtime call started before the last step's start is kept. A rank without
``ProfilerStep`` ranges keeps everything; a rank left with nothing (a trace of one step) is
warned about.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from stepscope.analysis._events import (
    GPU_WORK_CATEGORIES,
    LAUNCH_CATEGORIES,
    events_connection,
    rank_clause,
    sql_list,
)
from stepscope.analysis._intervals import overlap_masks_sql

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "KERNEL_TYPES",
    "gpu_work_sql",
    "kernel_type_breakdown",
    "kernel_type_sql",
    "mask_label",
    "type_overlap_durations",
    "warn_of_ranks_left_empty",
]

logger = logging.getLogger(__name__)

#: The kernel types, in HTA's order (also the order of the bits in an overlap mask).
KERNEL_TYPES: tuple[str, ...] = ("COMPUTATION", "COMMUNICATION", "MEMORY")


def kernel_type_sql(table: str = "") -> str:
    """SQL expression classifying a row of GPU work into one of :data:`KERNEL_TYPES`.

    :param table: the alias of the ``events`` relation in the query, if any (``"g"``).
    """
    prefix = f"{table}." if table else ""
    name, category = f"{prefix}name", f"{prefix}category"
    return f"""CASE
    WHEN {category} IN ('gpu_memcpy', 'gpu_memset') OR {name} LIKE 'Memcpy%'
         OR {name} LIKE 'Memset%' OR {name} LIKE 'dma%' THEN 'MEMORY'
    WHEN lower({name}) LIKE 'nccl%' OR lower({name}) LIKE 'hccl%' OR {name} LIKE '%ncclKernel%'
         OR {name} LIKE '%ncclDevKernel%' THEN 'COMMUNICATION'
    ELSE 'COMPUTATION' END"""


_BIT_SQL = "CASE kernel_type WHEN 'COMPUTATION' THEN 1 WHEN 'COMMUNICATION' THEN 2 ELSE 4 END"


def gpu_work_sql(*, rank: int | None = None, include_last_step: bool = False) -> str:
    """SQL relation of the GPU work the type analyses count (see the module docstring).

    Columns: ``rank, device, stream, name, correlation, kernel_type, bit, start_us, end_us``.

    :param rank: only this rank; ``None`` for all.
    :param include_last_step: keep the work of each rank's last ``ProfilerStep`` (default False,
        as HTA).
    """
    gpu = sql_list(GPU_WORK_CATEGORIES)
    keep = ""
    joins = ""
    if not include_last_step:
        launch = sql_list(LAUNCH_CATEGORIES)
        joins = f"""
        LEFT JOIN (
            SELECT rank, max(start_us) AS last_step_us FROM events
            WHERE ph = 'X' AND name LIKE 'ProfilerStep#%'
              AND category IN ('user_annotation', 'cpu_op'){rank_clause(rank)}
            GROUP BY rank
        ) s ON s.rank = g.rank
        LEFT JOIN (
            SELECT rank, correlation, min(start_us) AS launch_us FROM events
            WHERE category IN ({launch}) AND correlation >= 0{rank_clause(rank)}
            GROUP BY rank, correlation
        ) l ON l.rank = g.rank AND l.correlation = g.correlation
        """
        keep = " AND (s.last_step_us IS NULL OR l.launch_us < s.last_step_us)"
    selected = f"""
        SELECT g.rank, g.device, g.stream, g.name, g.correlation,
               {kernel_type_sql("g")} AS kernel_type,
               g.start_us, g.start_us + g.dur_us AS end_us
        FROM events g {joins}
        WHERE g.category IN ({gpu}) AND g.ph = 'X'{rank_clause(rank, column="g.rank")}{keep}
    """
    return f"SELECT *, {_BIT_SQL} AS bit FROM ({selected})"


def warn_of_ranks_left_empty(
    con: Any, shown: Iterable[int], *, rank: int | None, include_last_step: bool
) -> None:
    """Warn of each rank that has GPU work but none launched before its last ``ProfilerStep``
    (a trace of one step): the last-step filter leaves it nothing, and it would be missing from
    the result without a word.

    :param shown: the ranks of the result; only when a rank with GPU work is not among them is
        the filter run again to tell which were emptied (the result may also lack a rank whose
        work all lasts 0 µs).
    """
    if include_last_step:
        return
    gpu = f"category IN ({sql_list(GPU_WORK_CATEGORIES)}) AND ph = 'X'{rank_clause(rank)}"
    with_work = con.sql(f"SELECT DISTINCT rank FROM events WHERE {gpu}").fetchall()
    if {r for (r,) in with_work} <= {int(r) for r in shown}:
        return
    emptied = con.sql(
        f"""SELECT DISTINCT rank FROM events WHERE {gpu}
            EXCEPT SELECT DISTINCT rank FROM ({gpu_work_sql(rank=rank)})
            ORDER BY rank"""
    ).fetchall()
    for (left_out,) in emptied:
        logger.warning(
            "Rank %d has no GPU work launched before its last ProfilerStep, which is left out "
            "as Holistic Trace Analysis leaves it out (the profiler often cuts it short), so "
            "the rank is missing from the result. Pass include_last_step=True to count that "
            "step.",
            left_out,
        )


def mask_label(mask: int) -> str:
    """HTA's name for a set of overlapping types, e.g. ``COMPUTATION overlapping COMMUNICATION``."""
    return " overlapping ".join(t for i, t in enumerate(KERNEL_TYPES) if mask & (1 << i))


def type_overlap_durations(
    con: Any, *, rank: int | None = None, include_last_step: bool = False
) -> pd.DataFrame:
    """Per rank: busy time of each combination of kernel types (``rank, mask, dur_us``)."""
    work = gpu_work_sql(rank=rank, include_last_step=include_last_step)
    source = f"SELECT rank, bit, start_us, end_us FROM ({work})"
    frame: pd.DataFrame = con.sql(
        overlap_masks_sql(source, ("rank",)) + " ORDER BY rank, mask"
    ).df()
    warn_of_ranks_left_empty(con, frame["rank"], rank=rank, include_last_step=include_last_step)
    return frame


def kernel_type_breakdown(
    job: Any, *, rank: int | None = None, include_last_step: bool = False
) -> pd.DataFrame:
    """Time per kernel type and per overlap of types, summed over ranks (HTA's kernel-type pie).

    :param job: a JobData, a DuckDB connection with an ``events`` view, or a path.
    :param rank: only this rank; ``None`` sums all ranks.
    :param include_last_step: see :func:`gpu_work_sql`.
    :returns: columns ``kernel_type`` (e.g. ``COMMUNICATION``, ``COMPUTATION overlapping
        COMMUNICATION``), ``total_us``, ``pct`` (of the summed time), largest first.
    """
    import pandas as pd

    masks = type_overlap_durations(
        events_connection(job, rank=rank), rank=rank, include_last_step=include_last_step
    )
    if masks.empty:
        return pd.DataFrame({"kernel_type": [], "total_us": [], "pct": []})
    masks["kernel_type"] = masks["mask"].map(lambda m: mask_label(int(m)))
    out = masks.groupby("kernel_type", as_index=False).agg(total_us=("dur_us", "sum"))
    out["pct"] = 100.0 * out["total_us"] / out["total_us"].sum()
    return out.sort_values("total_us", ascending=False, ignore_index=True)
