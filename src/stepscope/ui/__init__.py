"""The Profiler UI: a local web app with job list, dashboard, timeline, information and settings.

Its names resolve lazily, so ``stepscope ui --help`` and the CLI's checks run without the ``ui``
extra (fastapi, uvicorn, plotly), and ``serve`` says which extra to install when it is missing.
"""

from __future__ import annotations

from stepscope._lazy import lazy_names

__all__ = ["create_app", "serve"]

__getattr__, __dir__ = lazy_names(
    __name__, {"create_app": "stepscope.ui.app", "serve": "stepscope.ui.server"}
)
