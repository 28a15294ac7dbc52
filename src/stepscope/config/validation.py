"""Value checks that turn a wrong configuration value into a :class:`ConfigError`.

Each check names the qualified parameter (``"FrameworkProfile.num_steps"``), the value given and
what is allowed, and returns the value unchanged (or normalised, for enums and paths). ``bool`` is
never accepted where a number is expected, although Python treats it as an ``int``: ``True`` steps
are always a mistake.
"""

from __future__ import annotations

import math
import numbers
import os
import re
from collections.abc import Collection
from enum import Enum
from typing import Any, TypeVar

from stepscope.errors import ConfigError

__all__ = [
    "MODES",
    "check_bool",
    "check_choice",
    "check_enum",
    "check_int",
    "check_mode",
    "check_number",
    "check_path",
    "check_range_fields",
    "check_regex",
    "check_unix_time",
    "member_by_folded_name",
    "plain_number",
]

E = TypeVar("E", bound=Enum)

#: SageMaker's training modes (``smdebug``'s ``ModeKeys``), as written in ``Step:ModeKeys.<MODE>``.
MODES = ("TRAIN", "EVAL", "PREDICT", "GLOBAL")


def plain_number(value: Any) -> Any:
    """numpy's numbers as Python's (a step or a time read off a DataFrame by an analysis query);
    anything else as is, for the checks to judge. Configurations do not convert: they are saved
    as JSON, which takes Python's numbers only."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return value
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    """A finite ``int`` or ``float``: an infinite duration or time is not a setting, and JSON
    has no spelling for it."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_int(parameter: str, value: object, *, minimum: int) -> int:
    """``value`` as an ``int`` no smaller than ``minimum``."""
    if not _is_int(value) or value < minimum:  # type: ignore[operator]
        raise ConfigError(parameter, value, f"an integer >= {minimum}")
    return value  # type: ignore[return-value]


def check_number(parameter: str, value: object) -> float:
    """``value`` as a finite number (``int`` or ``float``) greater than 0."""
    if not _is_number(value) or value <= 0:  # type: ignore[operator]
        raise ConfigError(parameter, value, "a finite number > 0")
    return value  # type: ignore[return-value]


def check_unix_time(parameter: str, value: object) -> float:
    """``value`` as a Unix time in seconds (a finite number >= 0)."""
    if not _is_number(value) or value < 0:  # type: ignore[operator]
        raise ConfigError(parameter, value, "a Unix time in seconds (a finite number >= 0)")
    return value  # type: ignore[return-value]


def check_choice(parameter: str, value: object, choices: Collection[int]) -> int:
    """``value`` as one of the integers in ``choices``."""
    if not _is_int(value) or value not in choices:
        allowed = ", ".join(str(choice) for choice in sorted(choices))
        raise ConfigError(parameter, value, f"one of {allowed}")
    return value  # type: ignore[return-value]


def check_bool(parameter: str, value: object) -> bool:
    """``value`` as a ``bool`` (``0``/``1`` and strings are refused: they hide typos)."""
    if not isinstance(value, bool):
        raise ConfigError(parameter, value, "True or False")
    return value


def check_path(parameter: str, value: object) -> str | None:
    """``value`` as a path string exactly as given (never case-folded), or ``None``."""
    if value is None:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise ConfigError(parameter, value, "a non-empty path string or None")
    return value


def check_regex(parameter: str, value: object) -> str:
    """``value`` as a string that compiles as a Python regular expression."""
    if not isinstance(value, str):
        raise ConfigError(parameter, value, "a regular expression string")
    try:
        re.compile(value)
    except re.error as exc:
        raise ConfigError(parameter, value, "a valid regular expression", hint=f"({exc})") from None
    return value


def member_by_folded_name(enum: type[E], value: object) -> E | None:
    """The member of ``enum`` whose name or value ``value`` spells, in any case; else None."""
    if isinstance(value, str):
        folded = value.casefold()
        for member in enum:
            if folded in (member.name.casefold(), str(member.value).casefold()):
                return member
    return None


def check_enum(parameter: str, value: object, enum: type[E]) -> E:
    """``value`` as a member of ``enum``, or the member it names or spells, in any case
    (``"TRAIN"`` for ``PythonProfileModes.TRAIN``, whose value is ``"train"``)."""
    if isinstance(value, enum):
        return value
    try:
        return enum(value)
    except ValueError:
        member = member_by_folded_name(enum, value)
        if member is not None:
            return member
        allowed = ", ".join(f"{enum.__name__}.{member.name} ({member.value!r})" for member in enum)
        raise ConfigError(parameter, value, f"one of {allowed}") from None


def check_mode(parameter: str, value: object) -> str:
    """``value`` as one of :data:`MODES`: its name in any case, ``"ModeKeys.TRAIN"``, or a
    ``ModeKeys`` member of ``smdebug`` (whose text is ``"ModeKeys.TRAIN"``)."""
    name = str(value).upper().removeprefix("MODEKEYS.")
    if name not in MODES:
        raise ConfigError(parameter, value, f"one of {', '.join(MODES)}")
    return name


def check_range_fields(
    owner: str,
    start_step: object,
    num_steps: object,
    start_unix_time: object,
    duration: object,
) -> None:
    """Check one step-or-time range: each field's type and bounds, and that not both are given.

    :param owner: the class the fields belong to, used in messages (``"FrameworkProfile"``).
    """
    if start_step is not None:
        check_int(f"{owner}.start_step", start_step, minimum=0)
    if num_steps is not None:
        check_int(f"{owner}.num_steps", num_steps, minimum=1)
    if start_unix_time is not None:
        check_unix_time(f"{owner}.start_unix_time", start_unix_time)
    if duration is not None:
        check_number(f"{owner}.duration", duration)
    has_steps = start_step is not None or num_steps is not None
    has_time = start_unix_time is not None or duration is not None
    if has_steps and has_time:
        given = {
            "start_step": start_step,
            "num_steps": num_steps,
            "start_unix_time": start_unix_time,
            "duration": duration,
        }
        raise ConfigError(
            owner,
            {key: value for key, value in given.items() if value is not None},
            "either a step range (start_step, num_steps) or a time range "
            "(start_unix_time, duration), not both",
        )
