"""Stream figures of one request: continuity (a real-time player's deficit), stalls,
playback time (the audible onset itself: thetalker.metrics.onset); the player's view at several
thresholds.

The failure this module exists to catch: a server whose aggregate RTFx is far above 1
while one stream's chunks arrive in bursts that a listener hears as gaps. Aggregate
throughput cannot see that; a per-stream player simulation can. Pure numpy, no I/O.
Times are seconds from `time.perf_counter()`; audio is signed 16-bit little-endian PCM.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "CONTINUITY_THRESHOLD_S",
    "PERCENTILES",
    "ContinuityStats",
    "StallStats",
    "bytes_per_second",
    "compute_continuity_stats",
    "compute_stalls",
    "playback_time_s",
    "CONTINUITY_THRESHOLDS_S",
    "continuous_at",
    "perceived_first_audio_s",
    "playable_timeline",
]

# Upstream's default: a gap a listener barely notices (vllm-omni audio_continuity.py).
CONTINUITY_THRESHOLD_S = 0.1
PERCENTILES = (50, 90, 95, 99)

# The audible onset is thetalker.metrics.onset's (the public report's absolute rule); the
# relative rule that was here (5% of the utterance's peak) answered 0 for silence: gone.


def bytes_per_second(sample_rate: int, sample_width_bytes: int = 2, channels: int = 1) -> int:
    return int(sample_rate) * int(sample_width_bytes) * int(channels)


@dataclass(frozen=True)
class ContinuityStats:
    """Upstream's continuity result.

    max_underrun_s: the largest deficit of a player that started at the first chunk
        with no prebuffer and never pauses; also the smallest prebuffer that would
        have avoided every underrun.
    underrun_event_count: arrivals that found the player behind (not distinct stalls).
    is_continuous: max_underrun_s <= threshold (inclusive).
    """

    max_underrun_s: float = 0.0
    underrun_event_count: int = 0
    is_continuous: bool = True


def valid_timeline(arrival_s: Sequence[float], nbytes: Sequence[int], bps: float) -> bool:
    return len(arrival_s) > 0 and len(arrival_s) == len(nbytes) and bps > 0


def compute_continuity_stats(
    chunk_arrival_times_s: Sequence[float],
    chunk_bytes: Sequence[int],
    sample_rate: int = 24000,
    sample_width: int = 2,
    channels: int = 1,
    threshold_s: float = CONTINUITY_THRESHOLD_S,
) -> ContinuityStats:
    """vllm-omni's `compute_continuity_stats`, exactly, under upstream's keyword names.

    `chunk_arrival_times_s`: seconds since the request was sent at which each non-empty
    chunk's last byte arrived (a record's `chunk_arrival_s`); `sample_width`: bytes per
    sample (2 = s16le). At each chunk i >= 1, before its bytes are added, the deficit is
    `(t_i - t_0) * bps - bytes(0..i-1)`; a strictly positive deficit is one event.
    Nothing is checked after the last chunk.
    """
    bps = bytes_per_second(sample_rate, sample_width, channels)
    if not valid_timeline(chunk_arrival_times_s, chunk_bytes, bps):
        return ContinuityStats()
    t0 = float(chunk_arrival_times_s[0])
    received = int(chunk_bytes[0])
    max_underrun_s = 0.0
    events = 0
    for t_i, b_i in zip(chunk_arrival_times_s[1:], chunk_bytes[1:], strict=True):
        deficit = (float(t_i) - t0) * bps - received
        if deficit > 0:
            events += 1
            max_underrun_s = max(max_underrun_s, deficit / bps)
        received += int(b_i)
    return ContinuityStats(max_underrun_s, events, max_underrun_s <= threshold_s)


@dataclass(frozen=True)
class StallStats:
    """Distinct stall episodes of a player that pauses when its buffer runs dry and
    resumes when data arrives (upstream's event count counts arrivals instead)."""

    stalls: int = 0
    stall_s: float = 0.0


# Below a nanosecond a "gap" is float noise between back-to-back chunks.
_STALL_EPSILON_S = 1e-9


def chunk_play_starts(
    chunk_arrival_s: Sequence[float], chunk_bytes: Sequence[int], bps: float
) -> tuple[np.ndarray, np.ndarray]:
    """When a pausing player starts and ends each chunk (seconds, same clock as arrivals).

    The player starts chunk i at max(arrival_i, end of chunk i-1). Between two restarts (a
    chunk that arrives after the player ran dry) each chunk starts where the last ended, so
    a run of chunks is one running sum from its restart: numpy's `add.accumulate` adds in
    order, the very additions of a chunk-by-chunk loop, so the figures are the loop's to
    the last bit; one array pass per restart instead of Python work per chunk."""
    t = np.asarray(chunk_arrival_s, dtype=float)
    duration = np.asarray(chunk_bytes, dtype=np.int64) / bps
    n = t.size
    starts = np.empty(n)
    ends = np.empty(n)
    k = 0
    play_end = -np.inf
    while k < n:
        first = max(float(t[k]), play_end)
        run = np.add.accumulate(np.concatenate(([first], duration[k:])))
        dry = np.flatnonzero(t[k + 1 :] > run[1:-1])  # chunks that find the player idle
        stop = n if dry.size == 0 else k + 1 + int(dry[0])
        starts[k:stop] = run[: stop - k]
        ends[k:stop] = run[1 : stop - k + 1]
        play_end = float(ends[stop - 1])
        k = stop
    return starts, ends


def playable_timeline(
    read_arrival_s: Sequence[float], read_bytes: Sequence[int], frame_bytes: int = 2
) -> tuple[list[float], list[int]]:
    """What a player can play as the reads arrive: each read's whole PCM frames.

    A read that ends mid-frame leaves its odd bytes for the next read (they are played when
    the frame is whole); a read that completes no frame is not a playable arrival (its bytes
    wait). Bytes still left over after the last read are a half frame and are dropped. Input
    of different lengths or `frame_bytes <= 0` gives an empty timeline.
    """
    if len(read_arrival_s) != len(read_bytes) or frame_bytes <= 0:
        return [], []
    arrivals: list[float] = []
    sizes: list[int] = []
    carry = 0
    for t, n in zip(read_arrival_s, read_bytes, strict=True):
        carry += int(n)
        whole = carry - carry % frame_bytes
        if whole:
            arrivals.append(float(t))
            sizes.append(whole)
            carry -= whole
    return arrivals, sizes


def compute_stalls(
    chunk_arrival_s: Sequence[float],
    chunk_bytes: Sequence[int],
    sample_rate: int = 24000,
    sample_width_bytes: int = 2,
    channels: int = 1,
) -> StallStats:
    bps = bytes_per_second(sample_rate, sample_width_bytes, channels)
    if not valid_timeline(chunk_arrival_s, chunk_bytes, bps):
        return StallStats()
    starts, ends = chunk_play_starts(chunk_arrival_s, chunk_bytes, bps)
    gaps = starts[1:] - ends[:-1]
    stalled = gaps > _STALL_EPSILON_S
    return StallStats(int(stalled.sum()), float(gaps[stalled].sum()))


def playback_time_s(
    chunk_arrival_s: Sequence[float],
    chunk_bytes: Sequence[int],
    audio_position_s: float,
    sample_rate: int,
    sample_width_bytes: int = 2,
    channels: int = 1,
) -> float | None:
    """When a pausing real-time player that starts at the first byte plays the sample
    at `audio_position_s` (same clock as the arrivals); None when no such audio came."""
    bps = bytes_per_second(sample_rate, sample_width_bytes, channels)
    if not valid_timeline(chunk_arrival_s, chunk_bytes, bps):
        return None
    target_byte = audio_position_s * bps
    starts, _ = chunk_play_starts(chunk_arrival_s, chunk_bytes, bps)
    before = 0
    for start, nbytes in zip(starts, chunk_bytes, strict=True):
        if target_byte < before + int(nbytes):
            return float(start + (target_byte - before) / bps)
        before += int(nbytes)
    return None


# --- the player's view: continuity at several thresholds, perceived first audio ---------

# Upstream's 0.1 s stays the headline; 50 and 200 ms bracket it (sglang-omni's practice).
CONTINUITY_THRESHOLDS_S = (0.05, 0.1, 0.2)


def continuous_at(record: Mapping[str, Any], threshold_s: float) -> bool:
    """Whether one record played without falling more than `threshold_s` behind.

    From the record's `max_underrun_s` alone, so any threshold can be asked after the run;
    a failed request, or one without audio, is never continuous (as in `continuity_pct`).
    """
    if not record.get("ok") or record.get("ttfa_s") is None:
        return False
    return float(record.get("max_underrun_s") or 0.0) <= threshold_s


def perceived_first_audio_s(record: Mapping[str, Any]) -> float | None:
    """First byte plus the prebuffer a player needs to play this stream with no gap.

    `ttfa_s + max_underrun_s` (`max_underrun_s` is that smallest prebuffer): what a listener
    waits when the player trades start-up delay for gaplessness. None for a failed request
    or one without audio.
    """
    if not record.get("ok") or record.get("ttfa_s") is None:
        return None
    return float(record["ttfa_s"]) + float(record.get("max_underrun_s") or 0.0)
