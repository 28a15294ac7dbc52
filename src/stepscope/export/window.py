"""The part of a job an export covers: a range of steps or a range of seconds."""

from __future__ import annotations

import re
from dataclasses import dataclass

import duckdb

from stepscope.errors import ConfigError

__all__ = ["Window", "parse_range", "resolve_window"]


@dataclass(frozen=True)
class Window:
    """A half-open time window ``[start_us, end_us)`` in epoch µs; ``None`` bounds are open."""

    start_us: float | None = None
    end_us: float | None = None

    def sql(self, start: str = "start_us", dur: str = "dur_us") -> str:
        """A SQL condition: the event overlaps the window."""
        parts = ["TRUE"]
        if self.start_us is not None:
            parts.append(f"({start} >= {self.start_us!r} OR {start} + {dur} > {self.start_us!r})")
        if self.end_us is not None:
            parts.append(f"{start} < {self.end_us!r}")
        return " AND ".join(parts)


_RANGE = re.compile(r"^\s*(-?[0-9.]*)\s*:\s*(-?[0-9.]*)\s*$")


def parse_range(text: str, *, parameter: str, integer: bool) -> tuple[float | None, float | None]:
    """``"A:B"`` → ``(A, B)``; either side may be empty (open). Numbers must not be negative."""
    match = _RANGE.match(text)
    allowed = "A:B with whole numbers A < B" if integer else "A:B in seconds with A < B"
    if not match:
        raise ConfigError(parameter, text, allowed + " (either side may be left empty)")
    bounds: list[float | None] = []
    for part in match.groups():
        if not part:
            bounds.append(None)
            continue
        try:
            value = int(part) if integer else float(part)
        except ValueError:
            raise ConfigError(parameter, text, allowed) from None
        if value < 0:
            raise ConfigError(parameter, text, allowed + ", not negative")
        bounds.append(float(value))
    low, high = bounds
    if low is not None and high is not None and low >= high:
        raise ConfigError(parameter, text, allowed)
    return low, high


def resolve_window(
    con: duckdb.DuckDBPyConnection,
    *,
    steps: tuple[float | None, float | None] | None = None,
    time_s: tuple[float | None, float | None] | None = None,
) -> Window:
    """Turn a step range ``[A, B)`` or a time range in seconds from the job's first event into µs.

    Steps are the ``Step:ModeKeys.*`` events of a stepscope or SageMaker job and the
    ``ProfilerStep#N`` ranges of a PyTorch profiler trace. A step range is of one mode: the
    training steps when it holds some, else the mode whose steps in it come first. A bound left
    out reaches the job's edge, as it does for a time range: ``100:`` keeps what comes after the
    last step too (the final evaluation, the checkpoint), and ``:`` is the whole job, as no
    range is.
    """
    if steps is not None and time_s is not None:
        raise ConfigError("steps", steps, "left out when a time range is given", "Pick one.")
    if time_s is not None:
        first, last = con.execute(
            "SELECT least((SELECT min(start_us) FROM events), "
            "(SELECT min(timestamp_us) FROM system)), "
            "greatest((SELECT max(start_us + dur_us) FROM events), "
            "(SELECT max(timestamp_us) FROM system))"
        ).fetchone() or (None, None)
        if first is None:
            raise _selects_nothing("time_s", time_s, "record", "nothing yet")
        low, high = time_s
        window = Window(
            None if low is None else first + low * 1e6,
            None if high is None else first + high * 1e6,
        )
        held = con.execute(
            f"SELECT EXISTS (SELECT 1 FROM events WHERE {window.sql()}) "
            f"OR EXISTS (SELECT 1 FROM system WHERE {window.sql('timestamp_us', '0')})"
        ).fetchone()
        if not (held and held[0]):
            raise _selects_nothing(
                "time_s", time_s, "record", f"seconds 0 to {(last - first) / 1e6:g}"
            )
        return window
    if steps is not None and steps != (None, None):
        low, high = steps
        is_step = "(name LIKE 'Step:ModeKeys.%' OR name LIKE 'ProfilerStep#%') AND step >= 0"
        condition = [is_step]
        if low is not None:
            condition.append(f"step >= {int(low)}")
        if high is not None:
            condition.append(f"step < {int(high)}")
        # Each mode numbers its steps from 0, so steps 2-4 of an evaluation loop after training
        # are no part of training steps 2-4: the range is of one mode, training when it has some.
        row = con.execute(
            "SELECT min(start_us), max(start_us + dur_us) FROM events "
            f"WHERE {' AND '.join(condition)} "
            "GROUP BY CASE WHEN name LIKE 'ProfilerStep#%' THEN 'ProfilerStep' ELSE name END "
            "ORDER BY bool_and(name <> 'Step:ModeKeys.TRAIN'), min(start_us) LIMIT 1"
        ).fetchone()
        if row is None or row[0] is None:
            seen = con.execute(
                f"SELECT min(step), max(step) FROM events WHERE {is_step}"
            ).fetchone()
            span = "steps {} to {}".format(*seen) if seen and seen[0] is not None else "no steps"
            raise _selects_nothing("steps", steps, "recorded step", span)
        return Window(None if low is None else row[0], None if high is None else row[1])
    return Window()


def _selects_nothing(
    parameter: str, asked: tuple[float | None, float | None], unit: str, span: str
) -> ConfigError:
    """The error for a window that holds nothing of the job: an export of it would be empty."""
    return ConfigError(
        parameter, asked, f"a range that holds at least one {unit}", f"The job records {span}."
    )
