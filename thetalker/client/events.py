"""A server's event as JSON, read so that no event can end the run.

Python's `json` raises more than `JSONDecodeError` on text it cannot take: RecursionError for
a value nested past the interpreter's depth (200,000 `[`), a plain ValueError for an integer
of more than 4,300 digits. One such event on an agent socket ended the run in an
ExceptionGroup, and over SSE it ended the record writer ("writing records failed"), losing
every record of the point. `load_event` turns every one of them into `BadEvent` (the
request fails `bad_event` with a short reason), and `shallow` keeps what a record stores of
an event bounded in depth, so the records writer and readers never meet such a value.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["MAX_KEPT_DEPTH", "BadEvent", "load_event", "shallow", "short_text"]

# The deepest value a record keeps from a server's event (an `error` object is 1 or 2 deep):
# deeper, it is kept as a note. Far below the interpreter's recursion limit (1,000), so no
# writer or reader of the record recurses out.
MAX_KEPT_DEPTH = 16
# The most of an event's text a failure's message quotes.
_QUOTED_CHARS = 80


class BadEvent(ValueError):
    """An event the client cannot read as JSON; the message is a short reason."""


def load_event(raw: str | bytes) -> Any:
    """The event's value (a server's NaN or Infinity read as null: records are standard
    JSON), or BadEvent naming why it cannot be read."""
    try:
        return json.loads(raw, parse_constant=_null, parse_float=_finite_or_null)
    except RecursionError:
        raise BadEvent("an event nested too deep for JSON") from None
    except json.JSONDecodeError:
        raise BadEvent(f"an event that is not JSON: {_quote(raw)}") from None
    except ValueError as exc:  # e.g. an integer past Python's 4,300 digits
        raise BadEvent(f"an event JSON cannot take: {short_text(exc, 120)}") from None


def _null(_token: str) -> None:
    return None


def _finite_or_null(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


def _quote(raw: str | bytes) -> str:
    return repr(raw[:_QUOTED_CHARS])


def depth_of(value: Any, limit: int) -> int:
    """How deep `value` nests (a scalar: 0), counted without recursion up to `limit + 1`."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth) for child in children)
    return deepest


def shallow(value: Any, limit: int = MAX_KEPT_DEPTH) -> Any:
    """`value` when it nests at most `limit` deep, else a note saying it was left out."""
    if depth_of(value, limit) <= limit:
        return value
    return f"(a value nested deeper than {limit} levels, not kept)"


def short_text(value: Any, limit: int = 300) -> str:
    """`str(value)` cut to `limit` characters; a value too deep to print is named as such."""
    try:
        return str(value)[:limit]
    except (RecursionError, ValueError):  # ValueError: an integer too long to print
        return "(a value too deep or too long to print)"
