"""SageMaker's ``profilerconfig.json`` shape, translated into the dict ``ProfilerConfig.from_dict`` reads.

The shape (what the SageMaker Python SDK sends and SageMaker Debugger reads)::

    {"ProfilingIntervalInMilliseconds": 500, "DisableProfiler": false,
     "ProfilingParameters": {"LocalPath": "/opt/ml/output/profiler",
                             "RotateMaxFileSizeInBytes": "10485760",
                             "DetailedProfilingConfig": "{\\"StartStep\\": 5, \\"NumSteps\\": 1, }", ...}}

or, for SageMaker Profiler (the SDK's ``ProfilerConfig(profile_params=Profiler(...))``),
``"ProfilingParameters": {"CPUProfilingDuration": "3600", "SMPFileRotationSecs": "600"}``.

Keys are matched without regard to case, as SageMaker Debugger does; values never change case
(SageMaker Debugger lower-cases the whole file, so a ``LocalPath`` of ``/tmp/MyRun`` became
``/tmp/myrun``; here it stays ``/tmp/MyRun``). Numbers may be strings. A metrics config may be a
mapping or a string holding one: it is parsed with :mod:`json` (after dropping the trailing comma
the SDK writes), never evaluated. Unknown keys log one warning each and are skipped, so files from
newer SDKs still load. An invalid value's error names the key as the file writes it
(``ProfilingParameters.PythonProfilingConfig.NumSteps``), not stepscope's parameter.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from stepscope.config.options import (
    DataloaderProfilingConfig,
    DetailedProfilingConfig,
    HorovodProfilingConfig,
    ProfilingOptionConfig,
    PythonProfilingConfig,
    SMDataParallelProfilingConfig,
)
from stepscope.errors import ConfigError

__all__ = ["from_sagemaker_dict", "is_sagemaker_shape"]

logger = logging.getLogger(__name__)

#: our top-level parameters, by SageMaker's key (folded)
_TOP_LEVEL_FIELDS = {
    "disableprofiler": ("disable_profiler", "bool"),
    "profilingintervalinmilliseconds": ("system_monitor_interval_millis", "count"),
    "s3outputpath": ("s3_output_path", "text"),
}
_TOP_LEVEL = {"profilingparameters", *_TOP_LEVEL_FIELDS}
_WRAPPER = "profilerconfig"
_OPTION_BY_KEY: dict[str, type[ProfilingOptionConfig]] = {
    cls.sagemaker_key.casefold(): cls
    for cls in (
        DetailedProfilingConfig,
        DataloaderProfilingConfig,
        PythonProfilingConfig,
        HorovodProfilingConfig,
        SMDataParallelProfilingConfig,
    )
}
#: SageMaker metrics-config field -> (our parameter, kind of value)
_RANGE_KEYS = {
    "StartStep": ("start_step", "step"),
    "NumSteps": ("num_steps", "count"),
    "StartTimeInSecSinceEpoch": ("start_unix_time", "number"),
    "DurationInSeconds": ("duration", "number"),
    "DefaultProfiling": ("profile_default_steps", "bool"),
}
#: the same, folded, and the key the SDK's TimeRange writes
_RANGE_FIELDS = {
    **{key.casefold(): field for key, field in _RANGE_KEYS.items()},
    "duration": ("duration", "number"),
}
_EXTRA_FIELDS = {
    DataloaderProfilingConfig: {"metricsregex": ("metrics_regex", "text")},
    PythonProfilingConfig: {
        "profilername": ("python_profiler", "text"),
        "cprofiletimer": ("cprofile_timer", "text"),
    },
}
_FILE_FIELDS = {
    "localpath": ("local_path", "text"),
    "rotatemaxfilesizeinbytes": ("file_max_size", "count"),
    "rotatefilecloseintervalinseconds": ("file_close_interval", "number"),
    "fileopenfailthreshold": ("file_open_fail_threshold", "count"),
}
#: SageMaker Profiler's settings: the SDK's ``Profiler`` writes them as the whole of
#: ``ProfilingParameters`` (``ProfilerConfig(profile_params=Profiler(...))``)
_PROFILER_FIELDS = {
    "cpuprofilingduration": ("cpu_profiling_duration", "count"),
    "smpfilerotationsecs": ("file_rotation_interval", "count"),
}
_IGNORED = {"profilerenabled"}
_INT_TEXT = re.compile(r"[+-]?\d+")
_TRAILING_COMMA = re.compile(r",\s*}\s*$")


def _folded(data: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    return {str(key).casefold(): (str(key), value) for key, value in data.items()}


def is_sagemaker_shape(data: dict[str, Any]) -> bool:
    """Whether ``data`` uses SageMaker's keys (``ProfilingParameters``, ...) rather than ours."""
    return any(str(key).casefold() in (_TOP_LEVEL | {_WRAPPER}) for key in data)


def _convert(parameter: str, value: Any, kind: str) -> Any:
    """``value`` (often a string: the SDK sends every value as one) as the ``kind`` it should be."""
    if kind == "text":
        if not isinstance(value, str):
            raise ConfigError(parameter, value, "a string")
        return value
    if kind == "bool":
        if isinstance(value, str) and value.strip().casefold() in ("true", "false"):
            return value.strip().casefold() == "true"
        if not isinstance(value, bool):
            raise ConfigError(parameter, value, "true or false")
        return value
    if isinstance(value, str):
        text = value.strip()
        if _INT_TEXT.fullmatch(text):
            return int(text)
        if kind == "number":
            try:
                return float(text)
            except ValueError:
                pass
    # the config classes check the value, and say what they allow (a ProfilingIntervalInMilliseconds
    # of "fast" is one of six intervals, not any integer >= 1)
    return value


