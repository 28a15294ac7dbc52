"""Configuration files: JSON or YAML chosen by extension, read into plain dicts, written atomically.

Writes go to a temporary file in the same folder that is then renamed over the target, so a
process watching the file (:class:`ConfigWatcher`) sees the old content or the new, never half.
PyYAML is imported only when a YAML file is read or written.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from stepscope._atomic import write_atomic
from stepscope.errors import ConfigError

__all__ = ["FORMATS", "file_format", "parse_config_bytes", "read_config_file", "write_config_file"]

#: file extension -> format name
FORMATS: dict[str, str] = {".json": "json", ".yaml": "yaml", ".yml": "yaml"}
#: what a file may hold instead of a mapping, in the words of JSON and YAML (Python's type
#: names, NoneType for an empty file, are no words of theirs)
_TOP_LEVEL_KINDS: dict[type, str] = {
    type(None): "nothing (an empty document, or null)",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    str: "a string",
    list: "a list",
}


def file_format(path: str | os.PathLike[str]) -> str:
    """``"json"`` or ``"yaml"`` from the extension of ``path``; anything else raises."""
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise ConfigError(
            "configuration file name", str(path), "a name ending in .json, .yaml or .yml"
        )
    return fmt


def parse_config_bytes(raw: bytes, path: str | os.PathLike[str]) -> dict[str, Any]:
    """The mapping held by ``raw``, the content of ``path`` (its extension picks the format)."""
    fmt = file_format(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"configuration file {str(path)!r}", exc.reason, "UTF-8 text") from None
    if fmt == "json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"configuration file {str(path)!r}",
                f"{exc.msg} at line {exc.lineno} column {exc.colno}",
                "valid JSON",
            ) from None
    else:
        import yaml

        try:
            data = yaml.load(text, Loader=_yaml_loader())  # a SafeLoader: no Python objects
        except yaml.YAMLError as exc:
            raise ConfigError(
                f"configuration file {str(path)!r}", str(exc).replace("\n", " "), "valid YAML"
            ) from None
    if not isinstance(data, dict):
        kind = _TOP_LEVEL_KINDS.get(type(data), type(data).__name__)
        raise ConfigError(f"configuration file {str(path)!r}", kind, "a mapping at the top level")
    return data


#: a number in exponent form without a dot or the exponent's sign (``1.7e9``, ``1e3``), which
#: YAML 1.2 reads as a float and PyYAML, after YAML 1.1, as a string
_EXPONENT_FLOAT = re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


def _yaml_loader() -> Any:  # Any: a yaml.SafeLoader subclass (PyYAML ships no types)
    """PyYAML's SafeLoader, reading ``start_unix_time: 1.7e9`` as the number it is (else a
    string, which the configuration refuses as "got '1.7e9'"). Its own table of implicit
    resolvers is copied on the subclass, so SafeLoader itself stays as it is."""
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    _Loader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+0123456789"))
    return _Loader


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The mapping stored in the JSON or YAML file ``path``."""
    file_format(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError("configuration file", str(path), "an existing file") from None
    except OSError as exc:
        raise ConfigError(
            "configuration file", str(path), "a readable file", hint=f"({exc.strerror})"
        ) from None
    return parse_config_bytes(raw, path)


def _dump(data: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    import yaml

    return str(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))


def write_config_file(path: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically (temporary file + rename); creates the folder."""
    target = Path(path)
    write_atomic(target, _dump(data, file_format(target)), durable=True)
