"""Read-time checks of a parsed JSON object against declared field types.

thetalker.data.records checks every record line it reads with these (`check_record`): a
value is of its field's declared type or refused with why, strictly (a bool is no int, a
string is no bool, a float is finite), so no reader reinterprets a value it was given.
`timeline_problem` checks a well-typed record's derived figures against its own timeline.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["type_problem", "nonfinite_inside", "fields_problem", "timeline_problem"]


def fields_problem(
    obj: Mapping[str, Any], field_types: Mapping[str, Any], required: Sequence[str], what: str
) -> str | None:
    """Why `obj` lacks a `required` field or holds a declared field of another type (None
    when neither); `what` names the object in the message ("record lacks field(s) ...")."""
    missing = [f for f in required if f not in obj]
    if missing:
        return f"{what} lacks field(s) {', '.join(missing)}"
    for name, hint in field_types.items():
        if name in obj:
            problem = type_problem(obj[name], hint)
            if problem is not None:
                return f"field {name}: {problem}"
    return None


def type_problem(value: Any, hint: Any) -> str | None:
    """Why `value` is not of the declared type `hint` (None when it is). Strict: a bool is
    not an int, a string is not a bool, a float must be finite."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return None
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        problems = [type_problem(value, o) for o in options if o is not type(None)]
        return None if None in problems else problems[0]
    if hint is type(None):
        return None if value is None else "expected null"
    if hint is bool:
        return None if isinstance(value, bool) else f"expected true or false, got {value!r:.40}"
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else f"expected an integer, got {value!r:.40}"
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"expected a number, got {value!r:.40}"
        return None if math.isfinite(value) else f"not a finite number ({value!r})"
    if hint is str:
        return None if isinstance(value, str) else f"expected a string, got {value!r:.40}"
    if origin is list:
        if not isinstance(value, list):
            return f"expected a list, got {value!r:.40}"
        (item,) = typing.get_args(hint) or (Any,)
        for i, v in enumerate(value):
            problem = type_problem(v, item)
            if problem is not None:
                return f"item {i}: {problem}"
        return None
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            return f"expected an object, got {value!r:.40}"
        return nonfinite_inside(value)
    return None


def nonfinite_inside(value: Any) -> str | None:
    """A non-finite float anywhere inside a free-form value (an error, a server event)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"holds a non-finite number ({value!r})"
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        for v in value:
            problem = nonfinite_inside(v)
            if problem is not None:
                return problem
    return None


# Float noise allowed between a derived figure and the same figure computed again here
# (the writer computes it by the same formula: they agree exactly unless edited).
_REL_TOL = 1e-9
_ABS_TOL = 1e-9


def timeline_problem(record: Mapping[str, Any]) -> tuple[str, str] | None:
    """(field, why) when a record's figures contradict its own raw timeline (None when
    they agree): one arrival per chunk and per read; the reads carry the chunks' bytes
    (one byte stream, two groupings); `audio_s` is the audio its chunks carry,
    `sum(chunk_bytes) / (sample_rate x 2)` (16-bit mono); `ttfa_s` and `wall_s` are times
    from the request's start, never negative, and the first audio is no later than the end;
    `stalls` and `underrun_events` count gaps between arrivals, so no more than the
    arrivals less one. A figure edited or corrupted apart from its timeline (an `audio_s` of
    10^9 makes an RTFx of 476,591; `stalls` of 2^63) would otherwise pass every type check."""
    chunks = record["chunk_bytes"]
    if len(record["chunk_arrival_s"]) != len(chunks):
        n = len(record["chunk_arrival_s"])
        why = f"{n} arrival(s) for {len(chunks)} chunk(s) in chunk_bytes: one a chunk"
        return "chunk_arrival_s", why
    reads = record.get("read_bytes")
    read_times = record.get("read_arrival_s")
    if (reads is None) != (read_times is None) or (
        reads is not None and len(read_times) != len(reads)
    ):
        n, m = len(read_times or ()), len(reads or ())
        return "read_arrival_s", f"{n} arrival(s) for {m} read(s) in read_bytes: one a read"
    carried_bytes = sum(chunks)
    if reads is not None and sum(reads) != carried_bytes:
        why = (
            f"{sum(reads)} bytes, but its chunks carry {carried_bytes} (chunk_bytes): "
            "one byte stream, counted twice"
        )
        return "read_bytes", why
    bps = int(record["sample_rate"]) * 2
    carried = carried_bytes / bps if bps > 0 else 0.0
    audio = float(record["audio_s"])
    if abs(audio - carried) > _ABS_TOL + _REL_TOL * abs(carried):
        return "audio_s", (
            f"{audio:g} s, but its chunks carry {carried:g} s "
            "(sum(chunk_bytes) / (sample_rate x 2)): a figure apart from its timeline"
        )
    ttfa, wall = record["ttfa_s"], float(record["wall_s"])
    for name, value in (("ttfa_s", ttfa), ("wall_s", wall)):
        if value is not None and value < 0:
            return name, f"{value:g} s: a time from the request's start is never negative"
    if ttfa is not None and float(ttfa) > wall + _ABS_TOL + _REL_TOL * abs(wall):
        return "ttfa_s", (
            f"first audio at {float(ttfa):g} s, after the request's end (wall_s {wall:g} s)"
        )
    # The player's arrivals: its reads where it has them, else at most one per whole frame
    # (a record without reads may have derived them from reads since dropped, as in `/1`).
    if reads is not None:
        most, of = len(reads) - 1, f"{len(reads)} read(s)"
    else:
        most, of = carried_bytes // 2 - 1, f"{carried_bytes // 2} whole frame(s)"
    most = max(most, 0)
    for name in ("stalls", "underrun_events"):
        count = record[name]
        if not 0 <= count <= most:
            return name, f"{count}, but its {of} allow 0 to {most} (gaps between arrivals)"
    return None
