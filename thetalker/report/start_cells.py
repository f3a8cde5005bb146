"""ttfa.md's start cells (issue 50): the time to the first N seconds of audio with the streams
that never delivered N s, and the keys its CSV carries (thetalker.metrics.sessions defines
each figure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from thetalker.report.common import MISSING

__all__ = [
    "START_KEYS",
    "usable_start_cell",
    "usable_words",
    "plain",
    "start_header",
    "start_cells",
    "start_words",
]


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


def start_header(usable: str) -> list[str]:
    """ttfa.md's start columns for `usable` (`usable_words`)."""
    return [f"to {usable} p50", f"to {usable} p90", "audible p99/p50", "audible IQR", "in flight"]


def start_cells(s: Mapping[str, Any] | None) -> list[str]:
    """One point's start cells, in `start_header`'s order."""
    get = (s or {}).get
    return [
        usable_start_cell(s, "time_to_usable_audio_s_p50"),
        usable_start_cell(s, "time_to_usable_audio_s_p90"),
        plain(get("ttfa_audible_p99_over_p50"), 2),
        plain(get("ttfa_audible_iqr_s"), 3),
        plain(get("sessions_in_flight"), 2),
    ]


def start_words(usable: str) -> str:
    """The caption's words on the start columns."""
    return (
        f"To {usable}: when a stream had delivered its first {usable} of audio (the chunk that "
        "completes them; (k short): ok streams that never did, left out); audible p99/p50 and "
        "IQR (p75 - p25): the spread of the audible tail; in flight: the mean streams in "
        "flight, by Little's law (thetalker.metrics.sessions)."
    )
