"""Helpers for testing and benchmarking code that reads profiled jobs (a public helper package).

:func:`generate_job` writes a realistic finished job in the SageMaker Debugger layout; the
defaults are the reference 1-hour job, :data:`TINY_JOB` the knobs of a job small enough for unit
tests (``generate_job(path, **TINY_JOB)``).

:class:`TableJob` is a job built by hand in memory (:func:`events_table`, :func:`system_table`,
:func:`event_row`), for tests that assert exact results of analyses and rules, custom rules
included; :func:`connect` opens the ``events`` and ``system`` views over such tables.
"""

from __future__ import annotations

from stepscope.testing.generator import TINY_JOB, generate_job
from stepscope.testing.tables import TableJob, connect, event_row, events_table, system_table

__all__ = [
    "TINY_JOB",
    "TableJob",
    "connect",
    "event_row",
    "events_table",
    "generate_job",
    "system_table",
]
