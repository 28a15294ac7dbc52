"""User annotations (``torch.profiler.record_function`` ranges): their names and durations.

The names a user gave to parts of the step (``## forward ##``, ``nccl:all_reduce``,
``Optimizer.step#SGD.step``, ``enumerate(DataLoader)#...``), excluding the profiler's own
``ProfilerStep#N`` ranges, and for one name the duration of every occurrence, ready for a
histogram. ``on_gpu=True`` reads the same annotations projected on the GPU streams
(``gpu_user_annotation``: from the first to the last kernel launched inside the range).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stepscope.analysis._events import events_connection, rank_clause

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["annotation_durations", "annotation_names"]


def _category(on_gpu: bool) -> str:
    return "gpu_user_annotation" if on_gpu else "user_annotation"


def annotation_names(job: Any, *, rank: int | None = None, on_gpu: bool = False) -> pd.DataFrame:
    """Every annotation name with how often it occurred and its total and mean duration.

    :param job: a JobData, a DuckDB connection with an ``events`` view, or a path.
    :param rank: only this rank; ``None`` for all.
    :param on_gpu: read the GPU-side projections instead of the CPU ranges.
    :returns: columns ``name, count, total_us, avg_us``, largest total first.
    """
    con = events_connection(job)
    frame: pd.DataFrame = con.sql(
        f"""
        SELECT name, count(*) AS count, sum(dur_us) AS total_us, avg(dur_us) AS avg_us
        FROM events
        WHERE ph = 'X' AND category = '{_category(on_gpu)}' AND name NOT LIKE 'ProfilerStep#%'
              {rank_clause(rank)}
        GROUP BY name ORDER BY total_us DESC, name
        """
    ).df()
    return frame


def annotation_durations(
    job: Any, name: str, *, rank: int | None = None, on_gpu: bool = False
) -> pd.DataFrame:
    """Every occurrence of the annotation ``name``: when it started and how long it lasted.

    :param name: the annotation name, exactly as recorded.
    :returns: columns ``rank, step, start_us, dur_us``, in time order per rank.
    """
    con = events_connection(job)
    frame: pd.DataFrame = con.execute(
        f"""
        SELECT rank, step, start_us, dur_us FROM events
        WHERE ph = 'X' AND category = '{_category(on_gpu)}' AND name = ?{rank_clause(rank)}
        ORDER BY rank, start_us
        """,
        [name],
    ).df()
    return frame
