"""SageMaker Profiler's module names, so its scripts run with only the import changed.

::

    import stepscope.smprof as smprof     # was: import smprof

    SMProf = smprof.SMProfiler.instance()
    config = smprof.Config()
    config.profiler = {"EnableCuda": "1"}
    SMProf.configure(config)
    SMProf.start_profiling()
    with smprof.annotate("Forward"):
        outputs = net(inputs)
    handle = smprof.annotation_begin("Loss")
    loss = criterion(outputs, labels)
    smprof.annotation_end(handle)
    SMProf.stop_profiling()

Re-exports only: the annotations are :mod:`stepscope.collect.annotations` (they import no
torch); ``SMProfiler``, ``Config``, ``Profiler`` and the module-level ``configure``,
``start_profiling`` and ``stop_profiling`` are :mod:`stepscope.collect.torch.smprofiler`,
loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from stepscope.collect.annotations import annotate as annotate
from stepscope.collect.annotations import annotation_begin as annotation_begin
from stepscope.collect.annotations import annotation_end as annotation_end

#: names defined in stepscope.collect.torch.smprofiler, resolved on first use
_LAZY = ("Config", "Profiler", "SMProfiler", "configure", "start_profiling", "stop_profiling")

__all__ = sorted(["annotate", "annotation_begin", "annotation_end", *_LAZY])


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'stepscope.smprof' has no attribute {name!r}")
    return getattr(importlib.import_module("stepscope.collect.torch.smprofiler"), name)


def __dir__() -> list[str]:
    return __all__
