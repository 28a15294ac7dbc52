"""The on-disk job layout, the raw-file writers and readers, and the columnar cache.

Names resolve lazily: a training process imports the writers (``TimelineWriter``,
``SystemMetricsWriter``) from here, and must not pay for pyarrow and duckdb, which only the
readers and the cache need.
"""

from __future__ import annotations

from stepscope._lazy import lazy_names

#: public name -> module that defines it
_PUBLIC: dict[str, str] = {
    "EVENT_SCHEMA": "stepscope.store.schema",
    "JobData": "stepscope.store.job",
    "KinetoTrace": "stepscope.store.kineto",
    "SYSTEM_SCHEMA": "stepscope.store.schema",
    "SystemMetricsWriter": "stepscope.store.system_writer",
    "SystemRecord": "stepscope.store.system_writer",
    "TraceHead": "stepscope.store.kineto",
    "TimelineWriter": "stepscope.store.timeline_writer",
    "holds_job": "stepscope.store.job",
    "is_kineto_trace": "stepscope.store.kineto",
    "is_unix_time": "stepscope.store.kineto",
    "read_trace_head": "stepscope.store.kineto",
    "open_job": "stepscope.store.job",
    "read_kineto_trace": "stepscope.store.kineto",
    "recover_timeline_files": "stepscope.store.timeline_files",
    "write_job_end_marker": "stepscope.store.system_writer",
}

__all__ = sorted(_PUBLIC)

__getattr__, __dir__ = lazy_names(__name__, _PUBLIC)
