"""``FrameworkProfile``: which framework profiling options are on, and for which steps.

The effective range of each option follows SageMaker's three scenarios (numbered as in its
documentation); the first that applies wins:

3. **Per-option configs given** (``detailed_profiling_config=...`` and so on): only those options
   profile, each on its own range; a global range given as well is ignored (logged at INFO).
2. **A global range given** (``start_step``/``num_steps`` or ``start_unix_time``/``duration``):
   every option profiles that range.
1. **Nothing given**: every option profiles its own default range (detailed step 5, data loader
   step 7, Python steps 9-11 cycling the cProfile timers, Horovod step 13, distributed step 15).

A detailed range of more than :data:`MAX_RECOMMENDED_DETAILED_STEPS` steps logs one warning
when the profile is built, except inside :func:`detailed_range_warned_before`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import InitVar, dataclass, fields
from typing import Any, Literal

from stepscope.config.options import (
    DataloaderProfilingConfig,
    DetailedProfilingConfig,
    HorovodProfilingConfig,
    ProfilingOptionConfig,
    PythonProfilingConfig,
    SMDataParallelProfilingConfig,
)
from stepscope.config.ranges import ProfileRange
from stepscope.config.validation import check_int, check_number, check_path, check_range_fields
from stepscope.errors import ConfigError

__all__ = [
    "DETAILED_STEPS_WARNING",
    "FILE_CLOSE_INTERVAL_DEFAULT_S",
    "FILE_MAX_SIZE_DEFAULT_BYTES",
    "FILE_OPEN_FAIL_THRESHOLD_DEFAULT",
    "MAX_RECOMMENDED_DETAILED_STEPS",
    "OPTIONS",
    "FrameworkProfile",
    "ProfilingOption",
    "detailed_range_warned_before",
    "option_class",
]

logger = logging.getLogger(__name__)

#: an option name as ``range_for`` takes it; "distributed" is "smdataparallel" by another name
ProfilingOption = Literal[
    "detailed", "dataloader", "python", "horovod", "smdataparallel", "distributed"
]

#: option name -> its config class, in SageMaker's order (the single list of options)
_OPTION_CLASSES: dict[str, type[ProfilingOptionConfig]] = {
    cls.option: cls
    for cls in (
        DetailedProfilingConfig,
        DataloaderProfilingConfig,
        PythonProfilingConfig,
        HorovodProfilingConfig,
        SMDataParallelProfilingConfig,
    )
}
#: every option name :meth:`FrameworkProfile.range_for` accepts, besides the alias "distributed"
OPTIONS: tuple[str, ...] = tuple(_OPTION_CLASSES)
_ALIASES = {"distributed": "smdataparallel"}

FILE_MAX_SIZE_DEFAULT_BYTES = 10 * 1024 * 1024
FILE_CLOSE_INTERVAL_DEFAULT_S = 60
FILE_OPEN_FAIL_THRESHOLD_DEFAULT = 50

#: SageMaker's documentation recommends profiling at most about this many steps in detail
MAX_RECOMMENDED_DETAILED_STEPS = 300
DETAILED_STEPS_WARNING = (
    "detailed profiling covers %d steps (steps %d to %d); more than %d detailed steps make large "
    "traces and slow the job down. Lower num_steps of DetailedProfilingConfig (or of the "
    "FrameworkProfile range) to at most %d; that also silences this message."
)


_warn_long_detailed: ContextVar[bool] = ContextVar("_warn_long_detailed", default=True)


@contextmanager
def detailed_range_warned_before() -> Iterator[None]:
    """Build profiles without the long-detailed-range warning: reading back a configuration in
    force (to change it) would otherwise warn again, and tell to lower a range being lowered."""
    token = _warn_long_detailed.set(False)
    try:
        yield
    finally:
        _warn_long_detailed.reset(token)


def _field_name(option: str) -> str:
    return f"{option}_profiling_config"


def option_class(option: ProfilingOption | str) -> type[ProfilingOptionConfig]:
    """The config class of ``option``: one of :data:`OPTIONS` or ``"distributed"``."""
    cls = _OPTION_CLASSES.get(_ALIASES.get(option, option))
    if cls is None:
        allowed = ", ".join(repr(name) for name in (*OPTIONS, *_ALIASES))
        raise ConfigError("profiling option", option, f"one of {allowed}")
    return cls


@dataclass(frozen=True)
class FrameworkProfile:
    """Framework profiling: trace files, and which options profile which steps.

    :param local_path: folder of the profiler output (SageMaker's ``LocalPath``), kept exactly
        as given. Default ``None``: the job folder's ``profiler-output/`` (``stepscope run`` sets
        it). SageMaker's default ``/opt/ml/output/profiler`` is a container path, so we differ.
    :param file_max_size: rotate a trace file once it is larger than this, in bytes; an integer
        >= 1; default 10485760 (10 MiB).
    :param file_close_interval: rotate a trace file once this many seconds have passed since the
        last close; a number > 0; default 60.
    :param file_open_fail_threshold: failed opens of a trace file before the writer gives up and
        logs it; an integer >= 1; default 50.
    :param detailed_profiling_config: a :class:`DetailedProfilingConfig`, or None.
    :param dataloader_profiling_config: a :class:`DataloaderProfilingConfig`, or None.
    :param python_profiling_config: a :class:`PythonProfilingConfig`, or None.
    :param horovod_profiling_config: a :class:`HorovodProfilingConfig`, or None.
    :param smdataparallel_profiling_config: a :class:`SMDataParallelProfilingConfig`, or None.
    :param start_step: global range for every option (scenario 2); see
        :class:`ProfilingOptionConfig` for this and the next three parameters.
    :param num_steps: global range: number of steps.
    :param start_unix_time: global range: start, Unix time in seconds.
    :param duration: global range: length in seconds.
    :param distributed_profiling_config: the same as ``smdataparallel_profiling_config`` under a
        framework-neutral name (a ``DistributedProfilingConfig``); give one of the two.
    """

    local_path: str | None = None
    file_max_size: int = FILE_MAX_SIZE_DEFAULT_BYTES
    file_close_interval: float = FILE_CLOSE_INTERVAL_DEFAULT_S
    file_open_fail_threshold: int = FILE_OPEN_FAIL_THRESHOLD_DEFAULT
    detailed_profiling_config: DetailedProfilingConfig | None = None
    dataloader_profiling_config: DataloaderProfilingConfig | None = None
    python_profiling_config: PythonProfilingConfig | None = None
    horovod_profiling_config: HorovodProfilingConfig | None = None
    smdataparallel_profiling_config: SMDataParallelProfilingConfig | None = None
    start_step: int | None = None
    num_steps: int | None = None
    start_unix_time: float | None = None
    duration: float | None = None
    distributed_profiling_config: InitVar[SMDataParallelProfilingConfig | None] = None

    def __post_init__(
        self, distributed_profiling_config: SMDataParallelProfilingConfig | None
    ) -> None:
        object.__setattr__(
            self, "local_path", check_path("FrameworkProfile.local_path", self.local_path)
        )
        check_int("FrameworkProfile.file_max_size", self.file_max_size, minimum=1)
        check_number("FrameworkProfile.file_close_interval", self.file_close_interval)
        check_int(
            "FrameworkProfile.file_open_fail_threshold", self.file_open_fail_threshold, minimum=1
        )
        if distributed_profiling_config is not None:
            given = self.smdataparallel_profiling_config
            if given is not None and given != distributed_profiling_config:
                raise ConfigError(
                    "FrameworkProfile.distributed_profiling_config",
                    distributed_profiling_config,
                    "None when smdataparallel_profiling_config is given (they are one option)",
                )
            object.__setattr__(
                self, "smdataparallel_profiling_config", distributed_profiling_config
            )
        for option, cls in _OPTION_CLASSES.items():
            value = getattr(self, _field_name(option))
            if value is not None and not isinstance(value, cls):
                raise ConfigError(
                    f"FrameworkProfile.{_field_name(option)}", value, f"a {cls.__name__} or None"
                )
        check_range_fields(
            "FrameworkProfile", self.start_step, self.num_steps, self.start_unix_time, self.duration
        )
        self._log_precedence()

    # -- the effective configuration -----------------------------------------------------------

    @property
    def has_option_configs(self) -> bool:
        """True when at least one ``*_profiling_config`` is given (scenario 3)."""
        return any(getattr(self, _field_name(option)) is not None for option in OPTIONS)

    @property
    def has_global_range(self) -> bool:
        """True when any of ``start_step``, ``num_steps``, ``start_unix_time``, ``duration`` is given."""
        return any(
            value is not None
            for value in (self.start_step, self.num_steps, self.start_unix_time, self.duration)
        )

    def effective_config(self, option: ProfilingOption | str) -> ProfilingOptionConfig | None:
        """The configuration ``option`` runs with, or None when that option is off.

        :param option: one of :data:`OPTIONS` or ``"distributed"`` (= ``"smdataparallel"``).
        """
        cls = option_class(option)
        if self.has_option_configs:
            return getattr(self, _field_name(cls.option))  # type: ignore[no-any-return]
        if self.has_global_range:
            return cls(
                start_step=self.start_step,
                num_steps=self.num_steps,
                start_unix_time=self.start_unix_time,
                duration=self.duration,
            )
        return cls(profile_default_steps=True)

    def range_for(self, option: ProfilingOption | str) -> ProfileRange | None:
        """A fresh :class:`ProfileRange` for ``option``, or None when it is off.

        :param option: see :meth:`effective_config`.
        """
        config = self.effective_config(option)
        return None if config is None else config.profile_range()

    def enabled_options(self) -> tuple[str, ...]:
        """The options that profile at all, in :data:`OPTIONS` order."""
        return tuple(option for option in OPTIONS if self.effective_config(option) is not None)

    def _log_precedence(self) -> None:
        if self.has_option_configs and self.has_global_range:
            ignored = {
                "start_step": self.start_step,
                "num_steps": self.num_steps,
                "start_unix_time": self.start_unix_time,
                "duration": self.duration,
            }
            logger.info(
                "FrameworkProfile: the global range %s is ignored because per-option configs "
                "are given (%s); only those options profile, each on its own range",
                ", ".join(f"{key}={value}" for key, value in ignored.items() if value is not None),
                ", ".join(o for o in OPTIONS if getattr(self, _field_name(o)) is not None),
            )
        detailed = self.effective_config("detailed")
        steps = detailed.num_steps if detailed is not None else None
        if (
            detailed is not None
            and steps is not None
            and steps > MAX_RECOMMENDED_DETAILED_STEPS
            and _warn_long_detailed.get()
        ):
            first = detailed.start_step or 0
            logger.warning(
                DETAILED_STEPS_WARNING,
                steps,
                first,
                first + steps - 1,
                MAX_RECOMMENDED_DETAILED_STEPS,
                MAX_RECOMMENDED_DETAILED_STEPS,
            )

    # -- plain values ----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values keyed by parameter name; option configs as nested dicts."""
        data: dict[str, Any] = {}
        for field in fields(self):
            value = getattr(self, field.name)
            data[field.name] = (
                value.to_dict() if isinstance(value, ProfilingOptionConfig) else value
            )
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FrameworkProfile:
        """The inverse of :meth:`to_dict`; unknown keys raise :class:`ConfigError`."""
        if not isinstance(data, dict):
            raise ConfigError("FrameworkProfile", data, "a mapping of parameter names to values")
        names = [field.name for field in fields(cls)] + ["distributed_profiling_config"]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ConfigError("FrameworkProfile key", unknown[0], f"one of {', '.join(names)}")
        kwargs = dict(data)
        option_classes: list[tuple[str, type[ProfilingOptionConfig]]] = [
            *_OPTION_CLASSES.items(),
            ("distributed", SMDataParallelProfilingConfig),
        ]
        for option, option_cls in option_classes:
            key = _field_name(option)
            if isinstance(kwargs.get(key), dict):
                kwargs[key] = option_cls.from_dict(kwargs[key])
        return cls(**kwargs)
