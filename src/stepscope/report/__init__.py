"""The self-contained HTML profiling report.

Interface to the other stages: :func:`write_report` (used by ``stepscope report``, ``stepscope
run`` at the end of a job, and the live rule engine) and the section table :data:`SECTIONS`.
"""

from __future__ import annotations

from stepscope.report.document import REPORT_NAME, import_dependencies, write_report
from stepscope.report.sections import SECTIONS

__all__ = ["REPORT_NAME", "SECTIONS", "import_dependencies", "write_report"]
