"""stepscope: a local-first profiler for deep-learning training jobs.

``import stepscope`` is light (training scripts import it for :func:`annotate`): every public name
resolves lazily through the table below, so torch, pandas, duckdb and pyarrow load only when a
name that needs them is used.
"""

from __future__ import annotations

from stepscope._lazy import lazy_names

__version__ = "0.1.0"

#: public name -> module that defines it (the single list of the public API)
_PUBLIC: dict[str, str] = {
    "ConfigError": "stepscope.errors",
    "CorruptFileError": "stepscope.errors",
    "DataloaderProfilingConfig": "stepscope.config",
    "DetailedProfilingConfig": "stepscope.config",
    "DistributedProfilingConfig": "stepscope.config",
    "FrameworkProfile": "stepscope.config",
    "HorovodProfilingConfig": "stepscope.config",
    "Job": "stepscope.launcher",
    "JobNotFoundError": "stepscope.errors",
    "Metrics": "stepscope.analysis.python_profile",
    "MissingDependencyError": "stepscope.errors",
    "PT_dataloader_analysis": "stepscope.analysis.dataloader",
    "PandasFrame": "stepscope.analysis.pandas_frame",
    "PandasFrameAnalysis": "stepscope.analysis.statistics",
    "Profiler": "stepscope.config",
    "ProfilerConfig": "stepscope.config",
    "ProfilerRule": "stepscope.rules",
    "PyinstrumentAnalysis": "stepscope.analysis.python_profile",
    "PythonProfileModes": "stepscope.store.python_stats",
    "PythonProfiler": "stepscope.config",
    "PythonProfilingConfig": "stepscope.config",
    "Resource": "stepscope.analysis.statistics",
    "Rule": "stepscope.rules",
    "RuleError": "stepscope.errors",
    "RuleResult": "stepscope.rules",
    "SMDataParallelProfilingConfig": "stepscope.config",
    "ServeError": "stepscope.errors",
    "SessionError": "stepscope.errors",
    "StatsBy": "stepscope.analysis.statistics",
    "StepPhase": "stepscope.store.python_stats",
    "StepscopeError": "stepscope.errors",
    "StorageAccessError": "stepscope.errors",
    "StoreError": "stepscope.errors",
    "UnsupportedFormatError": "stepscope.errors",
    "annotate": "stepscope.collect.annotations",
    "annotation_begin": "stepscope.collect.annotations",
    "annotation_end": "stepscope.collect.annotations",
    "cProfileAnalysis": "stepscope.analysis.python_profile",
    "cProfileTimer": "stepscope.config",
    "job_statistics": "stepscope.analysis.statistics",
    "launch": "stepscope.launcher",
    "open_job": "stepscope.store",
    "profile": "stepscope.collect.explicit",
    "rule_configs": "stepscope.rules",
    "run_rules": "stepscope.rules",
    "set_mode": "stepscope.collect.explicit",
    "start_rule_engine": "stepscope.rules",
    "step": "stepscope.collect.explicit",
    "step_statistics": "stepscope.analysis.statistics",
    "utilization_statistics": "stepscope.analysis.statistics",
    "write_report": "stepscope.report",
}

__all__ = sorted([*_PUBLIC, "__version__"])

__getattr__, __dir__ = lazy_names(__name__, _PUBLIC)
