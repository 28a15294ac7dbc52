"""User annotations: their names, and for one name the duration of every occurrence.

Two kinds of spans are annotations: those ``stepscope.annotate`` (and ``smprof``) write to the
job's timeline (category ``Annotation``), and the ``torch.profiler.record_function`` ranges of a
PyTorch profiler trace (``user_annotation``: ``## forward ##``, ``nccl:all_reduce``,
``Optimizer.step#SGD.step``, ``enumerate(DataLoader)#...``), without the profiler's own
``ProfilerStep#N`` ranges. Inside a detailed-profiling window a stepscope annotation is both (it
also opens a ``record_function`` range): on a rank that has a name as a timeline annotation,
the trace's ranges of that name repeat it and are left out, so each occurrence counts once.
``on_gpu=True`` reads the annotations projected on the GPU streams instead
(``gpu_user_annotation``: from the first to the last kernel launched inside the range).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from stepscope.analysis._events import events_connection, rank_clause

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["annotation_durations", "annotation_names"]

logger = logging.getLogger(__name__)

#: The phase of ``stepscope.annotate``'s spans (``stepscope.collect.events.ANNOTATION_PHASE``).
_TIMELINE = "Annotation"
#: The annotation names a warning about a name that matched nothing lists at most.
_NAMES_SHOWN = 20


def _annotations_sql(on_gpu: bool, where: str) -> str:
    """A query of the annotations (``node, rank, name, step, start_us, dur_us``) that meet
    ``where``: each occurrence once (see the module docstring)."""
    columns = "node, rank, name, step, start_us, dur_us"
    if on_gpu:
        return (
            f"SELECT {columns} FROM events "
            f"WHERE ph = 'X' AND category = 'gpu_user_annotation' AND {where}"
        )
    return f"""
        WITH spans AS (
            SELECT category, {columns} FROM events
            WHERE ph = 'X' AND category IN ('{_TIMELINE}', 'user_annotation')
              AND name NOT LIKE 'ProfilerStep#%' AND {where}
        ), timeline AS (SELECT DISTINCT node, rank, name FROM spans WHERE category = '{_TIMELINE}')
        SELECT {columns} FROM spans WHERE category = '{_TIMELINE}'
        UNION ALL
        SELECT {columns} FROM (SELECT * FROM spans WHERE category = 'user_annotation')
        ANTI JOIN timeline USING (node, rank, name)
        """


def annotation_names(job: Any, *, rank: int | None = None, on_gpu: bool = False) -> pd.DataFrame:
    """Every annotation name with how often it occurred and its total and mean duration.

    :param job: a JobData, a DuckDB connection with an ``events`` view, or a path.
    :param rank: only this rank; ``None`` for all.
    :param on_gpu: read the GPU-side projections instead of the CPU ranges.
    :returns: columns ``name, count, total_us, avg_us``, largest total first.
    """
    con = events_connection(job, rank=rank)
    frame: pd.DataFrame = con.sql(
        f"""
        SELECT name, count(*) AS count, sum(dur_us) AS total_us, avg(dur_us) AS avg_us
        FROM ({_annotations_sql(on_gpu, "TRUE" + rank_clause(rank))})
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
    con = events_connection(job, rank=rank)
    frame: pd.DataFrame = con.execute(
        f"""
        SELECT rank, step, start_us, dur_us
        FROM ({_annotations_sql(on_gpu, "name = $name" + rank_clause(rank))})
        ORDER BY rank, start_us
        """,
        {"name": name},
    ).df()
    if frame.empty:
        _say_which_names_there_are(con, name, rank, on_gpu)
    return frame


def _say_which_names_there_are(con: Any, name: str, rank: int | None, on_gpu: bool) -> None:
    """Warn that no annotation is named ``name``, naming those there are: names match exactly,
    so a misspelt one (or one of the CPU side asked on the GPU's) would read as never run."""
    names = [
        found
        for (found,) in con.sql(
            f"SELECT DISTINCT name FROM ({_annotations_sql(on_gpu, 'TRUE' + rank_clause(rank))}) "
            "ORDER BY name"
        ).fetchall()
    ]
    shown = ", ".join(repr(found) for found in names[:_NAMES_SHOWN])
    logger.warning(
        "No %sannotation is named %r%s; the names there are: %s.",
        "GPU-side " if on_gpu else "",
        name,
        "" if rank is None else f" on rank {rank}",
        (shown + (f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else ""))
        or "none",
    )
