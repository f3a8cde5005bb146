"""Every figure TheTalker reports, computed in one place.

The failure this module exists to catch: a server whose aggregate RTFx is far above 1
while one stream's chunks arrive in bursts that a listener hears as gaps. Aggregate
throughput cannot see that; a per-stream player simulation can.

Pure functions over plain sequences and numpy arrays, no I/O, so the client, the
workflow, the report and the tests all mean the same thing by "continuous"
(definitions: docs/metrics.md). The intervals beside every headline figure (bootstrap,
Wilson, t over repeats) are scipy's, imported only where an interval is computed.
Times are seconds from `time.perf_counter()`; audio is signed 16-bit little-endian PCM.

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
    "request_metrics",
    "request_figures",
    "percentiles",
    "summarize_point",
    "usd_per_million_chars",
    "point_cost",
    "CONTINUITY_THRESHOLDS_S",
    "continuous_at",
    "perceived_first_audio_s",
    "CONFIDENCE",
    "N_RESAMPLES",
    "Interval",
    "bootstrap",
    "percentile_interval",
    "wilson_pct",
    "continuity_interval",
    "rtfx_bootstrap",
    "repeats_interval",
    "rtfx_interval",
    "paired_interval",
    "welch_interval",
    "rtfx_ratio_interval",
    "rtfx_change_bootstrap",
    "percentile_change_bootstrap",
    "continuity_change_bootstrap",
    "point_intervals",
    "unit_text_sent_s",
    "agent_figures",
    "agent_intervals",
    "summarize_agent",
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
    if not _valid_timeline(chunk_arrival_times_s, chunk_bytes, bps):
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


def request_metrics(
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


# Deprecated: the old name (it read like report/figures.py, which draws plots). Kept because
# `request_figures` was public; new code uses request_metrics.
request_figures = request_metrics


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
    window_s = _window(scored)
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


# --- the player's view: continuity at several thresholds, perceived first audio ---------

# Upstream's 0.1 s stays the headline; 50 and 200 ms bracket it (sglang-omni's practice).
CONTINUITY_THRESHOLDS_S = (0.05, 0.1, 0.2)


def _scored(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if not r.get("warmup")]


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


# --- intervals ---------------------------------------------------------------------------
#
# One implementation of every interval the tables print. Bootstrap intervals are scipy's
# percentile bootstrap (the method of wer.md's interval, and well defined on small or tied
# samples where BCa's jackknife degenerates), seeded, so a rebuild prints the same digits.
# scipy is imported where it is used: the client computes no interval and need not load it.

CONFIDENCE = 0.95
N_RESAMPLES = 10_000
SEED = 0
# Resamples evaluated at once: bounds memory at about this many x n floats.
_BATCH = 1000

METHOD_BOOTSTRAP = "bootstrap"  # percentile bootstrap over requests
METHOD_WILSON = "wilson"  # Wilson score interval of a proportion
METHOD_REPEATS = "repeats-t"  # Student t over the N rounds of a point
METHOD_PAIRED = "paired-t"  # Student t over the per-round differences (or log ratios)
METHOD_WELCH = "welch-t"  # Welch t over the rounds of two independent runs
METHOD_NONE = "none"  # too little data for an interval: value only


@dataclass(frozen=True)
class Interval:
    """A figure and its two-sided interval at `confidence`.

    value: the estimate (None when there is no data). low/high: the bounds (None when the
    data cannot give an interval: no data, or a single observation). method: one of the
    METHOD_* names. n: the observations behind it (requests, or rounds for repeats).
    """

    value: float | None
    low: float | None
    high: float | None
    method: str
    n: int
    confidence: float = CONFIDENCE

    @property
    def half_width(self) -> float | None:
        if self.low is None or self.high is None:
            return None
        return (self.high - self.low) / 2.0

    def excludes(self, reference: float) -> bool:
        """True when the interval lies wholly on one side of `reference` (0 for a
        difference, 1 for a ratio): the change is distinguishable from noise."""
        if self.low is None or self.high is None:
            return False
        return self.low > reference or self.high < reference


def _none_interval(method: str, n: int = 0, value: float | None = None) -> Interval:
    return Interval(value, None, None, method if value is not None else METHOD_NONE, n)


def _finite(x: Any) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None


def bootstrap(
    samples: Sequence[Sequence[float] | np.ndarray],
    statistic: Any,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
    confidence: float = CONFIDENCE,
) -> Interval:
    """Percentile bootstrap of `statistic(*samples, axis=-1)` (vectorized over `axis`).

    With two or more samples each is resampled on its own (two independent runs). Any
    sample with fewer than 2 values: the value with no interval; any empty: no value.
    """
    from scipy import stats

    arrays = [np.asarray(s, dtype=float) for s in samples]
    n = min(a.size for a in arrays)
    if n == 0:
        return _none_interval(METHOD_BOOTSTRAP)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = _finite(statistic(*arrays, axis=-1))
    if n < 2 or value is None:
        return _none_interval(METHOD_BOOTSTRAP, n, value)
    with np.errstate(divide="ignore", invalid="ignore"):
        res = stats.bootstrap(
            tuple(arrays),
            statistic,
            n_resamples=n_resamples,
            batch=_BATCH,
            vectorized=True,
            paired=False,
            axis=-1,
            confidence_level=confidence,
            method="percentile",
            rng=np.random.default_rng(seed),
        )
    low, high = _finite(res.confidence_interval.low), _finite(res.confidence_interval.high)
    if low is None or high is None:
        return _none_interval(METHOD_BOOTSTRAP, n, value)
    return Interval(value, low, high, METHOD_BOOTSTRAP, n, confidence)


def percentile_interval(
    values: Iterable[float | None], q: float, seed: int = SEED, **kw: Any
) -> Interval:
    """Percentile `q` (linear interpolation, as `percentiles`) with a bootstrap over values."""
    data = [float(v) for v in values if v is not None]

    def stat(x: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.percentile(x, q, axis=axis)

    return bootstrap([data], stat, seed=seed, **kw)


def wilson_pct(successes: int, n: int, confidence: float = CONFIDENCE) -> Interval:
    """A proportion in percent with its Wilson score interval (scipy's binomtest).

    Never certain from a finite sample: 10 of 10 gives [72.2, 100]. n = 0: no value.
    """
    from scipy import stats

    if n <= 0:
        return _none_interval(METHOD_WILSON)
    ci = stats.binomtest(int(successes), int(n)).proportion_ci(confidence, method="wilson")
    low, high = 100.0 * float(ci.low), 100.0 * float(ci.high)
    return Interval(100.0 * successes / n, low, high, METHOD_WILSON, int(n), confidence)


def continuity_interval(
    records: Iterable[Mapping[str, Any]], threshold_s: float | None = None
) -> Interval:
    """`continuity_pct` of the scored records with its Wilson interval.

    threshold_s None: the recorded `continuity_ok` (the run's threshold, the headline);
    a number: `continuous_at` that threshold. A failed request counts as not continuous.
    """
    scored = _scored(records)
    if threshold_s is None:
        k = sum(1 for r in scored if r.get("ok") and r.get("continuity_ok"))
    else:
        k = sum(1 for r in scored if continuous_at(r, threshold_s))
    return wilson_pct(k, len(scored))


def _window(scored: Sequence[Mapping[str, Any]]) -> float:
    sends = [float(r["t_submit_s"]) for r in scored]
    finishes = [float(r["t_submit_s"]) + float(r.get("wall_s") or 0.0) for r in scored]
    return (max(finishes) - min(sends)) if scored else 0.0


def _delivered_audio_s(scored: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """Per scored request, the audio it counts for in RTFx (0 for a failed one)."""
    return np.array([float(r.get("audio_s") or 0.0) if r.get("ok") else 0.0 for r in scored])


def rtfx_bootstrap(records: Iterable[Mapping[str, Any]], seed: int = SEED, **kw: Any) -> Interval:
    """RTFx of one run with a bootstrap over its requests, the window kept.

    Each resample draws the scored requests with replacement (failed ones count 0 audio)
    and divides their audio seconds by the run's own `window_s`: the spread of what the
    requests delivered, at the load the run held. It does not see run-to-run drift (a
    warmer server, a noisy neighbour); only repeats do.
    """
    scored = _scored(records)
    window_s = _window(scored)
    if window_s <= 0:
        return _none_interval(METHOD_BOOTSTRAP, len(scored))

    def stat(audio: np.ndarray, axis: int = -1) -> np.ndarray:
        return audio.sum(axis=axis) / window_s

    return bootstrap([_delivered_audio_s(scored)], stat, seed=seed, **kw)


def repeats_interval(values: Sequence[float | None], confidence: float = CONFIDENCE) -> Interval:
    """Mean of N rounds of one point with a Student t interval (N - 1 degrees of freedom).

    Rounds with no value are left out; one round: its value, no interval.
    """
    from scipy import stats

    data = np.array([float(v) for v in values if v is not None])
    if data.size == 0:
        return _none_interval(METHOD_REPEATS)
    mean = float(data.mean())
    if data.size < 2:
        return _none_interval(METHOD_REPEATS, 1, mean)
    if np.ptp(data) == 0.0:  # identical rounds: t's scale is 0, the interval a point
        return Interval(mean, mean, mean, METHOD_REPEATS, int(data.size), confidence)
    ci = stats.ttest_1samp(data, 0.0).confidence_interval(confidence)
    return Interval(mean, float(ci.low), float(ci.high), METHOD_REPEATS, int(data.size), confidence)


def rtfx_interval(
    rounds: Sequence[Iterable[Mapping[str, Any]]], seed: int = SEED, **kw: Any
) -> Interval:
    """RTFx of a point run `len(rounds)` times: from repeats when N > 1 (mean of the
    rounds' RTFx, t interval), else the one run's `rtfx_bootstrap`."""
    rounds = [list(r) for r in rounds]
    if len(rounds) == 1:
        return rtfx_bootstrap(rounds[0], seed=seed, **kw)
    return repeats_interval([summarize_point(r)["rtfx"] for r in rounds])


def paired_interval(
    a: Sequence[float], b: Sequence[float], ratio: bool = False, confidence: float = CONFIDENCE
) -> Interval:
    """System A against system B over the same rounds, paired by round.

    ratio False: mean of A_k - B_k with a t interval of the paired differences;
    ratio True: geometric mean of A_k / B_k, t interval on log ratios, bounds exponentiated.
    Rounds where either side has no value (or, for a ratio, is not positive) are dropped.
    """
    from scipy import stats

    pairs = [
        (float(x), float(y))
        for x, y in zip(a, b, strict=True)
        if x is not None and y is not None and (not ratio or (x > 0 and y > 0))
    ]
    if not pairs:
        return _none_interval(METHOD_PAIRED)
    x, y = np.array(pairs).T
    d = np.log(x / y) if ratio else x - y
    back = np.exp if ratio else (lambda v: v)
    mean = float(d.mean())
    if d.size < 2:
        return _none_interval(METHOD_PAIRED, 1, float(back(mean)))
    if np.ptp(d) == 0.0:
        v = float(back(mean))
        return Interval(v, v, v, METHOD_PAIRED, int(d.size), confidence)
    ci = stats.ttest_1samp(d, 0.0).confidence_interval(confidence)
    return Interval(
        float(back(mean)),
        float(back(ci.low)),
        float(back(ci.high)),
        METHOD_PAIRED,
        int(d.size),
        confidence,
    )


def welch_interval(
    a: Sequence[float], b: Sequence[float], ratio: bool = False, confidence: float = CONFIDENCE
) -> Interval:
    """A against B over the rounds of two independent runs (not paired): Welch's t of
    mean(A) - mean(B), or with ratio True of the mean log values (a geometric-mean ratio)."""
    from scipy import stats

    def clean(v: Sequence[float]) -> np.ndarray:
        data = np.array([float(x) for x in v if x is not None])
        return np.log(data[data > 0]) if ratio else data

    x, y = clean(a), clean(b)
    back = np.exp if ratio else (lambda v: v)
    if x.size == 0 or y.size == 0:
        return _none_interval(METHOD_WELCH)
    value = float(back(x.mean() - y.mean()))
    if x.size < 2 or y.size < 2 or (np.ptp(x) == 0.0 and np.ptp(y) == 0.0):
        return _none_interval(METHOD_WELCH, min(x.size, y.size), value)
    ci = stats.ttest_ind(x, y, equal_var=False).confidence_interval(confidence)
    n = int(min(x.size, y.size))
    return Interval(value, float(back(ci.low)), float(back(ci.high)), METHOD_WELCH, n, confidence)


def rtfx_ratio_interval(
    rounds_a: Sequence[Iterable[Mapping[str, Any]]],
    rounds_b: Sequence[Iterable[Mapping[str, Any]]],
    seed: int = SEED,
    **kw: Any,
) -> Interval:
    """RTFx(A) / RTFx(B) at one point with its interval.

    Both run N > 1 rounds on one server session each (`repeats`): paired by round,
    `paired_interval(ratio=True)`. One round each (or unequal N): a bootstrap over each
    run's requests, resampled independently, each run's window kept.
    """
    rounds_a, rounds_b = [list(r) for r in rounds_a], [list(r) for r in rounds_b]
    if len(rounds_a) > 1 and len(rounds_a) == len(rounds_b):
        rtfx_a = [summarize_point(r)["rtfx"] for r in rounds_a]
        rtfx_b = [summarize_point(r)["rtfx"] for r in rounds_b]
        return paired_interval(rtfx_a, rtfx_b, ratio=True)
    return rtfx_change_bootstrap(_pool(rounds_a), _pool(rounds_b), ratio=True, seed=seed, **kw)


def _pool(rounds: Sequence[Sequence[Mapping[str, Any]]]) -> list[Mapping[str, Any]]:
    return [r for one in rounds for r in one]


def rtfx_change_bootstrap(
    records_a: Iterable[Mapping[str, Any]],
    records_b: Iterable[Mapping[str, Any]],
    ratio: bool = True,
    seed: int = SEED,
    **kw: Any,
) -> Interval:
    """RTFx(A) / RTFx(B) (or A - B) of two independent runs, each run's requests
    resampled on their own and each run's window kept (as `rtfx_bootstrap`)."""
    sa, sb = _scored(records_a), _scored(records_b)
    wa, wb = _window(sa), _window(sb)
    if wa <= 0 or wb <= 0:
        return _none_interval(METHOD_BOOTSTRAP)

    def stat(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        top, bottom = x.sum(axis=axis) / wa, y.sum(axis=axis) / wb
        return top / bottom if ratio else top - bottom

    return bootstrap([_delivered_audio_s(sa), _delivered_audio_s(sb)], stat, seed=seed, **kw)


def percentile_change_bootstrap(
    a: Iterable[float | None], b: Iterable[float | None], q: float, seed: int = SEED, **kw: Any
) -> Interval:
    """Percentile q of A minus that of B, two independent samples resampled on their own."""
    xa = [float(v) for v in a if v is not None]
    xb = [float(v) for v in b if v is not None]

    def stat(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.percentile(x, q, axis=axis) - np.percentile(y, q, axis=axis)

    return bootstrap([xa, xb], stat, seed=seed, **kw)


def continuity_change_bootstrap(
    records_a: Iterable[Mapping[str, Any]],
    records_b: Iterable[Mapping[str, Any]],
    seed: int = SEED,
    **kw: Any,
) -> Interval:
    """continuity_pct(A) - continuity_pct(B) in percentage points, two independent runs'
    scored requests resampled on their own (a failed request is not continuous)."""

    def flags(records: Iterable[Mapping[str, Any]]) -> list[float]:
        return [1.0 if r.get("ok") and r.get("continuity_ok") else 0.0 for r in _scored(records)]

    def stat(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return 100.0 * (x.mean(axis=axis) - y.mean(axis=axis))

    return bootstrap([flags(records_a), flags(records_b)], stat, seed=seed, **kw)


def point_intervals(
    rounds: Sequence[Iterable[Mapping[str, Any]]],
    thresholds_s: Sequence[float] = CONTINUITY_THRESHOLDS_S,
    seed: int = SEED,
) -> dict[str, Any]:
    """The headline figures of one point with their intervals, from its records alone.

    `rounds`: the records of each run of the point (one list when the point ran once).
    Pooled over the rounds: continuity (Wilson), at the run's threshold and at each of
    `thresholds_s`, TTFA and perceived-first-audio p50/p90 (bootstrap over requests).
    RTFx: `rtfx_interval` (repeats when N > 1, else the bootstrap with the window kept).
    Keys: `rtfx`, `continuity_pct`, `continuity_pct_at` ({threshold: Interval}),
    `ttfa_s_p50`, `ttfa_s_p90`, `perceived_first_audio_s_p50`, `..._p90` (Intervals),
    `perceived_first_audio_s` (percentiles dict), `rtfx_by_round`, `rounds`.
    """
    rounds = [list(r) for r in rounds]
    pooled = _scored(_pool(rounds))
    ok = [r for r in pooled if r.get("ok")]
    ttfa = [r.get("ttfa_s") for r in ok]
    perceived = [perceived_first_audio_s(r) for r in ok]
    return {
        "rounds": len(rounds),
        "rtfx": rtfx_interval(rounds, seed=seed),
        "rtfx_by_round": [summarize_point(r)["rtfx"] for r in rounds],
        "continuity_pct": continuity_interval(pooled),
        "continuity_pct_at": {t: continuity_interval(pooled, t) for t in thresholds_s},
        "ttfa_s_p50": percentile_interval(ttfa, 50, seed=seed),
        "ttfa_s_p90": percentile_interval(ttfa, 90, seed=seed),
        "perceived_first_audio_s": percentiles(perceived),
        "perceived_first_audio_s_p50": percentile_interval(perceived, 50, seed=seed),
        "perceived_first_audio_s_p90": percentile_interval(perceived, 90, seed=seed),
    }


# --- the agent mode: text streamed in, audio streamed out (one WebSocket session) ----------
#
# All times are seconds on one clock (a record's: from the session's start). The audio's
# sentences are the server's units, each opened by its `audio.start` event: the frames
# after it, up to the next one, are that sentence's audio.


def _visible_chars(text: str) -> int:
    return sum(1 for ch in text if not ch.isspace())


def unit_text_sent_s(
    text_times: Sequence[float], text_pieces: Sequence[str], unit_texts: Sequence[str]
) -> list[float | None]:
    """When the last word of each unit (sentence or clause, in order) was sent.

    Units are matched to the text sent by counting non-space characters: unit k ends at
    the piece in which the sent text reaches the characters of units 0..k (a server splits
    and strips, it does not rewrite). A unit that ends past the text sent gets the last
    piece's time; None when no text was sent.
    """
    if not text_times or len(text_times) != len(text_pieces):
        return [None] * len(unit_texts)
    cumulative = np.cumsum([_visible_chars(p) for p in text_pieces])
    out: list[float | None] = []
    needed = 0
    for unit in unit_texts:
        needed += _visible_chars(unit)
        i = int(np.searchsorted(cumulative, needed, side="left"))
        out.append(float(text_times[min(i, len(text_times) - 1)]))
    return out


def agent_figures(
    text_times: Sequence[float],
    text_pieces: Sequence[str],
    t_input_done: float | None,
    chunk_arrival_s: Sequence[float],
    chunk_bytes: Sequence[int],
    units: Sequence[tuple[int, str]],
    sample_rate: int,
    sample_width_bytes: int = 2,
    channels: int = 1,
) -> dict[str, Any]:
    """The agent mode's figures of one session.

    `units`: per server unit, (index of its first frame, its text). Returns
    `ttfa_first_text_s` (first frame minus the first text piece), `ttfa_input_done_s`
    (first frame minus `input.done`; negative when audio began before the text ended),
    `sentence_lag_s` (per unit: its first frame minus the time its last word was sent),
    `sentence_heard_lag_s` (per unit: when a pausing player starting at the first frame
    begins to play it, minus the same time) and `text_s` (first piece to `input.done`).
    Continuity and stalls are `request_metrics`' on the same frames.
    """
    first = float(chunk_arrival_s[0]) if len(chunk_arrival_s) else None
    t_text = float(text_times[0]) if len(text_times) else None
    sent = unit_text_sent_s(text_times, text_pieces, [text for _, text in units])
    bps = bytes_per_second(sample_rate, sample_width_bytes, channels)
    offsets = np.concatenate([[0], np.cumsum([int(b) for b in chunk_bytes])])
    lag: list[float | None] = []
    heard: list[float | None] = []
    for (frame, _), t_sent in zip(units, sent, strict=True):
        if t_sent is None or frame >= len(chunk_arrival_s) or bps <= 0:
            lag.append(None)
            heard.append(None)
            continue
        lag.append(float(chunk_arrival_s[frame]) - t_sent)
        played = playback_time_s(
            chunk_arrival_s,
            chunk_bytes,
            float(offsets[frame]) / bps,
            sample_rate,
            sample_width_bytes,
            channels,
        )
        heard.append(None if played is None else played - t_sent)
    done = float(t_input_done) if t_input_done is not None else None
    return {
        "ttfa_first_text_s": _minus(first, t_text),
        "ttfa_input_done_s": _minus(first, done),
        "sentence_lag_s": lag,
        "sentence_heard_lag_s": heard,
        "text_s": _minus(done, t_text),
    }


def _minus(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None


def _sentence_values(records: Iterable[Mapping[str, Any]], key: str) -> list[float]:
    return [float(v) for r in records for v in (r.get(key) or []) if v is not None]


def agent_intervals(
    records: Iterable[Mapping[str, Any]],
    thresholds_s: Sequence[float] = CONTINUITY_THRESHOLDS_S,
    seed: int = SEED,
) -> dict[str, Any]:
    """The agent mode's headline figures of one point with their intervals.

    Over the scored, successful sessions: first audio from the first text and from
    `input.done`, p50 and p90 (bootstrap over sessions); the lag of each sentence behind
    its last word, as received and as heard, p50 and p90 (bootstrap over the sentences of
    all sessions, pooled); continuity (Wilson, failed sessions count as not continuous) at
    the run's threshold and at each of `thresholds_s`; RTFx (bootstrap, window kept).
    """
    pooled = _scored(records)
    ok = [r for r in pooled if r.get("ok")]
    out: dict[str, Any] = {
        "n_scored": len(pooled),
        "n_ok": len(ok),
        "rtfx": rtfx_bootstrap(pooled, seed=seed),
        "continuity_pct": continuity_interval(pooled),
        "continuity_pct_at": {t: continuity_interval(pooled, t) for t in thresholds_s},
        "stalls_per_session": (
            sum(int(r.get("stalls") or 0) for r in ok) / len(ok) if ok else None
        ),
    }
    series = {
        "ttfa_first_text_s": [r.get("ttfa_first_text_s") for r in ok],
        "ttfa_input_done_s": [r.get("ttfa_input_done_s") for r in ok],
        "sentence_lag_s": _sentence_values(ok, "sentence_lag_s"),
        "sentence_heard_lag_s": _sentence_values(ok, "sentence_heard_lag_s"),
    }
    for name, values in series.items():
        for q in (50, 90):
            out[f"{name}_p{q}"] = percentile_interval(values, q, seed=seed)
    return out


def summarize_agent(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The agent mode's figures of a point for summary.json: percentiles (no intervals: the
    client computes none) over the scored, successful sessions, the lags over their sentences.
    """
    ok = [r for r in _scored(records) if r.get("ok")]
    return {
        "ttfa_first_text_s": percentiles(r.get("ttfa_first_text_s") for r in ok),
        "ttfa_input_done_s": percentiles(r.get("ttfa_input_done_s") for r in ok),
        "sentence_lag_s": percentiles(_sentence_values(ok, "sentence_lag_s")),
        "sentence_heard_lag_s": percentiles(_sentence_values(ok, "sentence_heard_lag_s")),
        "text_s": percentiles(r.get("text_s") for r in ok),
    }
