"""``Profiler``: SageMaker Profiler's setting of a job, ``ProfilerConfig(profile_params=...)``.

The SageMaker Python SDK turns SageMaker Profiler on for a job with
``ProfilerConfig(profile_params=Profiler(cpu_profiling_duration=3600))``; the training script
then opens its window with ``smprof`` (:mod:`stepscope.smprof`). The class lives here, with the
other configuration objects, so a job's configuration file can carry it to the script.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from stepscope.errors import ConfigError

__all__ = ["DEFAULT_CPU_PROFILING_DURATION_S", "Profiler"]

#: SageMaker SDK's default ``cpu_profiling_duration``, in seconds
DEFAULT_CPU_PROFILING_DURATION_S = 3600


@dataclass(frozen=True)
class Profiler:
    """SageMaker SDK's ``Profiler``: how long CPU activity is profiled once profiling starts.

    :param cpu_profiling_duration: seconds, an integer >= 1; default 3600.
    """

    cpu_profiling_duration: int = DEFAULT_CPU_PROFILING_DURATION_S

    def __post_init__(self) -> None:
        duration = self.cpu_profiling_duration
        if isinstance(duration, bool) or not isinstance(duration, int) or duration < 1:
            raise ConfigError("Profiler.cpu_profiling_duration", duration, "an integer >= 1")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values keyed by parameter name."""
        return {"cpu_profiling_duration": self.cpu_profiling_duration}

    @classmethod
    def from_dict(cls, data: Any) -> Profiler:
        """The inverse of :meth:`to_dict`; unknown keys raise :class:`ConfigError`."""
        if not isinstance(data, dict):
            raise ConfigError("Profiler", data, "a mapping of parameter names to values")
        names = [field.name for field in fields(cls)]
        unknown = sorted(set(data) - set(names), key=str)
        if unknown:
            raise ConfigError("Profiler key", unknown[0], f"one of {', '.join(names)}")
        return cls(**data)
