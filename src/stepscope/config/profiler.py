"""``ProfilerConfig``: the whole profiler configuration of a job, and where a process finds it."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepscope.config.framework import FrameworkProfile, ProfilingOption
from stepscope.config.ranges import ProfileRange
from stepscope.config.sagemaker_format import from_sagemaker_dict, is_sagemaker_shape
from stepscope.config.sagemaker_profiler import Profiler
from stepscope.config.serialization import read_config_file, write_config_file
from stepscope.config.validation import check_bool, check_choice
from stepscope.errors import ConfigError

__all__ = [
    "CONFIG_ENV_VAR",
    "SAGEMAKER_CONFIG_ENV_VAR",
    "SYSTEM_MONITOR_INTERVALS_MS",
    "ProfilerConfig",
]

logger = logging.getLogger(__name__)

#: the environment variable naming the configuration file a launched process reads
CONFIG_ENV_VAR = "STEPSCOPE_CONFIG"
#: SageMaker Debugger's variable, honoured when ``STEPSCOPE_CONFIG`` is not set (ported code)
SAGEMAKER_CONFIG_ENV_VAR = "SMPROFILER_CONFIG_PATH"
#: the system-metrics intervals SageMaker offers, in milliseconds
SYSTEM_MONITOR_INTERVALS_MS = (100, 200, 500, 1000, 5000, 60000)
SYSTEM_MONITOR_INTERVAL_DEFAULT_MS = 500

_KEYS = (
    "s3_output_path",
    "system_monitor_interval_millis",
    "framework_profile_params",
    "disable_profiler",
    "profile_params",
)


@dataclass(frozen=True)
class ProfilerConfig:
    """What to profile: system metrics always (unless disabled), framework metrics if configured.

    :param s3_output_path: SageMaker's S3 destination, accepted so SageMaker code ports
        unchanged and recorded in ``job.json``; stepscope writes locally (see
        :class:`FrameworkProfile` ``local_path``). Default None.
    :param system_monitor_interval_millis: system-metrics sampling interval in milliseconds; one
        of 100, 200, 500, 1000, 5000, 60000; default 500 (None also means 500).
    :param framework_profile_params: a :class:`FrameworkProfile`; default None, which means
        system monitoring only, as on SageMaker. Pass ``FrameworkProfile()`` for SageMaker's
        default framework profiling.
    :param disable_profiler: True turns everything off, system monitoring included; default False.
    :param profile_params: SageMaker Profiler's setting, a :class:`Profiler`: how long a window
        that the training script opens with ``smprof`` (:mod:`stepscope.smprof`) may last.
        Default None: ``Profiler()``'s 3600 seconds, unless the script configures its own.
    """

    s3_output_path: str | None = None
    system_monitor_interval_millis: int = SYSTEM_MONITOR_INTERVAL_DEFAULT_MS
    framework_profile_params: FrameworkProfile | None = None
    disable_profiler: bool = False
    profile_params: Profiler | None = None

    def __post_init__(self) -> None:
        if self.s3_output_path is not None and not isinstance(self.s3_output_path, str):
            raise ConfigError(
                "ProfilerConfig.s3_output_path", self.s3_output_path, "a string or None"
            )
        if self.system_monitor_interval_millis is None:
            object.__setattr__(
                self, "system_monitor_interval_millis", SYSTEM_MONITOR_INTERVAL_DEFAULT_MS
            )
        check_choice(
            "ProfilerConfig.system_monitor_interval_millis",
            self.system_monitor_interval_millis,
            SYSTEM_MONITOR_INTERVALS_MS,
        )
        if self.framework_profile_params is not None and not isinstance(
            self.framework_profile_params, FrameworkProfile
        ):
            raise ConfigError(
                "ProfilerConfig.framework_profile_params",
                self.framework_profile_params,
                "a FrameworkProfile or None",
            )
        check_bool("ProfilerConfig.disable_profiler", self.disable_profiler)
        if self.profile_params is not None and not isinstance(self.profile_params, Profiler):
            raise ConfigError(
                "ProfilerConfig.profile_params", self.profile_params, "a Profiler or None"
            )

    # -- what is on ------------------------------------------------------------------------------

    @property
    def system_monitoring_enabled(self) -> bool:
        """True unless ``disable_profiler``."""
        return not self.disable_profiler

    @property
    def framework_profiling_enabled(self) -> bool:
        """True when a :class:`FrameworkProfile` is given and the profiler is not disabled."""
        return not self.disable_profiler and self.framework_profile_params is not None

    def range_for(self, option: ProfilingOption | str) -> ProfileRange | None:
        """:meth:`FrameworkProfile.range_for`, or None when framework profiling is off."""
        framework = self.framework_profile_params
        if self.disable_profiler or framework is None:
            return None
        return framework.range_for(option)

    # -- plain values and files ------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values keyed by parameter name (the form ``job.json`` stores)."""
        framework = self.framework_profile_params
        return {
            "s3_output_path": self.s3_output_path,
            "system_monitor_interval_millis": self.system_monitor_interval_millis,
            "framework_profile_params": None if framework is None else framework.to_dict(),
            "disable_profiler": self.disable_profiler,
            "profile_params": None
            if self.profile_params is None
            else self.profile_params.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProfilerConfig:
        """The inverse of :meth:`to_dict`; also reads SageMaker's ``profilerconfig.json`` shape.

        Unknown keys of stepscope's own shape raise :class:`ConfigError` (they are typos).
        """
        if not isinstance(data, Mapping):
            raise ConfigError("ProfilerConfig", data, "a mapping of parameter names to values")
        values = dict(data)
        keys: dict[str, str] = {}  # a SageMaker file's keys, by our parameters
        if is_sagemaker_shape(values):
            values, keys = from_sagemaker_dict(values)
        try:
            return cls._from_own_dict(values)
        except ConfigError as exc:
            if exc.parameter not in keys:
                raise
            raise exc.renamed(keys) from None

    @classmethod
    def _from_own_dict(cls, values: dict[str, Any]) -> ProfilerConfig:
        """The configuration of a dict in stepscope's own shape."""
        unknown = sorted(set(values) - set(_KEYS), key=str)
        if unknown:
            raise ConfigError("ProfilerConfig key", unknown[0], f"one of {', '.join(_KEYS)}")
        framework = values.get("framework_profile_params")
        if isinstance(framework, Mapping):
            values["framework_profile_params"] = FrameworkProfile.from_dict(dict(framework))
        profile_params = values.get("profile_params")
        if isinstance(profile_params, Mapping):
            values["profile_params"] = Profiler.from_dict(dict(profile_params))
        return cls(**values)

    def to_file(self, path: str | os.PathLike[str]) -> Path:
        """Write this configuration to ``path`` (``.json``, ``.yaml`` or ``.yml``), atomically."""
        write_config_file(path, self.to_dict())
        return Path(path)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> ProfilerConfig:
        """Read a configuration written by :meth:`to_file`, or SageMaker's ``profilerconfig.json``.

        An invalid value's error names the file (``NumSteps in profilerconfig.json must be``).
        """
        data = read_config_file(path)
        try:
            return cls.from_dict(data)
        except ConfigError as exc:
            raise exc.naming(f"{exc.parameter} in {os.fspath(path)}") from None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ProfilerConfig | None:
        """The configuration named by ``STEPSCOPE_CONFIG`` (else ``SMPROFILER_CONFIG_PATH``).

        Returns None when neither variable is set, or (with one warning) when the file it names
        does not exist; an invalid file raises :class:`ConfigError`.

        :param environ: the environment to read; default ``os.environ``.
        """
        env = os.environ if environ is None else environ
        variable = next(
            (name for name in (CONFIG_ENV_VAR, SAGEMAKER_CONFIG_ENV_VAR) if env.get(name)), None
        )
        if variable is None:
            return None
        path = Path(env[variable])
        if not path.is_file():
            logger.warning(
                "%s names %s, which does not exist: profiling is off for this process",
                variable,
                path,
            )
            return None
        return cls.from_file(path)
