"""Collection while the job trains: the system monitor, PyTorch instrumentation and annotations.

Names resolve lazily (table below): training processes import ``stepscope.collect`` submodules
for annotations and hooks, and must not pay for the monitor's imports (psutil, the store).
"""

from __future__ import annotations

from stepscope._lazy import lazy_names

#: public name -> module that defines it
_LAZY: dict[str, str] = {
    "AnnotationHandle": "stepscope.collect.annotations",
    "BOOTSTRAP_DIR": "stepscope.collect.bootstrap",
    "Session": "stepscope.collect.session",
    "annotate": "stepscope.collect.annotations",
    "annotation_begin": "stepscope.collect.annotations",
    "annotation_end": "stepscope.collect.annotations",
    "get_active_session": "stepscope.collect.session",
    "install": "stepscope.collect.bootstrap",
    "profile": "stepscope.collect.explicit",
    "set_mode": "stepscope.collect.explicit",
    "step": "stepscope.collect.explicit",
    "GpuBackend": "stepscope.collect.monitor",
    "MonitorHandle": "stepscope.collect.monitor",
    "NvmlGpuBackend": "stepscope.collect.monitor",
    "ScriptedGpuBackend": "stepscope.collect.monitor",
    "describe_hardware": "stepscope.collect.monitor",
    "start_monitor": "stepscope.collect.monitor",
}

__all__: list[str] = sorted(_LAZY)

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
