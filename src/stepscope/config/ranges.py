"""The effective step or time range of one profiling option, and whether a step falls in it."""

from __future__ import annotations

from stepscope.config.validation import check_range_fields
from stepscope.errors import ConfigError

__all__ = ["ProfileRange"]


class ProfileRange:
    """The steps one profiling option records, resolved from its configuration.

    A **step range** profiles steps ``[start_step, start_step + num_steps)``. A **time range**
    profiles every step seen while ``start_unix_time <= now_s < start_unix_time + duration``;
    without a ``duration`` it profiles exactly one step, the first one seen at or after
    ``start_unix_time`` (as SageMaker Debugger does). Without ``start_unix_time`` a time range
    starts at the first call of :meth:`should_profile` or :meth:`is_past`.

    Those last two cases make the object stateful: it remembers the start time and the chosen
    step. Keep one instance per option while a configuration is in force
    (:meth:`FrameworkProfile.range_for` builds a fresh one on each call).

    :param start_step: first step profiled (step range); an integer >= 0.
    :param num_steps: number of steps profiled (step range); an integer >= 1.
    :param start_unix_time: when profiling starts (time range), Unix time in seconds.
    :param duration: how long profiling lasts (time range), in seconds; > 0.
    """

    __slots__ = (
        "_first_s",
        "_single_step",
        "duration",
        "num_steps",
        "start_step",
        "start_unix_time",
    )

    def __init__(
        self,
        *,
        start_step: int | None = None,
        num_steps: int | None = None,
        start_unix_time: float | None = None,
        duration: float | None = None,
    ) -> None:
        check_range_fields("ProfileRange", start_step, num_steps, start_unix_time, duration)
        if (start_step is None) != (num_steps is None):
            missing = "num_steps" if num_steps is None else "start_step"
            raise ConfigError(
                f"ProfileRange.{missing}", None, "an integer when the other step field is given"
            )
        if start_step is None and start_unix_time is None and duration is None:
            raise ConfigError("ProfileRange", None, "a step range or a time range")
        self.start_step = start_step
        self.num_steps = num_steps
        self.start_unix_time = start_unix_time
        self.duration = duration
        self._first_s: float | None = None
        self._single_step: int | None = None

    @property
    def is_step_range(self) -> bool:
        """True for a step range, False for a time range."""
        return self.start_step is not None

    def _start_s(self, now_s: float) -> float:
        if self.start_unix_time is not None:
            return self.start_unix_time
        if self._first_s is None:
            self._first_s = now_s
        return self._first_s

    def should_profile(self, step: int, now_s: float) -> bool:
        """Whether ``step``, seen at Unix time ``now_s`` (seconds), is inside the range."""
        if self.start_step is not None and self.num_steps is not None:
            return self.start_step <= step < self.start_step + self.num_steps
        start_s = self._start_s(now_s)
        if self.duration is not None:
            return start_s <= now_s < start_s + self.duration
        if self._single_step is None and now_s >= start_s:
            self._single_step = step
        return self._single_step == step

    def is_past(self, step: int, now_s: float) -> bool:
        """Whether the range is over at ``step`` and Unix time ``now_s``: nothing more to profile."""
        if self.start_step is not None and self.num_steps is not None:
            return step >= self.start_step + self.num_steps
        start_s = self._start_s(now_s)
        if self.duration is not None:
            return now_s >= start_s + self.duration
        return self._single_step is not None and step > self._single_step

    def next_edge(self, step: int) -> int | None:
        """The first step after ``step`` at which :meth:`should_profile` may answer otherwise
        (``None``: never again); ``step`` itself for a time range, whose answer moves with the
        clock even between two questions about the same step."""
        if self.start_step is None or self.num_steps is None:
            return step
        for edge in (self.start_step, self.start_step + self.num_steps):
            if edge > step:
                return edge
        return None

    def _key(self) -> tuple[int | None, int | None, float | None, float | None]:
        return (self.start_step, self.num_steps, self.start_unix_time, self.duration)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProfileRange):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        if self.is_step_range:
            return f"ProfileRange(start_step={self.start_step}, num_steps={self.num_steps})"
        return f"ProfileRange(start_unix_time={self.start_unix_time}, duration={self.duration})"
