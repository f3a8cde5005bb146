"""YAML files read by the pipeline (deploy files, config files), each failure one line.

`yaml.safe_load` raises a multi-line error naming no file, and a non-UTF-8 byte gives a
traceback from the codec: `load_yaml_mapping` says instead `FILE:LINE: not valid YAML (...)`,
`FILE:LINE: not UTF-8 text`, or `FILE: a WHAT must be a mapping of keys to values`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["YamlFileError", "load_yaml_mapping"]


class YamlFileError(ValueError):
    """A YAML file that cannot be used; the message names the file (and line)."""


def load_yaml_mapping(path: str | os.PathLike[str], what: str = "YAML file") -> dict[str, Any]:
    """The mapping a YAML file holds ({} for an empty file); YamlFileError otherwise."""
    import yaml

    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise YamlFileError(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = 1 + raw[: exc.start].count(b"\n")
        raise YamlFileError(f"{path}:{line}: not UTF-8 text") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise YamlFileError(f"{where}: not valid YAML ({problem})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise YamlFileError(f"{path}: a {what} must be a mapping of keys to values, not a {kind}")
    return data
