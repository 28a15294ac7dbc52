"""The five framework profiling options (SageMaker's metrics configs) and the Python profiler enums.

Each option says *when* it profiles, as a step range or a time range, with SageMaker's defaults:

=============================== ========== ============ =========================================
class                           start_step num_steps    records
=============================== ========== ============ =========================================
``DetailedProfilingConfig``     5          1            kernel-level traces (``torch.profiler``)
``DataloaderProfilingConfig``   7          1            data-loader events matching ``metrics_regex``
``PythonProfilingConfig``       9          3            cProfile or pyinstrument statistics
``HorovodProfilingConfig``      13         1            the Horovod timeline
``SMDataParallelProfilingConfig`` 15       1            the distributed (collectives) timeline
=============================== ========== ============ =========================================

``DistributedProfilingConfig`` is ``SMDataParallelProfilingConfig`` under a framework-neutral
name: on stepscope it times the ``torch.distributed`` collectives timeline.

The range parameters are documented once, on :class:`ProfilingOptionConfig`.
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass, fields
from enum import Enum
from typing import Any, ClassVar

from stepscope.config.ranges import ProfileRange
from stepscope.config.validation import (
    check_bool,
    check_enum,
    check_range_fields,
    check_regex,
    member_by_folded_name,
)
from stepscope.errors import ConfigError

__all__ = [
    "DataloaderProfilingConfig",
    "DetailedProfilingConfig",
    "DistributedProfilingConfig",
    "HorovodProfilingConfig",
    "ProfilingOptionConfig",
    "PythonProfiler",
    "PythonProfilingConfig",
    "SMDataParallelProfilingConfig",
    "cProfileTimer",
]


class PythonProfiler(Enum):
    """The Python profiler that :class:`PythonProfilingConfig` runs.

    ``PythonProfiler("cProfile")`` and ``PythonProfiler("Pyinstrument")`` work too: names and
    values are matched without regard to case.
    """

    CPROFILE = "cprofile"
    PYINSTRUMENT = "pyinstrument"

    @classmethod
    def _missing_(cls, value: object) -> PythonProfiler | None:
        return member_by_folded_name(cls, value)


class cProfileTimer(Enum):
    """The clock cProfile measures with (SageMaker's lower-case class name, kept for ported code).

    ``DEFAULT`` cycles through the three timers on consecutive profiled steps (steps 9, 10 and 11
    with the default range use total, CPU and off-CPU time), as SageMaker Debugger does.
    """

    TOTAL_TIME = "total_time"
    CPU_TIME = "cpu_time"
    OFF_CPU_TIME = "off_cpu_time"
    DEFAULT = "default"

    @classmethod
    def _missing_(cls, value: object) -> cProfileTimer | None:
        return member_by_folded_name(cls, value)


@dataclass(frozen=True)
class ProfilingOptionConfig:
    """When one framework profiling option records: a step range or a time range, not both.

    With no range at all, the option's own default steps apply (see the module table).

    :param start_step: first step to profile; an integer >= 0 (0 is the first step). Default:
        the option's default step, or 0 when only ``num_steps`` is given.
    :param num_steps: how many consecutive steps to profile; an integer >= 1. Default: the
        option's default count, or 1 when only ``start_step`` is given.
    :param start_unix_time: when to start profiling, in seconds since the Unix epoch; default:
        when the job first reaches the check (only with a time range).
    :param duration: how long to profile from ``start_unix_time``, in seconds, > 0. Without it a
        time range profiles exactly one step.
    :param profile_default_steps: use the option's default range; SageMaker's switch, which may
        not be combined with a range. On :class:`PythonProfilingConfig` it also selects
        ``cProfileTimer.DEFAULT``.
    """

    start_step: int | None = None
    num_steps: int | None = None
    start_unix_time: float | None = None
    duration: float | None = None
    profile_default_steps: InitVar[bool] = False

    #: the option's name in :data:`stepscope.config.OPTIONS` and ``range_for``
    option: ClassVar[str]
    #: the key of this option in SageMaker's ``ProfilingParameters``
    sagemaker_key: ClassVar[str]
    default_start_step: ClassVar[int]
    default_num_steps: ClassVar[int] = 1

    def __post_init__(self, profile_default_steps: bool) -> None:
        owner = type(self).__name__
        check_bool(f"{owner}.profile_default_steps", profile_default_steps)
        check_range_fields(
            owner, self.start_step, self.num_steps, self.start_unix_time, self.duration
        )
        given = {
            name: value
            for name in ("start_step", "num_steps", "start_unix_time", "duration")
            if (value := getattr(self, name)) is not None
        }
        if profile_default_steps and given:
            raise ConfigError(
                owner,
                {"profile_default_steps": True, **given},
                "either profile_default_steps or a step or time range (start_step, num_steps, "
                "start_unix_time, duration), not both",
            )
        if not given:
            object.__setattr__(self, "start_step", self.default_start_step)
            object.__setattr__(self, "num_steps", self.default_num_steps)
        elif self.start_step is not None or self.num_steps is not None:
            if self.start_step is None:
                object.__setattr__(self, "start_step", 0)
            if self.num_steps is None:
                object.__setattr__(self, "num_steps", 1)

    def profile_range(self) -> ProfileRange:
        """A fresh :class:`ProfileRange` for this option (see its note on state)."""
        return ProfileRange(
            start_step=self.start_step,
            num_steps=self.num_steps,
            start_unix_time=self.start_unix_time,
            duration=self.duration,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values, keyed by parameter name; enums become their values."""
        return {
            field.name: (value.value if isinstance(value, Enum) else value)
            for field in fields(self)
            for value in [getattr(self, field.name)]
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProfilingOptionConfig:
        """The inverse of :meth:`to_dict`; unknown keys raise :class:`ConfigError`."""
        if not isinstance(data, dict):
            raise ConfigError(cls.__name__, data, "a mapping of parameter names to values")
        names = [field.name for field in fields(cls)] + ["profile_default_steps"]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ConfigError(f"{cls.__name__} key", unknown[0], f"one of {', '.join(names)}")
        return cls(**data)


@dataclass(frozen=True)
class DetailedProfilingConfig(ProfilingOptionConfig):
    """Kernel-level traces of the chosen steps through ``torch.profiler`` (default: step 5).

    Detailed traces are large and slow each profiled step; profile a few steps (at most about
    300). Parameters: see :class:`ProfilingOptionConfig`.
    """

    option: ClassVar[str] = "detailed"
    sagemaker_key: ClassVar[str] = "DetailedProfilingConfig"
    default_start_step: ClassVar[int] = 5


@dataclass(frozen=True)
class DataloaderProfilingConfig(ProfilingOptionConfig):
    """Data-loader events (iterator init, workers, ``GetNext``) of the chosen steps (default: 7).

    :param metrics_regex: only events whose name matches this regular expression are recorded;
        default ``".*"`` (all). Range parameters: see :class:`ProfilingOptionConfig`.
    """

    metrics_regex: str = ".*"

    option: ClassVar[str] = "dataloader"
    sagemaker_key: ClassVar[str] = "DataloaderProfilingConfig"
    default_start_step: ClassVar[int] = 7

    def __post_init__(self, profile_default_steps: bool) -> None:
        super().__post_init__(profile_default_steps)
        check_regex(f"{type(self).__name__}.metrics_regex", self.metrics_regex)


@dataclass(frozen=True)
class PythonProfilingConfig(ProfilingOptionConfig):
    """Python function statistics of the chosen steps (default: steps 9, 10 and 11).

    :param python_profiler: :class:`PythonProfiler` (or its name, e.g. ``"cProfile"``,
        ``"Pyinstrument"``); default ``PythonProfiler.CPROFILE``.
    :param cprofile_timer: :class:`cProfileTimer` (or its name); default
        ``cProfileTimer.TOTAL_TIME``, ``DEFAULT`` with ``profile_default_steps=True``. Set to
        ``None`` with pyinstrument, which has a single clock. Range parameters: see
        :class:`ProfilingOptionConfig`.
    """

    python_profiler: PythonProfiler = PythonProfiler.CPROFILE
    cprofile_timer: cProfileTimer | None = cProfileTimer.TOTAL_TIME

    option: ClassVar[str] = "python"
    sagemaker_key: ClassVar[str] = "PythonProfilingConfig"
    default_start_step: ClassVar[int] = 9
    default_num_steps: ClassVar[int] = 3

    #: the timers ``cProfileTimer.DEFAULT`` cycles through, one per profiled step
    DEFAULT_TIMER_CYCLE: ClassVar[tuple[cProfileTimer, ...]] = (
        cProfileTimer.TOTAL_TIME,
        cProfileTimer.CPU_TIME,
        cProfileTimer.OFF_CPU_TIME,
    )

    def __post_init__(self, profile_default_steps: bool) -> None:
        super().__post_init__(profile_default_steps)
        owner = type(self).__name__
        profiler = check_enum(f"{owner}.python_profiler", self.python_profiler, PythonProfiler)
        object.__setattr__(self, "python_profiler", profiler)
        if profiler is PythonProfiler.PYINSTRUMENT:
            timer = None  # SageMaker ignores the timer with pyinstrument, and so do we
        elif profile_default_steps:
            timer = cProfileTimer.DEFAULT
        elif self.cprofile_timer is None:
            timer = cProfileTimer.TOTAL_TIME
        else:
            timer = check_enum(f"{owner}.cprofile_timer", self.cprofile_timer, cProfileTimer)
        object.__setattr__(self, "cprofile_timer", timer)

    def timer_for_step(self, step: int) -> cProfileTimer | None:
        """The cProfile timer for ``step``: ``DEFAULT`` picks one in turn; None with pyinstrument."""
        if self.cprofile_timer is not cProfileTimer.DEFAULT:
            return self.cprofile_timer
        offset = step - (self.start_step or 0)
        return self.DEFAULT_TIMER_CYCLE[offset % len(self.DEFAULT_TIMER_CYCLE)]


@dataclass(frozen=True)
class HorovodProfilingConfig(ProfilingOptionConfig):
    """The Horovod timeline of the chosen steps (default: step 13).

    Parameters: see :class:`ProfilingOptionConfig`.
    """

    option: ClassVar[str] = "horovod"
    sagemaker_key: ClassVar[str] = "HorovodProfilingConfig"
    default_start_step: ClassVar[int] = 13


@dataclass(frozen=True)
class SMDataParallelProfilingConfig(ProfilingOptionConfig):
    """The distributed-training (collectives) timeline of the chosen steps (default: step 15).

    Also available as ``DistributedProfilingConfig``. Parameters: see
    :class:`ProfilingOptionConfig`.
    """

    option: ClassVar[str] = "smdataparallel"
    sagemaker_key: ClassVar[str] = "SMDataParallelProfilingConfig"
    default_start_step: ClassVar[int] = 15


DistributedProfilingConfig = SMDataParallelProfilingConfig
