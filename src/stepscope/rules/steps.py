"""Which events are the job's steps: the SQL conditions the rules share.

A job's steps are its ``Step:ModeKeys.<MODE>`` events; a PyTorch profiler trace marks its steps
with ``ProfilerStep#N`` ranges instead, which count as TRAIN steps. A rank recorded by stepscope
(or SageMaker Debugger) has both when it ran detailed profiling windows: the ranges of its traces
are the same steps again, so they count as steps only on a rank that has no step events.

A scan window decides which ranks those are once, from its own events
(:meth:`~stepscope.rules.window.ScanWindow.step_conditions`), rather than every rule reading the
whole job again at every live scan: a window that holds a trace's step ranges holds that rank's
step events too, since a step event ends microseconds after its range, unless the window holds a
single step of that rank.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from stepscope._sql import sql_text

__all__ = ["step_conditions", "step_conditions_of"]

_STEP_EVENT = "category LIKE 'Step:ModeKeys.%'"
#: A trace's step range on the CPU (not its GPU mirror, ``gpu_user_annotation``).
_PROFILER_STEP = "(name LIKE 'ProfilerStep#%' AND category <> 'gpu_user_annotation')"

#: The ranks of a window's events that have step events or trace step ranges, and which.
_CANDIDATES_SQL = (
    f"SELECT DISTINCT node, rank, {_STEP_EVENT} AS is_step_event FROM {{events}} "
    f"WHERE ph = 'X' AND ({_STEP_EVENT} OR {_PROFILER_STEP})"
)


def step_conditions(
    with_step_events: Collection[tuple[str, int]], with_ranges: Collection[tuple[str, int]]
) -> dict[str, str]:
    """``steps`` (an event is one of the job's steps) and ``repeated_steps`` (a trace's range of
    a step that a step event already counts), as SQL conditions on an event.

    :param with_step_events: the (node, rank) pairs that have step events.
    :param with_ranges: the (node, rank) pairs that have trace step ranges.
    """
    repeated = sorted(set(with_ranges) & set(with_step_events))
    if not with_ranges:
        return {"steps": f"({_STEP_EVENT})", "repeated_steps": "FALSE"}
    if not repeated:
        return {"steps": f"({_STEP_EVENT} OR {_PROFILER_STEP})", "repeated_steps": "FALSE"}
    ranks = ", ".join(f"({sql_text(node)}, {int(rank)})" for node, rank in repeated)
    in_repeated = f"(node, rank) IN ({ranks})"
    return {
        "steps": f"({_STEP_EVENT} OR ({_PROFILER_STEP} AND NOT {in_repeated}))",
        "repeated_steps": f"({_PROFILER_STEP} AND {in_repeated})",
    }


def step_conditions_of(con: Any, events: str) -> dict[str, str]:
    """:func:`step_conditions` for the ranks of the events ``events`` (a view or a subquery)
    holds, asked of the DuckDB connection ``con``."""
    ranks = con.execute(_CANDIDATES_SQL.format(events=events)).fetchall()
    return step_conditions(
        [(node, rank) for node, rank, is_step_event in ranks if is_step_event],
        [(node, rank) for node, rank, is_step_event in ranks if not is_step_event],
    )
