"""The end of a job that ``stepscope.profile()`` writes: once every rank of it has stopped.

``stepscope run`` marks its job's end (``training_job_end.ts``) when the command exits. Without
it, each rank marks its own end when its session stops (``framework/ranks/<node_id>.ended``,
holding its rank), and the rank that finds every rank of the world ended writes the job's
marker: a rank done early does not end the job of ranks still training. A session started again
into the folder (a Lightning ``validate()`` after ``fit()``, a notebook cell run again) takes its
rank's mark and the job's marker away first: the job runs again.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from stepscope._atomic import write_atomic
from stepscope.store.layout import job_end_marker_paths, rank_end_path
from stepscope.store.system_writer import write_job_end_marker

if TYPE_CHECKING:
    from stepscope.collect.session import Session

__all__ = ["mark_rank_ended", "mark_rank_running"]

logger = logging.getLogger(__name__)


def mark_rank_running(session: Session) -> None:
    """Before ``session`` starts: the job is running again, this rank with it."""
    output_dir = session.profiler_output_dir
    for path in (rank_end_path(output_dir, session.node_id), *job_end_marker_paths(output_dir)):
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            logger.warning("stepscope: cannot remove %s (%s)", path, exc)


def mark_rank_ended(session: Session) -> None:
    """After ``session`` stopped: mark its rank ended, and the job if every rank has."""
    output_dir = session.profiler_output_dir
    mark = rank_end_path(output_dir, session.node_id)
    try:
        write_atomic(mark, str(session.rank))
        if _ended_ranks(mark.parent).issuperset(range(session.world_size)):
            write_job_end_marker(output_dir)
    except OSError as exc:
        logger.warning("stepscope: cannot mark the end of %s (%s)", output_dir, exc)


def _ended_ranks(folder: Path) -> set[int]:
    ranks = set()
    for path in folder.glob("*.ended"):
        try:
            ranks.add(int(path.read_text()))
        except (OSError, ValueError):
            continue  # being written, or not ours
    return ranks