def _warn_unknown(where: str, key: str) -> None:
    logger.warning("%s: unknown key %r skipped (not a SageMaker profiler setting)", where, key)


def _option_dict(
    cls: type[ProfilingOptionConfig], value: Any, keys: dict[str, str]
) -> dict[str, Any] | None:
    """Our dict for one metrics config, or None when SageMaker would leave the option off;
    ``keys`` gets the file's key of each of its parameters (see :func:`from_sagemaker_dict`)."""
    where = f"ProfilingParameters.{cls.sagemaker_key}"
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            value = json.loads(_TRAILING_COMMA.sub("}", text))
        except json.JSONDecodeError as exc:
            raise ConfigError(
                where, value, "a JSON object (or a string holding one)", hint=exc.msg
            ) from None
    if not isinstance(value, dict):
        raise ConfigError(where, value, "a JSON object (or a string holding one)")
    if not value:
        return None
    table = {**_RANGE_FIELDS, **_EXTRA_FIELDS.get(cls, {})}
    # an error about how its range fields go together names them all, the unwritten ones too
    keys[cls.__name__] = where
    keys.update(
        {f"{cls.__name__}.{name}": f"{where}.{key}" for key, (name, _) in _RANGE_KEYS.items()}
    )
    result: dict[str, Any] = {}
    for folded, (key, item) in _folded(value).items():
        if folded not in table:
            _warn_unknown(where, key)
            continue
        name, kind = table[folded]
        result[name] = _convert(f"{where}.{key}", item, kind)
        keys[f"{cls.__name__}.{name}"] = f"{where}.{key}"
    return result


def _parameters_dicts(
    parameters: Any, keys: dict[str, str]
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """``ProfilingParameters`` as our ``framework_profile_params`` and ``profile_params`` dicts:
    either may be None (SageMaker Profiler's parameters alone profile no framework metrics).
    ``keys`` gets the file's key of each of their parameters (see :func:`from_sagemaker_dict`)."""
    if isinstance(parameters, str):
        try:
            parameters = json.loads(parameters) if parameters.strip() else {}
        except json.JSONDecodeError:
            raise ConfigError("ProfilingParameters", parameters, "a JSON object") from None
    if not isinstance(parameters, dict):
        raise ConfigError("ProfilingParameters", parameters, "a JSON object")
    if not parameters:
        return None, None  # SageMaker Debugger profiles no framework metrics without parameters
    result: dict[str, Any] = {}
    profiler: dict[str, Any] = {}
    named_options = False
    for folded, (key, value) in _folded(parameters).items():
        if folded in _PROFILER_FIELDS:
            name, kind = _PROFILER_FIELDS[folded]
            profiler[name] = _convert(f"ProfilingParameters.{key}", value, kind)
            keys[f"Profiler.{name}"] = f"ProfilingParameters.{key}"
        elif folded in _FILE_FIELDS:
            name, kind = _FILE_FIELDS[folded]
            result[name] = _convert(f"ProfilingParameters.{key}", value, kind)
            keys[f"FrameworkProfile.{name}"] = f"ProfilingParameters.{key}"
        elif folded in _OPTION_BY_KEY:
            named_options = True
            cls = _OPTION_BY_KEY[folded]
            option = _option_dict(cls, value, keys)
            if option is not None:
                result[f"{cls.option}_profiling_config"] = option
        elif folded not in _IGNORED:
            _warn_unknown("ProfilingParameters", key)
    if profiler and not result:
        return None, profiler
    on = any(name.endswith("_profiling_config") for name in result)
    if named_options and not on:
        # no per-option config left would mean every option on its default steps
        logger.info(
            "every profiling option ProfilingParameters names is empty: system monitoring only"
        )
        return None, profiler or None
    if not on:
        logger.info(
            "ProfilingParameters names no profiling option: every option profiles its default "
            "steps (SageMaker Debugger would record only the step timeline)"
        )
    return result, profiler or None


def from_sagemaker_dict(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Translate SageMaker's profiler configuration into ``ProfilerConfig.to_dict()``'s shape.

    :returns: the translated dict, and the file's key of each of its parameters by the name the
        configuration classes give it in their errors (``ProfilerConfig.
        system_monitor_interval_millis`` -> ``ProfilingIntervalInMilliseconds``): a value they
        refuse is named as the user wrote it.
    """
    folded = _folded(data)
    if _WRAPPER in folded and len(folded) == 1:
        inner = folded[_WRAPPER][1]
        if not isinstance(inner, dict):
            raise ConfigError("ProfilerConfig", inner, "a JSON object")
        return from_sagemaker_dict(inner)
    result: dict[str, Any] = {"framework_profile_params": None}
    keys: dict[str, str] = {}
    for key_folded, (key, value) in folded.items():
        if key_folded == "profilingparameters":
            framework, profiler = _parameters_dicts(value, keys)
            result["framework_profile_params"] = framework
            if profiler is not None:
                result["profile_params"] = profiler
        elif key_folded in _TOP_LEVEL_FIELDS:
            name, kind = _TOP_LEVEL_FIELDS[key_folded]
            result[name] = _convert(key, value, kind)
            keys[f"ProfilerConfig.{name}"] = key
        else:
            _warn_unknown("profiler configuration", key)
    return result, keys
