"""ttfa.md's start cells (issue 50): the time to the first N seconds of audio with the streams
that never delivered N s, and the keys its CSV carries (thetalker.metrics.sessions defines
each figure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from thetalker.report.common import MISSING

__all__ = ["START_KEYS", "usable_start_cell", "usable_words", "plain"]


def plain(value: Any, digits: int) -> str:
    return MISSING if value is None else f"{float(value):.{digits}f}"


# Issue 50's start figures (thetalker.metrics.sessions), beside first byte and first audible.
START_KEYS = (
    "usable_audio_s",
    "time_to_usable_audio_s_p50",
    "time_to_usable_audio_s_p90",
    "n_short_of_usable_audio",
    "ttfa_audible_p99_over_p50",
    "ttfa_audible_iqr_s",
    "sessions_in_flight",
)


def usable_start_cell(s: Mapping[str, Any] | None, key: str) -> str:
    """Time to the first N s of audio, with the streams that never delivered N s."""
    short = int((s or {}).get("n_short_of_usable_audio") or 0)
    return plain((s or {}).get(key), 3) + (f" ({short} short)" if short else "")


def usable_words(points: pd.DataFrame) -> str:
    """`2 s` (report.usable_audio_s, as points.csv has it), or N for a mixed/absent one."""
    values = set(points.get("usable_audio_s", pd.Series(dtype=float)).dropna())
    return f"{values.pop():g} s" if len(values) == 1 else "N s"
