"""The sections of the profiling report, in page order: the one table of them.

A section is a :class:`Section` subclass (``title``, ``anchor``, ``render(context)``); the page
shows those whose ``render`` returns HTML.
"""

from __future__ import annotations

from stepscope.report.sections.base import ReportContext, Section
from stepscope.report.sections.framework import FrameworkMetrics
from stepscope.report.sections.kernels import Kernels
from stepscope.report.sections.rules_summary import RulesSummary
from stepscope.report.sections.summary import JobSummary
from stepscope.report.sections.system import SystemUsage
from stepscope.report.sections.training_loop import TrainingLoop

__all__ = ["SECTIONS", "ReportContext", "Section"]

#: The report's sections in page order (SageMaker's profiling report order).
SECTIONS: tuple[type[Section], ...] = (
    JobSummary,
    SystemUsage,
    FrameworkMetrics,
    RulesSummary,
    TrainingLoop,
    Kernels,
)
