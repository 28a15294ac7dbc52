"""The on-disk job layout, the raw-file writers and readers, and the columnar cache."""

from __future__ import annotations

from stepscope.store.job import JobData, open_job
from stepscope.store.kineto import KinetoTrace, is_kineto_trace, read_kineto_trace
from stepscope.store.schema import EVENT_SCHEMA, SYSTEM_SCHEMA
from stepscope.store.system_writer import SystemMetricsWriter, SystemRecord, write_job_end_marker
from stepscope.store.timeline_writer import TimelineWriter, recover_timeline_files

__all__ = [
    "EVENT_SCHEMA",
    "JobData",
    "KinetoTrace",
    "SYSTEM_SCHEMA",
    "SystemMetricsWriter",
    "SystemRecord",
    "TimelineWriter",
    "is_kineto_trace",
    "open_job",
    "read_kineto_trace",
    "recover_timeline_files",
    "write_job_end_marker",
]
