"""Intervals over a point's rounds (`repeats`): Student t over N rounds, paired and Welch t
between two systems, and RTFx over the rounds of a point and B / A over two runs' rounds.

Serves a repeated point's RTFx in points.csv (the throughput table: `repeats_interval`,
`rtfx_interval`), the ratio column's paired interval (`paired_interval`, through
`changes.rtfx_ratio_interval`), and thetalker-compare's RTFx A, RTFx B and B / A
(`rounds_rtfx_interval`, `rounds_rtfx_ratio`; thetalker.report.compare).

A point run N times has one RTFx per round, each over its own window: the point's RTFx is
their mean (`rounds_rtfx_interval`, as `rtfx_interval`), never the rounds' audio pooled over
one window. Three rules hold for compare's rounds:

- A round whose scored requests delivered no audio (every request failed) is RTFx 0: a
  measurement, not a gap. Only a round with no scored request at all has no value.
- B / A is the ratio of the two means (the RTFx A and B printed beside it). With N > 1 rounds
  a side, its interval is Fieller's for a ratio of two independent means, with Welch's
  degrees of freedom (the run-to-run noise of each side); where A's mean cannot be told from
  0 at that level, the interval has no upper bound and is given as [0, inf]. With a single
  round on a side, a stratified bootstrap: each round's requests resampled on their own and
  over their own window, the rounds' mean taken on each side.
- No spread is no certainty: rounds all alike (the t interval has no width) get the
  stratified bootstrap over their requests instead, and a bootstrap that has no width either
  (every request alike) gives the value with no interval.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from thetalker.metrics.intervals.closed_forms import delivered_audio_s, rtfx_bootstrap
from thetalker.metrics.intervals.core import (
    CONFIDENCE,
    METHOD_BOOTSTRAP,
    METHOD_PAIRED,
    METHOD_REPEATS,
    METHOD_WELCH,
    N_RESAMPLES,
    SEED,
    Interval,
    at_bound,
    none_interval,
)
from thetalker.metrics.intervals.resampling import percentile_ci
from thetalker.metrics.point import measurement_window_s, scored_records, summarize_point

__all__ = [
    "repeats_interval",
    "rtfx_interval",
    "paired_interval",
    "welch_interval",
    "pool_rounds",
    "round_rtfx",
    "rounds_rtfx_interval",
    "rounds_rtfx_ratio",
    "fieller_welch",
]

Rounds = Sequence[Iterable[Mapping[str, Any]]]
# Resampled values held at once per round (bounds the memory whatever a round's size).
_BLOCK_VALUES = 4_000_000


def repeats_interval(values: Sequence[float | None], confidence: float = CONFIDENCE) -> Interval:
    """Mean of N rounds of one point with a Student t interval (N - 1 degrees of freedom).

    Rounds with no value are left out; one round: its value, no interval.
    """
    from scipy import stats

    data = np.array([float(v) for v in values if v is not None])
    if data.size == 0:
        return none_interval(METHOD_REPEATS)
    mean = float(data.mean())
    if data.size < 2:
        return none_interval(METHOD_REPEATS, 1, mean)
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
        return none_interval(METHOD_PAIRED)
    x, y = np.array(pairs).T
    d = np.log(x / y) if ratio else x - y
    back = np.exp if ratio else (lambda v: v)
    mean = float(d.mean())
    if d.size < 2:
        return none_interval(METHOD_PAIRED, 1, float(back(mean)))
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
        return none_interval(METHOD_WELCH)
    value = float(back(x.mean() - y.mean()))
    if x.size < 2 or y.size < 2 or (np.ptp(x) == 0.0 and np.ptp(y) == 0.0):
        return none_interval(METHOD_WELCH, min(x.size, y.size), value)
    ci = stats.ttest_ind(x, y, equal_var=False).confidence_interval(confidence)
    n = int(min(x.size, y.size))
    return Interval(value, float(back(ci.low)), float(back(ci.high)), METHOD_WELCH, n, confidence)


def pool_rounds(rounds: Sequence[Sequence[Mapping[str, Any]]]) -> list[Mapping[str, Any]]:
    """The records of every round in one list: a point's requests pooled over its rounds."""
    return [r for one in rounds for r in one]


def round_rtfx(records: Iterable[Mapping[str, Any]]) -> float | None:
    """One round's RTFx (`summarize_point`'s); 0 where its scored requests delivered no audio
    even without a window (every request failed at once); None with no scored request."""
    records = list(records)
    value = summarize_point(records)["rtfx"]
    scored = scored_records(records)
    if value is None and scored and not delivered_audio_s(scored).any():
        return 0.0
    return value


def _strata(rounds: Rounds) -> list[tuple[np.ndarray, float]]:
    """(delivered audio per scored request, window) of each round with a value."""
    out = []
    for one in rounds:
        scored = scored_records(one)
        if not scored:
            continue  # nothing measured: a gap
        audio, window = delivered_audio_s(scored), measurement_window_s(scored)
        if window > 0:
            out.append((audio, window))
        elif not audio.any():
            out.append((audio, 1.0))  # no audio over any window: 0
    return out


