"""Helpers for testing and benchmarking code that reads profiled jobs (a public helper package).

:func:`generate_job` writes a realistic finished job in the SageMaker Debugger layout; the
defaults are the reference 1-hour job, :data:`TINY_JOB` the knobs of a job small enough for unit
tests (``generate_job(path, **TINY_JOB)``).
"""

from __future__ import annotations

from stepscope.testing.generator import TINY_JOB, generate_job

__all__ = ["TINY_JOB", "generate_job"]
