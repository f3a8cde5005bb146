"""Guards on one records line beyond its schema: nesting no decoder survives, and a key
given twice (issue 45's red team).

A JSON object may repeat a key and every decoder here keeps the last value, so a line with
`"ok": false, ..., "ok": true` would count a failed request as ok. `counted_keys` proves a
line free of repeats at the cost of one byte count (the common path), and `repeated_key`
finds the repeat by the standard library's decoder where that count cannot prove it.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

__all__ = [
    "TOO_DEEP",
    "RepeatedKey",
    "no_repeats",
    "counted_keys",
    "repeated_key",
    "presence_type",
    "fill_absent",
]

# The refusal of a line (or JSON file) nested deeper than the decoders' recursion allows.
TOO_DEEP = "a value nested too deep to read (JSON nesting past the decoder's recursion limit)"


class RepeatedKey(ValueError):
    """A JSON object that gives one key twice; `key` names it."""

    def __init__(self, key: str) -> None:
        super().__init__(f"key {key!r} given twice")
        self.key = key


def no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook` for `json.loads`: the object, or RepeatedKey for a key given twice."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise RepeatedKey(key)
            seen.add(key)
    return obj


def _nested_keys(values: Any) -> int:
    """Keys of every object inside `values` (iteratively: a deep value is no RecursionError)."""
    n, stack = 0, [values]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            n += len(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return n


def counted_keys(line: bytes, record: Mapping[str, Any], top_keys: int) -> bool:
    """Whether one byte count proves the line gives no key twice.

    JSON has a colon after each key and nowhere else outside strings, so the line's colons
    are at least its keys; its distinct keys are at least `top_keys` (the line's top-level
    keys the decoder kept) plus those inside `error` and `server_events` (the free-form
    fields). Colons equal to that count, plus the colons of the strings held, leave no room
    for a repeat; more (a colon elsewhere, an object not counted) prove nothing:
    `repeated_key` decides."""
    expected = top_keys
    for name in ("error", "server_events"):
        value = record.get(name)
        if value is not None:
            expected += _nested_keys(value)
    colons = line.count(b":")
    if colons == expected:
        return True
    # Colons inside the strings a record commonly holds (a prompt's text, an error message)
    # are no keys; counted from the decoded strings, they equal the line's only where no
    # colon was written escaped (`\u003a`, which decodes to one but is none in the line).
    if colons < expected or b"\\u003" in line:
        return False
    in_strings = sum(v.count(":") for v in record.values() if v.__class__ is str)
    error, pieces = record.get("error"), record.get("text_pieces")
    if isinstance(error, dict):
        in_strings += sum(v.count(":") for v in error.values() if v.__class__ is str)
    if pieces:
        in_strings += sum(p.count(":") for p in pieces)
    return colons == expected + in_strings


def repeated_key(line: bytes) -> str | None:
    """The first key the line gives twice in one object (None: none; the line is valid
    JSON that the fast decoder already took)."""
    try:
        json.loads(line, object_pairs_hook=no_repeats)
    except RepeatedKey as exc:
        return exc.key
    return None


def presence_type(cls: type) -> type:
    """`cls` (a dataclass) with every defaulted field defaulting to `msgspec.UNSET`: decoded
    into it, a field the line leaves out is told from one it gives with the default value."""
    hints = typing.get_type_hints(cls)
    fields: list[Any] = []
    for f in dataclasses.fields(cls):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            fields.append((f.name, hints[f.name]))
        else:
            unset = dataclasses.field(default=msgspec.UNSET)
            fields.append((f.name, hints[f.name] | msgspec.UnsetType, unset))
    return dataclasses.make_dataclass(f"_{cls.__name__}Given", fields, kw_only=True)


def fill_absent(record: dict[str, Any], names: Sequence[str], defaults: Mapping[str, Any]) -> int:
    """The number of fields the line gave (msgspec leaves a field at UNSET out of the
    instance's dict), after putting each one it left out at its default, in `names`' order."""
    given = len(record)
    if given < len(names):
        ordered = {n: record[n] if n in record else defaults[n] for n in names}
        record.clear()
        record.update(ordered)
    return given
