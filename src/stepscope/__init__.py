"""stepscope: a local-first profiler for deep-learning training jobs.

``import stepscope`` is light (training scripts import it for :func:`annotate`): every public name
resolves lazily through the table below, so torch, pandas, duckdb and pyarrow load only when a
name that needs them is used.
"""

from __future__ import annotations

import importlib
from typing import Any

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
    "Job": "stepscope.launch",
    "JobNotFoundError": "stepscope.errors",
    "MissingDependencyError": "stepscope.errors",
    "ProfilerConfig": "stepscope.config",
    "PythonProfiler": "stepscope.config",
    "PythonProfilingConfig": "stepscope.config",
    "RuleError": "stepscope.errors",
    "SMDataParallelProfilingConfig": "stepscope.config",
    "SessionError": "stepscope.errors",
    "StepscopeError": "stepscope.errors",
    "StoreError": "stepscope.errors",
    "UnsupportedFormatError": "stepscope.errors",
    "cProfileTimer": "stepscope.config",
    "launch": "stepscope.launch",
    "open_job": "stepscope.store",
}

__all__ = sorted([*_PUBLIC, "__version__"])


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'stepscope' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