def _resampled_mean(
    strata: list[tuple[np.ndarray, float]], rng: np.random.Generator, n_resamples: int
) -> np.ndarray:
    """Per resample, the mean over rounds of each round's RTFx, its requests redrawn."""
    total = np.zeros(n_resamples)
    for audio, window in strata:
        rows = max(1, _BLOCK_VALUES // max(audio.size, 1))
        for start in range(0, n_resamples, rows):
            stop = min(start + rows, n_resamples)
            idx = rng.integers(0, audio.size, (stop - start, audio.size))
            total[start:stop] += audio[idx].sum(axis=1) / window
    return total / len(strata)


def _stratified(
    value: float,
    sides: list[list[tuple[np.ndarray, float]]],
    ratio: bool,
    seed: int,
    n_resamples: int,
    confidence: float,
) -> Interval:
    """The stratified bootstrap of one side's mean RTFx, or of B / A (`sides` [B, A])."""
    n = min(sum(a.size for a, _ in side) for side in sides)
    if n < 2:
        return none_interval(METHOD_BOOTSTRAP, n, value)
    rng = np.random.default_rng(seed)
    draws = [_resampled_mean(side, rng, n_resamples) for side in sides]
    with np.errstate(divide="ignore", invalid="ignore"):
        theta = draws[0] / draws[1] if ratio else draws[0]
    low, high = percentile_ci(theta, confidence)
    if low is None or high is None or low == high:
        return none_interval(METHOD_BOOTSTRAP, n, value)
    return Interval(value, low, high, METHOD_BOOTSTRAP, n, confidence)


def rounds_rtfx_interval(
    rounds: Rounds,
    seed: int = SEED,
    n_resamples: int = N_RESAMPLES,
    confidence: float = CONFIDENCE,
) -> Interval:
    """RTFx of a point over its rounds: one round, its `rtfx_bootstrap` (no width: the value
    alone); N > 1, the mean of
    the rounds' RTFx (a failed round at 0) with a t interval, or, the rounds all alike, the
    stratified bootstrap over their requests (module note)."""
    rounds = [list(r) for r in rounds]
    if len(rounds) == 1:
        ci = rtfx_bootstrap(rounds[0], seed=seed, n_resamples=n_resamples, confidence=confidence)
        # every request alike (all failed, say): the value, no zero-wide interval
        return none_interval(ci.method, ci.n, ci.value) if at_bound(ci) else ci
    ci = repeats_interval([round_rtfx(r) for r in rounds], confidence)
    if ci.value is None or not at_bound(ci):
        return ci
    return _stratified(ci.value, [_strata(rounds)], False, seed, n_resamples, confidence)


def rounds_rtfx_ratio(
    rounds_b: Rounds,
    rounds_a: Rounds,
    seed: int = SEED,
    n_resamples: int = N_RESAMPLES,
    confidence: float = CONFIDENCE,
) -> Interval:
    """RTFx B / A over two independent runs' rounds: the ratio of the rounds' means, with
    Fieller's interval when both ran N > 1 rounds, else (or with no spread between the rounds
    on either side) the stratified bootstrap (module note). No value when A's mean is 0."""
    rounds_b, rounds_a = [list(r) for r in rounds_b], [list(r) for r in rounds_a]
    xb = np.array([v for r in rounds_b if (v := round_rtfx(r)) is not None])
    xa = np.array([v for r in rounds_a if (v := round_rtfx(r)) is not None])
    if xb.size == 0 or xa.size == 0 or xa.mean() <= 0:
        return none_interval(METHOD_BOOTSTRAP)
    value = float(xb.mean() / xa.mean())
    if len(rounds_a) > 1 and len(rounds_b) > 1:
        ci = fieller_welch(xb, xa, value, confidence)
        if ci is not None:
            return ci
    sides = [_strata(rounds_b), _strata(rounds_a)]
    return _stratified(value, sides, True, seed, n_resamples, confidence)


def fieller_welch(
    xb: np.ndarray, xa: np.ndarray, value: float, confidence: float
) -> Interval | None:
    """Fieller's interval of mean(xb) / mean(xa), two independent samples, Welch's degrees of
    freedom at the estimate; [0, inf] where mean(xa) is not told from 0; None without
    spread (or too few rounds) to estimate the noise from."""
    from scipy import stats

    nb, na = xb.size, xa.size
    if nb < 2 or na < 2:
        return None
    vb, va = xb.var(ddof=1) / nb, xa.var(ddof=1) / na
    spread = vb**2 / (nb - 1) + value**4 * va**2 / (na - 1)
    if spread <= 0:
        return None
    df = (vb + value**2 * va) ** 2 / spread
    t = float(stats.t.ppf(0.5 + confidence / 2.0, df))
    mb, ma = float(xb.mean()), float(xa.mean())
    # (mb - r ma)^2 <= t^2 (vb + r^2 va): a quadratic in r
    a2, a1, a0 = ma**2 - t**2 * va, -2.0 * ma * mb, mb**2 - t**2 * vb
    n = int(min(nb, na))
    if a2 <= 0:  # no upper bound (and the ratio of two RTFx is never below 0)
        return Interval(value, 0.0, math.inf, METHOD_WELCH, n, confidence)
    root = math.sqrt(max(a1**2 - 4.0 * a2 * a0, 0.0))
    low, high = (-a1 - root) / (2.0 * a2), (-a1 + root) / (2.0 * a2)
    return Interval(value, max(low, 0.0), high, METHOD_WELCH, n, confidence)
