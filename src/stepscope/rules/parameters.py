"""Rule parameters: how each one is declared (type, default, range) and how given values are checked.

A rule declares its parameters as a table of :class:`Param`; :func:`validate_parameters` turns what
a user passed (Python values, or strings as SageMaker's ``rule_parameters={"key": "value"}`` and the
``--param Rule.name=value`` CLI option send them) into typed values, and rejects unknown names, wrong
types and out-of-range values with a :class:`~stepscope.errors.ConfigError` that lists the valid
parameters.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stepscope.errors import ConfigError

__all__ = ["SCAN_INTERVAL", "Param", "check_order", "validate_parameters"]


@dataclass(frozen=True)
class Param:
    """One rule parameter.

    :param default: the value used when the parameter is not given (``None`` only for ``str``
        parameters whose absence means "no filter").
    :param kind: ``int``, ``float`` or ``str``.
    :param doc: one sentence for the docs and the report, with the unit.
    :param minimum: smallest allowed value (inclusive), for numbers.
    :param maximum: largest allowed value (inclusive), for numbers.
    :param choices: the allowed values of a ``str`` parameter (case-insensitive).
    """

    default: Any
    kind: type
    doc: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()

    def allowed(self) -> str:
        """What is allowed, in words, for error messages and the docs."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        noun = "an integer" if self.kind is int else "a number"
        if self.minimum is not None and self.maximum is not None:
            return f"{noun} between {_text(self.minimum)} and {_text(self.maximum)}"
        if self.minimum is not None:
            return f"{noun} >= {_text(self.minimum)}"
        return noun

    def coerce(self, owner: str, value: Any) -> Any:
        """``value`` converted to this parameter's type, or a :class:`ConfigError`."""
        if self.kind is str:
            return self._coerce_choice(owner, value)
        number = _number(value, self.kind)
        if number is None:
            raise ConfigError(owner, value, self.allowed())
        if (self.minimum is not None and number < self.minimum) or (
            self.maximum is not None and number > self.maximum
        ):
            raise ConfigError(owner, value, self.allowed())
        return number

    def _coerce_choice(self, owner: str, value: Any) -> str | None:
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
            return None
        if not isinstance(value, str):
            raise ConfigError(owner, value, self.allowed())
        wanted = value.strip().upper().removeprefix("MODEKEYS.")
        for choice in self.choices:
            if choice.upper() == wanted:
                return choice
        raise ConfigError(owner, value, self.allowed())


def _text(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


def _number(value: Any, kind: type) -> int | float | None:
    """``value`` as ``kind`` (int or float), accepting numeric strings; None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    # numbers.Real: NumPy's numbers too (a threshold computed with numpy); not NumPy's bool
    if not isinstance(value, numbers.Real) or not math.isfinite(value):
        return None
    number = float(value)
    if kind is int:
        return int(number) if number.is_integer() else None
    return number


#: Every rule has it: how much data time one live scan covers (SageMaker's scan_interval_us).
SCAN_INTERVAL = Param(
    60_000_000,
    int,
    "Time interval, in microseconds, between two scans of new data while the job runs.",
    minimum=1_000_000,
)


def validate_parameters(
    rule: str, specs: Mapping[str, Param], given: Mapping[str, Any]
) -> dict[str, Any]:
    """All parameters of ``rule``: the given ones checked and converted, the rest at their defaults.

    :param rule: the rule name, used in messages (``"CPUBottleneck.threshold must be ..."``).
    :param specs: the rule's parameter table.
    :param given: what the user passed; names are case-sensitive, as in SageMaker.
    :raises ConfigError: for an unknown name (listing the valid ones), a wrong type or a value
        out of range.
    """
    values = {name: spec.default for name, spec in specs.items()}
    for name, value in given.items():
        spec = specs.get(name)
        if spec is None:
            raise ConfigError(
                f"{rule} parameter name",
                name,
                "one of " + ", ".join(sorted(specs)),
                f"{rule} has no parameter {name!r}.",
            )
        values[name] = spec.coerce(f"{rule}.{name}", value)
    return values


def check_order(
    rule: str, given: Mapping[str, Any], values: Mapping[str, Any], low: str, high: str
) -> None:
    """Refuse ``values[low] > values[high]`` (a range with nothing in it), naming the one of the
    two that ``given`` sets, as given: the other kept its default, which the user never wrote
    (both given: ``low``).

    :raises ConfigError: ``low`` is above ``high``.
    """
    if values[low] <= values[high]:
        return
    if low in given or high not in given:
        value = given.get(low, values[low])
        raise ConfigError(f"{rule}.{low}", value, f"a number <= {high} ({values[high]:g})")
    raise ConfigError(f"{rule}.{high}", given[high], f"a number >= {low} ({values[low]:g})")
