"""Per-point figures of sessions and starts: streams in flight, time to a usable start of
speech, and the spread of the first-audio tail (issue 50). Pure, no I/O.

- `sessions_in_flight`: the mean number of streams in flight over the scored window, by
  Little's law: the sum of the sent requests' durations over the window. A closed loop of c
  streams gives just under c (the ramp up and the drain); an open loop, its arrival rate
  times the mean duration. The client's own `max_in_flight` (summary.json) bounds it.
- `time_to_audio_s`: when a stream had delivered its first `seconds` of audio, from its
  chunk timeline and sample rate (the arrival of the chunk that completes them). A stream
  that never delivered that much has none (counted apart, never made up).
- `tail_spread`: p99 / p50 and the interquartile range (p75 - p25) of a set of times, so two
  servers with the same p95 but different tails are told apart.

Definitions with hand-checkable numbers: tutorials/03-streaming-metrics.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from thetalker.metrics.stream import bytes_per_second, valid_timeline

__all__ = [
    "DEFAULT_USABLE_AUDIO_S",
    "TIME_TO_AUDIO_KEY",
    "sessions_in_flight",
    "time_to_audio_s",
    "record_time_to_audio_s",
    "tail_spread",
]

# The usable start of speech: the first 2 s of audio (config `report.usable_audio_s`).
DEFAULT_USABLE_AUDIO_S = 2.0
# Where a slim record (`point_fields`) keeps (seconds, its time to that much audio).
TIME_TO_AUDIO_KEY = "_time_to_audio_s"


def sessions_in_flight(durations_s: Iterable[float | None], window_s: float) -> float | None:
    """Mean streams in flight over `window_s` (Little's law): sum of durations / window.
    None for an empty window; a request without a duration counts 0."""
    if window_s <= 0:
        return None
    return sum(float(d) for d in durations_s if d is not None) / window_s


def time_to_audio_s(
    arrivals_s: Sequence[float], sizes: Sequence[int], sample_rate: int, seconds: float
) -> float | None:
    """Arrival (s since sent) of the chunk with which the stream's audio reached `seconds`
    (16-bit mono); None when it never did or the timeline is not one."""
    bps = bytes_per_second(sample_rate)
    if not valid_timeline(arrivals_s, sizes, bps):
        return None
    need = seconds * bps
    total = 0
    for t, size in zip(arrivals_s, sizes, strict=True):
        total += int(size)
        if total >= need:
            return float(t)
    return None


def record_time_to_audio_s(record: Mapping[str, Any], seconds: float) -> float | None:
    """A record's `time_to_audio_s` from its chunk timeline (or its slim form's kept value
    for the same `seconds`); None for a failed record."""
    kept = record.get(TIME_TO_AUDIO_KEY)
    if kept is not None and float(kept[0]) == float(seconds):
        return kept[1]
    if not record.get("ok"):
        return None
    return time_to_audio_s(
        record.get("chunk_arrival_s") or [],
        record.get("chunk_bytes") or [],
        int(record.get("sample_rate") or 0),
        seconds,
    )


def tail_spread(values: Iterable[float | None]) -> dict[str, float | None]:
    """`p99_over_p50` (None when p50 is 0 or there is no value) and `iqr` (p75 - p25),
    numpy's linear percentiles as everywhere else."""
    data = np.asarray([v for v in values if v is not None], dtype=float)
    if not data.size:
        return {"p99_over_p50": None, "iqr": None}
    p25, p50, p75, p99 = (float(x) for x in np.percentile(data, [25, 50, 75, 99]))
    return {"p99_over_p50": p99 / p50 if p50 > 0 else None, "iqr": p75 - p25}
