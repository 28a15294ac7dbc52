"""Which events are the job's steps, as SQL conditions the rules share.

A job's steps are its ``Step:ModeKeys.<MODE>`` events; a PyTorch profiler trace marks its steps
with ``ProfilerStep#N`` ranges instead, which count as TRAIN steps. A rank recorded by stepscope
(or SageMaker Debugger) has both when it ran detailed profiling windows: the ranges of its traces
are the same steps again, so they count as steps only on a rank that has no step events.

The conditions read the job's whole ``events`` view, not just a scan window's: a window may hold
a rank's trace and none of its step events.
"""

from __future__ import annotations

__all__ = ["REPEATED_STEP", "STEP_EVENT"]

#: A trace's step range on the CPU (not its GPU mirror, ``gpu_user_annotation``).
_PROFILER_STEP = "(name LIKE 'ProfilerStep#%' AND category <> 'gpu_user_annotation')"

_RANK_HAS_STEP_EVENTS = (
    "((node, rank) IN (SELECT DISTINCT node, rank FROM events "
    "WHERE category LIKE 'Step:ModeKeys.%'))"
)

#: An event that is one of the job's steps.
STEP_EVENT = (
    f"(category LIKE 'Step:ModeKeys.%' OR ({_PROFILER_STEP} AND NOT {_RANK_HAS_STEP_EVENTS}))"
)

#: A trace's step range on a rank whose step events already count that step.
REPEATED_STEP = f"({_PROFILER_STEP} AND {_RANK_HAS_STEP_EVENTS})"
