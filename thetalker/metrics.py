"""Every figure TheTalker reports, computed in one place.

The failure this module exists to catch: a server whose aggregate RTFx is far above 1
while one stream's chunks arrive in bursts that a listener hears as gaps. Aggregate
throughput cannot see that; a per-stream player simulation can.

Pure functions over plain sequences and numpy arrays: stdlib and numpy only, no I/O,
so the client, the workflow, the report and the tests all mean the same thing by
"continuous" (definitions: docs/metrics.md). Times are seconds from
`time.perf_counter()`; audio is signed 16-bit little-endian PCM.

Degenerate input (no chunks, lists of different length, a non-positive byte rate)
gets a neutral, documented answer rather than an exception, so one bad record never
stops a summary, and a bad timeline never yields a plausible-looking number.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
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
    "leading_silence_s",
    "playback_time_s",
    "request_figures",
    "percentiles",
    "summarize_point",
    "usd_per_million_chars",
    "point_cost",
]

# Upstream's default: a gap a listener barely notices (vllm-omni audio_continuity.py).
CONTINUITY_THRESHOLD_S = 0.1
PERCENTILES = (50, 90, 95, 99)

# Audible onset: 5 ms windows, loud when the RMS reaches 5% of the utterance's peak
# absolute sample; 4 loud windows in a row (20 ms) start the onset.
ONSET_WINDOW_S = 0.005
ONSET_LOUD_FRACTION = 0.05
ONSET_RUN_WINDOWS = 4


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


def _valid_timeline(arrival_s: Sequence[float], nbytes: Sequence[int], bps: float) -> bool:
    return len(arrival_s) > 0 and len(arrival_s) == len(nbytes) and bps > 0


def compute_continuity_stats(
    chunk_arrival_s: Sequence[float],
    chunk_bytes: Sequence[int],
    sample_rate: int = 24000,
    sample_width_bytes: int = 2,
    channels: int = 1,
    threshold_s: float = CONTINUITY_THRESHOLD_S,
) -> ContinuityStats:
    """vllm-omni's `compute_continuity_stats`, exactly.

    At each chunk i >= 1, before its bytes are added, the deficit is
    `(t_i - t_0) * bps - bytes(0..i-1)`; a strictly positive deficit is one event.
    Nothing is checked after the last chunk.
    """
    bps = bytes_per_second(sample_rate, sample_width_bytes, channels)
    if not _valid_timeline(chunk_arrival_s, chunk_bytes, bps):
        return ContinuityStats()
    t0 = float(chunk_arrival_s[0])
    received = int(chunk_bytes[0])
    max_underrun_s = 0.0
    events = 0
    for t_i, b_i in zip(chunk_arrival_s[1:], chunk_bytes[1:], strict=True):
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


def _chunk_play_starts(
    chunk_arrival_s: Sequence[float], chunk_bytes: Sequence[int], bps: float
) -> tuple[np.ndarray, np.ndarray]:
    """When a pausing player starts and ends each chunk (seconds, same clock as arrivals)."""
    starts = np.empty(len(chunk_arrival_s))
    ends = np.empty(len(chunk_arrival_s))
    play_end = -np.inf
    for i, (t_i, b_i) in enumerate(zip(chunk_arrival_s, chunk_bytes, strict=True)):
        start = max(float(t_i), play_end)
        starts[i] = start
        play_end = start + int(b_i) / bps
        ends[i] = play_end
    return starts, ends


def compute_stalls(
    chunk_arrival_s: Sequence[float],
    chunk_bytes: Sequence[int],
    sample_rate: int = 24000,
    sample_width_bytes: int = 2,
    channels: int = 1,
) -> StallStats:
    bps = bytes_per_second(sample_rate, sample_width_bytes, channels)
    if not _valid_timeline(chunk_arrival_s, chunk_bytes, bps):
        return StallStats()
    starts, ends = _chunk_play_starts(chunk_arrival_s, chunk_bytes, bps)
    gaps = starts[1:] - ends[:-1]
    stalled = gaps > _STALL_EPSILON_S
    return StallStats(int(stalled.sum()), float(gaps[stalled].sum()))


def leading_silence_s(pcm: bytes | np.ndarray, sample_rate: int) -> float:
    """Audio seconds before the audible onset (0 when no onset is found).

    5 ms windows; a window is loud when its RMS reaches 5% of the utterance's peak
    absolute sample; the onset is the first window that starts 4 loud windows in a row.
    """
    samples = _as_int16(pcm)
    window = max(1, int(round(ONSET_WINDOW_S * sample_rate)))
    n_windows = samples.size // window
    if n_windows < ONSET_RUN_WINDOWS or sample_rate <= 0:
        return 0.0
    frames = samples[: n_windows * window].astype(np.float64).reshape(n_windows, window)
    peak = float(np.abs(samples).max())
    if peak == 0.0:
        return 0.0
    rms = np.sqrt((frames**2).mean(axis=1))
    loud = rms >= ONSET_LOUD_FRACTION * peak
    # A run of 4 loud windows starts at i when the windowed sum over i..i+3 is 4.
    runs = np.convolve(loud.astype(np.int8), np.ones(ONSET_RUN_WINDOWS, np.int8), "valid")
    hits = np.flatnonzero(runs == ONSET_RUN_WINDOWS)
    return float(hits[0] * window / sample_rate) if hits.size else 0.0


def _as_int16(pcm: bytes | np.ndarray) -> np.ndarray:
    if isinstance(pcm, np.ndarray):
        return pcm.astype(np.int16, copy=False)
    usable = len(pcm) - len(pcm) % 2
    return np.frombuffer(pcm[:usable], dtype="<i2")


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
    if not _valid_timeline(chunk_arrival_s, chunk_bytes, bps):
        return None
    target_byte = audio_position_s * bps
    starts, _ = _chunk_play_starts(chunk_arrival_s, chunk_bytes, bps)
    before = 0
    for start, nbytes in zip(starts, chunk_bytes, strict=True):
        if target_byte < before + int(nbytes):
            return float(start + (target_byte - before) / bps)
        before += int(nbytes)
    return None


def request_figures(
    chunk_arrival_s: Sequence[float],
    chunk_bytes: Sequence[int],
    pcm: bytes | np.ndarray,
    sample_rate: int,
    threshold_s: float = CONTINUITY_THRESHOLD_S,
    sample_width_bytes: int = 2,
    channels: int = 1,
) -> dict[str, Any]:
    """The per-request figures written beside the raw timeline of a record.

    Arrival times are seconds since the request was sent, so `ttfa_s` is the first
    chunk's arrival. An empty timeline gives None for the times and 0 audio.
    """
    bps = bytes_per_second(sample_rate, sample_width_bytes, channels)
    total = int(sum(int(b) for b in chunk_bytes))
    audio_s = total / bps if bps > 0 else 0.0
    continuity = compute_continuity_stats(
        chunk_arrival_s, chunk_bytes, sample_rate, sample_width_bytes, channels, threshold_s
    )
    stalls = compute_stalls(chunk_arrival_s, chunk_bytes, sample_rate, sample_width_bytes, channels)
    has_audio = _valid_timeline(chunk_arrival_s, chunk_bytes, bps) and total > 0
    ttfa_s = float(chunk_arrival_s[0]) if has_audio else None
    silence_s = leading_silence_s(pcm, sample_rate) if has_audio else 0.0
    audible = (
        playback_time_s(
            chunk_arrival_s, chunk_bytes, silence_s, sample_rate, sample_width_bytes, channels
        )
        if has_audio
        else None
    )
    return {
        "ttfa_s": ttfa_s,
        "leading_silence_s": silence_s,
        "ttfa_audible_s": audible,
        "ttfa_audible_naive_s": (ttfa_s + silence_s) if ttfa_s is not None else None,
        "audio_s": audio_s,
        "max_underrun_s": continuity.max_underrun_s,
        "underrun_events": continuity.underrun_event_count,
        "continuity_ok": bool(has_audio and continuity.is_continuous),
        "stalls": stalls.stalls,
        "stall_s": stalls.stall_s,
    }


def percentiles(values: Iterable[float | None], qs: Sequence[int] = PERCENTILES) -> dict:
    """p50/p90/p95/p99 by linear interpolation (numpy's default) and n; None when empty."""
    data = np.asarray([v for v in values if v is not None], dtype=float)
    out: dict[str, Any] = {
        f"p{q}": (float(np.percentile(data, q)) if data.size else None) for q in qs
    }
    out["n"] = int(data.size)
    return out


def summarize_point(records: Iterable[Mapping[str, Any]], concurrency: int | None = None) -> dict:
    """One load point from its records (warmup records are ignored).

    A failed request counts as not continuous in `continuity_pct` (a player could not
    play it); `continuity_pct_ok_only` uses upstream's denominator. `chars_per_s`
    counts the characters of requests delivered continuously.
    """
    scored = [r for r in records if not r.get("warmup")]
    ok = [r for r in scored if r.get("ok")]
    n_scored, n_ok = len(scored), len(ok)
    sends = [float(r["t_submit_s"]) for r in scored]
    finishes = [float(r["t_submit_s"]) + float(r.get("wall_s") or 0.0) for r in scored]
    window_s = (max(finishes) - min(sends)) if scored else 0.0
    continuous = [r for r in ok if r.get("continuity_ok")]
    audio_s = sum(float(r.get("audio_s") or 0.0) for r in ok)
    chars = sum(int(r.get("text_chars") or 0) for r in continuous)

    def rate(x: float) -> float | None:
        return x / window_s if window_s > 0 else None

    def pct(num: int, den: int) -> float | None:
        return 100.0 * num / den if den else None

    return {
        "concurrency": concurrency,
        "n_scored": n_scored,
        "n_ok": n_ok,
        "n_failed": n_scored - n_ok,
        "error_rate": (n_scored - n_ok) / n_scored if n_scored else None,
        "window_s": window_s,
        "audio_s": audio_s,
        "rtfx": rate(audio_s),
        "continuity_pct": pct(len(continuous), n_scored),
        "continuity_pct_ok_only": pct(len(continuous), n_ok),
        "chars_per_s": rate(chars),
        "stalls_total": sum(int(r.get("stalls") or 0) for r in ok),
        "ttfa_s": percentiles(r.get("ttfa_s") for r in ok),
        "ttfa_audible_s": percentiles(r.get("ttfa_audible_s") for r in ok),
        "wall_s": percentiles(r.get("wall_s") for r in ok),
        "rtfx_per_request": percentiles(
            float(r["audio_s"]) / float(r["wall_s"]) for r in ok if r.get("wall_s")
        ),
    }


def usd_per_million_chars(gpu_hour_usd: float, chars_per_s: float | None) -> float | None:
    """Price of a million characters of speech at a sustained `chars_per_s`."""
    if not chars_per_s or chars_per_s <= 0:
        return None
    return gpu_hour_usd / (chars_per_s * 3600.0) * 1e6


def point_cost(
    summary: Mapping[str, Any], gpu_hour_usd: float, min_continuity_pct: float = 95.0
) -> float | None:
    """Cost of one load point, only where its streams were continuous enough to sell."""
    continuity = summary.get("continuity_pct")
    if continuity is None or continuity < min_continuity_pct:
        return None
    return usd_per_million_chars(gpu_hour_usd, summary.get("chars_per_s"))
