"""Every exception stepscope raises, under one root.

::

    StepscopeError
    ├─ ConfigError (ValueError)              .parameter .value .allowed
    ├─ MissingDependencyError (ImportError)  .package .extra .feature
    ├─ SessionError (RuntimeError)           profiler already running / not running
    ├─ ServeError (OSError)                  .host .port: the UI cannot listen there
    ├─ StoreError
    │  ├─ JobNotFoundError (FileNotFoundError)
    │  ├─ UnsupportedFormatError             no reader recognises the path
    │  ├─ StorageAccessError                 remote storage refused access or cannot be reached
    │  └─ CorruptFileError                   .path .position (readers warn and skip)
    └─ RuleError                             the engine marks that rule Error, the others go on

Callers pass data; each constructor writes the message, so every message of a class has the
same shape and the fields stay on the object for the CLI and the UI.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "ConfigError",
    "CorruptFileError",
    "JobNotFoundError",
    "MissingDependencyError",
    "RuleError",
    "ServeError",
    "SessionError",
    "StepscopeError",
    "StorageAccessError",
    "StoreError",
    "UnsupportedFormatError",
]


class StepscopeError(Exception):
    """Root of every error stepscope raises: ``except StepscopeError`` catches them all."""


class ConfigError(StepscopeError, ValueError):
    """A configuration value is invalid.

    :param parameter: the qualified parameter name, e.g. ``"FrameworkProfile.num_steps"``.
    :param value: the value that was given.
    :param allowed: what is allowed, in words (``"an integer >= 1"``).
    :param hint: an optional sentence that says how to fix it.
    :param missing: nothing was given where something is needed: the message says the parameter
        is required rather than quoting the default (``got None`` tells a user nothing).
    """

    def __init__(
        self, parameter: str, value: Any, allowed: str, hint: str = "", *, missing: bool = False
    ) -> None:
        self.parameter = parameter
        self.value = value
        self.allowed = allowed
        self.hint = hint
        self.missing = missing
        if missing:
            message = f"{parameter} is required: {allowed}."
        else:
            message = f"{parameter} must be {allowed}, got {value!r}."
        if hint:
            message += f" {hint}"
        super().__init__(message)

    def naming(self, parameter: str) -> ConfigError:
        """The same error about ``parameter``: the name the user wrote, where the one raising
        it knows another (a key of a file, a flag)."""
        return ConfigError(parameter, self.value, self.allowed, self.hint, missing=self.missing)

    def renamed(self, names: Mapping[str, str]) -> ConfigError:
        """The same error in the names the user wrote, ``names`` mapping qualified parameters
        (``DetailedProfilingConfig.start_step``) to them (``ProfilingParameters.
        DetailedProfilingConfig.StartStep``). An error about how fields of one owner go together
        names the owner as its parameter and those fields bare (``start_step``, in its text and
        as the keys of its value): each becomes the last part of its new name (``StartStep``).
        """
        prefix = f"{self.parameter}."
        fields = {
            name.removeprefix(prefix): new.rpartition(".")[2]
            for name, new in names.items()
            if name.startswith(prefix)
        }
        value = self.value
        if fields and isinstance(value, dict):
            value = {fields.get(key, key): item for key, item in value.items()}
        allowed, hint = self.allowed, self.hint
        if fields:
            words = re.compile(r"\b(?:" + "|".join(map(re.escape, fields)) + r")\b")
            allowed = words.sub(lambda match: fields[match[0]], allowed)
            hint = words.sub(lambda match: fields[match[0]], hint)
        parameter = names.get(self.parameter, self.parameter)
        return ConfigError(parameter, value, allowed, hint, missing=self.missing)


class MissingDependencyError(StepscopeError, ImportError):
    """An optional package that a requested feature needs is not installed.

    ``extra`` is the stepscope extra that installs it, or ``None`` when none does (the install
    command then names the package itself).
    """

    def __init__(self, package: str, extra: str | None, feature: str) -> None:
        self.package = package
        self.extra = extra
        self.feature = feature
        target = package if extra is None else f"'stepscope[{extra}]'"
        super().__init__(
            f"{feature} needs the '{package}' package, which is not installed. "
            f"Install it with: pip install {target}"
        )


class SessionError(StepscopeError, RuntimeError):
    """A profiling session was started twice, or used while not running."""


class ServeError(StepscopeError, OSError):
    """The Profiler UI cannot listen on the address it was given (a port in use, a bad host)."""

    def __init__(self, host: str, port: int, reason: str) -> None:
        self.host = host
        self.port = port
        self.reason = reason
        super().__init__(
            f"Cannot serve the Profiler UI on {host} port {port}: {reason}. "
            "Choose another port (stepscope ui --port N) or host."
        )


class StoreError(StepscopeError):
    """Reading or writing profiler data failed."""


class JobNotFoundError(StoreError, FileNotFoundError):
    """No job, trace or profiler output exists at the given path."""

    def __init__(self, path: str, detail: str = "") -> None:
        self.path = path
        message = f"No profiling job or trace found at {path!r}."
        if detail:
            message += f" {detail}"
        super().__init__(message)


class UnsupportedFormatError(StoreError):
    """The path exists, but no reader recognises what it holds."""

    def __init__(self, path: str, expected: str) -> None:
        self.path = path
        self.expected = expected
        super().__init__(f"{path!r} is not a format stepscope reads; expected {expected}.")


class StorageAccessError(StoreError):
    """The storage that holds a job (``s3://``) refused the request or could not be reached: the
    credentials, the endpoint or the network needs fixing, not the job's files."""

    def __init__(self, url: str, reason: str, hint: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"Cannot read {url!r}: {reason}. {hint}")


class CorruptFileError(StoreError):
    """A file is damaged at a known position; readers log it and skip that record."""

    def __init__(self, path: str, position: str, reason: str) -> None:
        self.path = path
        self.position = position
        self.reason = reason
        super().__init__(f"{path}: corrupt data at {position}: {reason}")


class RuleError(StepscopeError):
    """A rule failed while evaluating; the engine marks that rule Error and runs the others."""

    def __init__(self, rule: str, reason: str) -> None:
        self.rule = rule
        self.reason = reason
        super().__init__(f"Rule {rule} failed: {reason}")
