"""SageMaker Profiler's Python API (``smprof``) on top of stepscope's detailed profiling.

Scripts written for SageMaker Profiler run with only their import changed
(``import stepscope.smprof as smprof``)::

    SMProf = smprof.SMProfiler.instance()
    config = smprof.Config()
    config.profiler = {"EnableCuda": "1"}
    SMProf.configure(config)
    SMProf.start_profiling()
    ...   # with smprof.annotate("Forward"): ...
    SMProf.stop_profiling()

``start_profiling`` opens a ``torch.profiler`` window now (CPU, and CUDA when ``EnableCuda`` is
``"1"`` and a GPU is there) and ``stop_profiling`` closes it, whatever the configured detailed
range says; annotations inside become ``record_function`` ranges and timeline events. The window
also closes at the first step end after ``cpu_profiling_duration`` seconds (SageMaker SDK's
``Profiler(cpu_profiling_duration=3600)``, default 3600): the script's ``Config`` says, else the
job's ``ProfilerConfig(profile_params=...)``. Under ``stepscope run`` the run's session records
it, started into the run's job folder by ``start_profiling`` when the run's configuration
profiles no framework (SageMaker's launcher config: ``profile_params`` alone); otherwise
``start_profiling`` starts a session of its own (output under ``./stepscope-jobs/``) and
``stop_profiling`` stops it, and a later window goes on in the same job, its steps numbered on.

Global state: the one :class:`SMProfiler` of the process, from :meth:`SMProfiler.instance`;
threads that start or stop it at once take turns.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from stepscope.collect.session import get_active_session
from stepscope.config import Profiler
from stepscope.errors import ConfigError

__all__ = [
    "Config",
    "Profiler",
    "SMProfiler",
    "configure",
    "start_profiling",
    "stop_profiling",
]

logger = logging.getLogger(__name__)


@dataclass
class Config:
    """``smprof.Config``: ``profiler`` holds SageMaker Profiler's string options.

    :param profiler: ``{"EnableCuda": "1"}`` profiles CUDA activity too (when there is a GPU);
        ``"0"`` profiles the CPU only. Default ``{"EnableCuda": "1"}``.
    :param profile_params: a :class:`Profiler` (its ``cpu_profiling_duration``); default None:
        the job's ``ProfilerConfig.profile_params``, else ``Profiler()``.
    """

    profiler: dict[str, Any] = field(default_factory=lambda: {"EnableCuda": "1"})
    profile_params: Profiler | None = None

    @property
    def enable_cuda(self) -> bool:
        if not isinstance(self.profiler, dict):
            raise ConfigError(
                "Config.profiler", self.profiler, 'a dict of options, such as {"EnableCuda": "1"}'
            )
        value = str(self.profiler.get("EnableCuda", "1")).strip().lower()
        if value not in ("0", "1", "true", "false"):
            raise ConfigError("Config.profiler['EnableCuda']", value, '"1", "0", "true" or "false"')
        return value in ("1", "true")


class SMProfiler:
    """The process's SageMaker Profiler: configure, then start and stop profiling."""

    def __init__(self) -> None:
        self.config = Config()
        self._owned: Any = None  # the profile() context this profiler started, if any
        self._stopped: Any = None  # the session of the last such context, once it stopped
        self._detailed: Any = None
        #: held by a start or a stop: two threads starting at once would each start a session
        self._lock = threading.RLock()

    @staticmethod
    def instance() -> SMProfiler:
        """The one profiler of this process."""
        return _instance()

    def configure(self, config: Config | Profiler) -> None:
        """Use ``config`` (a :class:`Config`, or a :class:`Profiler` for its duration only)."""
        if isinstance(config, Profiler):
            config = Config(profile_params=config)
        if not isinstance(config, Config):
            raise ConfigError("SMProfiler.configure.config", config, "an smprof.Config")
        # checked now: at start_profiling, in the training loop, a bad value would stop it
        config.enable_cuda  # noqa: B018
        if config.profile_params is not None and not isinstance(config.profile_params, Profiler):
            raise ConfigError(
                "Config.profile_params", config.profile_params, "an smprof.Profiler or None"
            )
        self.config = config

    def start_profiling(self) -> None:
        """Open the detailed window now (starting a session first if none runs).

        Called again before :meth:`stop_profiling`, it warns and the open window goes on: a
        profiler's slip must not stop the training script.
        """
        with self._lock:
            self._start_profiling()

    def _start_profiling(self) -> None:
        if self._detailed is not None:
            logger.warning(
                "stepscope: SageMaker Profiler is already profiling; start_profiling() does "
                "nothing until stop_profiling() is called"
            )
            return
        session = get_active_session()
        if session is None and os.environ.get("STEPSCOPE_JOB_DIR"):
            from stepscope.collect.explicit import session_of_the_run

            session = session_of_the_run("start_profiling()")
            if session is None:
                return
        if session is None:
            # a later window goes into the same job, its steps numbered on
            from stepscope.collect.explicit import profile, profile_again

            stopped = self._stopped
            self._owned = profile() if stopped is None else profile_again(stopped)
            session = self._owned.__enter__()
        from stepscope.collect.torch.instrumentation import installed, instrument

        instrumentation = installed() or instrument(session)
        self._detailed = instrumentation.detailed_profiler
        self._detailed.start_manual(
            cuda=self.config.enable_cuda,
            max_duration_s=float(_profile_params(self.config, session).cpu_profiling_duration),
        )
        logger.info("stepscope: SageMaker Profiler window started on %s", session.node_id)

    def stop_profiling(self) -> None:
        """Close the detailed window (and the session, if :meth:`start_profiling` started it)."""
        with self._lock:
            detailed, self._detailed = self._detailed, None
            if detailed is not None:
                detailed.stop_manual()
            owned, self._owned = self._owned, None
            if owned is not None:
                self._stopped = get_active_session()
                owned.__exit__(None, None, None)


def _profile_params(config: Config, session: Any) -> Profiler:
    """The script's setting, else the job's (``ProfilerConfig.profile_params``), else the default."""
    return config.profile_params or session.config.profile_params or Profiler()


@functools.cache
def _instance() -> SMProfiler:
    return SMProfiler()


def configure(config: Config | Profiler) -> None:
    """``SMProfiler.instance().configure(config)``."""
    _instance().configure(config)


def start_profiling() -> None:
    """``SMProfiler.instance().start_profiling()``."""
    _instance().start_profiling()


def stop_profiling() -> None:
    """``SMProfiler.instance().stop_profiling()``."""
    _instance().stop_profiling()
