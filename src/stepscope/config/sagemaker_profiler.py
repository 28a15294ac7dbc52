"""``Profiler``: SageMaker Profiler's setting of a job, ``ProfilerConfig(profile_params=...)``.

The SageMaker Python SDK turns SageMaker Profiler on for a job with
``ProfilerConfig(profile_params=Profiler(cpu_profiling_duration=3600))``; the training script
then opens its window with ``smprof`` (:mod:`stepscope.smprof`). The class lives here, with the
other configuration objects, so a job's configuration file can carry it to the script.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

from stepscope.errors import ConfigError

__all__ = ["DEFAULT_CPU_PROFILING_DURATION_S", "DEFAULT_FILE_ROTATION_INTERVAL_S", "Profiler"]

#: SageMaker SDK's default ``cpu_profiling_duration``, in seconds
DEFAULT_CPU_PROFILING_DURATION_S = 3600
#: SageMaker SDK's default ``file_rotation_interval``, in seconds
DEFAULT_FILE_ROTATION_INTERVAL_S = 600

_DIGITS = re.compile(r"\s*\d+\s*")


@dataclass(frozen=True)
class Profiler:
    """SageMaker SDK's ``Profiler``: how long CPU activity is profiled once profiling starts.

    The SDK types both parameters ``str`` (``Profiler(cpu_profiling_duration="3600")``), so
    their digits as a string are taken too, and kept as the integer they spell.

    :param cpu_profiling_duration: seconds, an integer >= 1; default 3600.
    :param file_rotation_interval: seconds between SageMaker Profiler's trace files, an integer
        >= 1; default 600. Accepted so SageMaker code runs unchanged, and recorded: a stepscope
        window writes one trace.
    """

    cpu_profiling_duration: int = DEFAULT_CPU_PROFILING_DURATION_S
    file_rotation_interval: int = DEFAULT_FILE_ROTATION_INTERVAL_S

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, str) and _DIGITS.fullmatch(value):
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(
                    f"Profiler.{field.name}", value, "an integer >= 1 (or its digits as a string)"
                )
            object.__setattr__(self, field.name, value)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values keyed by parameter name."""
        return {field.name: getattr(self, field.name) for field in fields(self)}

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
