"""YAML files read by the pipeline (deploy files, config files), each failure one line.

`yaml.safe_load` raises a multi-line error naming no file, and a non-UTF-8 byte gives a
traceback from the codec: `load_yaml_mapping` says instead `FILE:LINE: not valid YAML (...)`,
`FILE:LINE: not UTF-8 text`, or `FILE: a WHAT must be a mapping of keys to values`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = [
    "YamlFileError",
    "MAX_YAML_BYTES",
    "MAX_EXPANDED_NODES",
    "expanded_size",
    "load_yaml_mapping",
]

# The largest file read: a config or deploy file is a few KB (the largest shipped, 5 KB), and
# the pure-Python parser takes about a second per MB on an idle core (a 52 MB deploy file
# made a dry run take 42 s). Refused by its size, before a byte is parsed.
MAX_YAML_BYTES = 256 * 1024

# The most nodes a document may hold once its aliases are expanded (a config is ~10^3): an
# alias bomb of 400 bytes expands to 10^9 and takes any walk over it hours.
MAX_EXPANDED_NODES = 100_000


class YamlFileError(ValueError):
    """A YAML file that cannot be used; the message names the file (and line)."""


def load_yaml_mapping(path: str | os.PathLike[str], what: str = "YAML file") -> dict[str, Any]:
    """The mapping a YAML file holds ({} for an empty file); YamlFileError otherwise."""
    import yaml

    path = Path(path)
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_YAML_BYTES + 1)
            if len(raw) > MAX_YAML_BYTES:
                size = os.fstat(fh.fileno()).st_size
                raise YamlFileError(
                    f"{path}: {size} bytes, more than {MAX_YAML_BYTES} ({MAX_YAML_BYTES // 1024} "
                    f"KiB); no {what} is that large; refused before reading it"
                )
    except OSError as exc:
        raise YamlFileError(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = 1 + raw[: exc.start].count(b"\n")
        raise YamlFileError(f"{path}:{line}: not UTF-8 text") from None
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()  # composed, nothing built or walked yet
            if node is not None:
                size = expanded_size(node, _yaml_children)
                if size > MAX_EXPANDED_NODES:
                    raise YamlFileError(
                        f"{path}: {size} nodes once its aliases are expanded, more than "
                        f"{MAX_EXPANDED_NODES} (an alias bomb?); refused before reading it"
                    )
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except RecursionError:
        raise YamlFileError(f"{path}: nested too deeply to read") from None
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


def _yaml_children(node: Any) -> list[Any]:
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _data_children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [part for pair in value.items() for part in pair]
    if isinstance(value, list | tuple):
        return list(value)
    return []


def expanded_size(root: Any, children: Any = _data_children) -> int:
    """How many nodes `root` holds with every shared (aliased) node counted each time it is
    reached: linear in the distinct nodes (each sized once), whatever the expansion. A node
    that contains itself (a recursive alias) counts as too big (MAX_EXPANDED_NODES + 1)."""
    sizes: dict[int, int] = {}
    open_now: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:  # iterative: a deep document cannot overflow the stack
        node, done = stack.pop()
        key = id(node)
        if done:
            open_now.discard(key)
            sizes[key] = min(1 + sum(sizes[id(c)] for c in children(node)), 1 << 62)
            continue
        if key in sizes:
            continue
        if key in open_now:
            return MAX_EXPANDED_NODES + 1
        open_now.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children(node) if id(c) not in sizes)
    return sizes[id(root)]
