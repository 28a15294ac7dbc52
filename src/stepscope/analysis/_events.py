"""How the kernel analyses reach an ``events`` view: a JobData, a DuckDB connection or a path.

Every kernel analysis takes ``job``: a :class:`~stepscope.store.JobData` (asked to
``connect()``), a :class:`~stepscope.analysis.PandasFrame` (its ``connection()``), an open DuckDB
connection that already has an ``events`` view in :data:`~stepscope.store.EVENT_SCHEMA`, or a path
(a Kineto trace file, a folder of traces, a job folder) that :func:`stepscope.store.open_job`
opens.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from stepscope.config.validation import plain_number
from stepscope.errors import ConfigError

__all__ = [
    "GPU_WORK_CATEGORIES",
    "LAUNCH_CATEGORIES",
    "events_connection",
    "rank_clause",
    "sql_list",
]

logger = logging.getLogger(__name__)

#: Categories of events that keep a GPU busy (HTA's "GPU kernels": kernels, copies, memsets).
GPU_WORK_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
#: Categories of the CPU calls that launch GPU work (their ``correlation`` is the GPU event's).
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")


def sql_list(values: tuple[str, ...]) -> str:
    """A SQL ``IN`` list of string literals (the values are this package's constants)."""
    return ", ".join(f"'{value}'" for value in values)


def events_connection(job: Any, *, rank: int | None = None) -> Any:  # Any: see the docstring
    """The DuckDB connection with an ``events`` view behind ``job`` (see the module docstring).

    :param rank: the rank the caller selects, if any: one that has no events (a typo, a rank
        whose traces are missing) is warned about, naming the job's ranks, since every
        analysis of it is empty.
    :raises ConfigError: ``rank`` is not an integer >= 0.
    """
    con = _connection(job)
    if rank is not None:
        rank_clause(rank)  # checks it
        rank = plain_number(rank)
        if not con.sql("SELECT 1 FROM events WHERE rank = ? LIMIT 1", params=[rank]).fetchall():
            ranks = con.sql("SELECT DISTINCT rank FROM events ORDER BY rank").fetchall()
            logger.warning(
                "Rank %d has no events in this job, so the analysis of it is empty; the job's "
                "ranks: %s.",
                rank,
                ", ".join(str(r) for (r,) in ranks) or "none",
            )
    return con


def _connection(job: Any) -> Any:  # Any: JobData | PandasFrame | DuckDBPyConnection | path
    if isinstance(job, (str, Path)):
        from stepscope.store import open_job

        return open_job(job).connect()
    from stepscope.analysis.pandas_frame import PandasFrame

    if isinstance(job, PandasFrame):
        return job.connection()
    connect = getattr(job, "connect", None)
    if callable(connect):
        return connect()
    return job


def rank_clause(rank: int | None, *, column: str = "rank") -> str:
    """``AND rank = N`` for a rank filter, or nothing for all ranks.

    :raises ConfigError: ``rank`` is not an integer >= 0.
    """
    if rank is None:
        return ""
    number = plain_number(rank)  # a rank read off a result's column is numpy's
    if isinstance(number, bool) or not isinstance(number, int) or number < 0:
        raise ConfigError("rank", rank, "an integer >= 0 or None (all ranks)")
    return f" AND {column} = {number}"
