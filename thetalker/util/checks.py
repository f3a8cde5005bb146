"""One input check, one message: `{source} field {name}: {why}`.

The same ranges hold for a config (thetalker.pipeline.job_from_config, which builds its
checks from the job's), a job spec (thetalker.pipeline.job) and a load point's options
(thetalker.client.options, so thetalker-bench too): each range is written once here, as a
function giving why a value is refused (or None), and every refusal reads the same way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

__all__ = [
    "field_message",
    "json_object",
    "at_least",
    "finite_seconds",
    "fraction",
    "positive_int_or_none",
    "positive_rate",
]


def field_message(source: str, name: str, why: str) -> str:
    """`config field requests.8: must be at least 1 (got 0)`."""
    return f"{source} field {name}: {why}"


def json_object(
    text: str,
    where: str,
    error: Callable[[str], Exception],
    not_object: str = "expected a JSON object",
) -> dict[str, Any]:
    """`text` parsed as a JSON object; else `error("{where}: {why}")` is raised, the why
    being the parser's reason (`not valid JSON (...)`) or `not_object`."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{where}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise error(f"{where}: {not_object}")
    return data


def at_least(value: Any, low: int) -> str | None:
    """An integer count with a floor (concurrency 1, warmup 0, ...)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        return f"must be {'0 or more' if low == 0 else f'at least {low}'} (got {value!r})"
    return None


def _finite_above_zero(value: float, what: str) -> str | None:
    if not (math.isfinite(value) and value > 0):  # false for nan too
        return f"must be a finite {what} > 0 (got {value})"
    return None


def finite_seconds(value: float) -> str | None:
    return _finite_above_zero(value, "number of seconds")


def positive_rate(value: float) -> str | None:
    return _finite_above_zero(value, "rate")


def fraction(value: float) -> str | None:
    if not 0 <= value <= 1:  # false for nan too
        return f"must be within 0..1 (got {value})"
    return None


def positive_int_or_none(value: Any) -> str | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        return f"must be a positive integer or null (got {value!r})"
    return None
