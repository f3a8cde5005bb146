"""Proportions: a share or a pooled rate with its Wilson interval, a difference of two
with Newcombe's, and the bootstrapped rates that fall back on them.

Serves points.csv's continuity_pct and continuity_pct_at (the continuity table; the agent
table's), the health table's shares (`wilson_pct`), and wer.csv's WER and its change between
two systems (`rate_pct`, `rate_change_pct`, thetalker.quality.wer).

No spread is no certainty. A bootstrap over a sample where every observation sits at a
bound (no word wrong in any sentence, every stream continuous) resamples the same figure
every time and would print a zero-wide interval: "0.00 ± 0.00". The sample cannot rule out
a small rate, so a count with no spread (or too few units to bootstrap) gets the Wilson
score interval of its pooled count instead (k words with no error: [0, about 3.8/k]), and
a difference of two such counts Newcombe's hybrid score interval built from their two
Wilson intervals. `rate_pct`, `rate_change_pct` and `changes.continuity_change_bootstrap`
apply it; shares of streams (`continuity_interval`) are Wilson intervals to begin with.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from thetalker.metrics.intervals.core import (
    CONFIDENCE,
    METHOD_NEWCOMBE,
    METHOD_WILSON,
    N_RESAMPLES,
    SEED,
    Interval,
    at_bound,
    none_interval,
)
from thetalker.metrics.intervals.resampling import bootstrap
from thetalker.metrics.point import scored_records
from thetalker.metrics.stream import continuous_at

__all__ = [
    "wilson_pct",
    "newcombe_difference",
    "newcombe_for",
    "rate_pct",
    "rate_change_pct",
    "continuity_interval",
    "continuity_intervals_at",
]


def wilson_pct(successes: int, n: int, confidence: float = CONFIDENCE) -> Interval:
    """A proportion in percent with its Wilson score interval (Newcombe 1998, method 3),
    computed as scipy's `binomtest(k, n).proportion_ci(confidence, method="wilson")`
    computes it, operation for operation, so the same floats
    (`test_analysis_arrays.py` checks them against scipy), without loading scipy.stats:
    half a second that a table process over one point need not spend.

    Never certain from a finite sample: 10 of 10 gives [72.2, 100]. n = 0: no value.
    """
    from scipy.special import ndtri

    if n <= 0:
        return none_interval(METHOD_WILSON)
    k, n = int(successes), int(n)
    if not 0 <= k <= n:
        raise ValueError(f"successes must be in [0, n]: {k} of {n}")
    p = k / n
    z = ndtri(0.5 + 0.5 * confidence)
    denom = 2 * (n + z**2)
    center = (2 * n * p + z**2) / denom
    delta = z / denom * math.sqrt(4 * n * p * (1 - p) + z**2)
    low = 0.0 if k == 0 else float(center - delta)
    high = 1.0 if k == n else float(center + delta)
    return Interval(100.0 * k / n, 100.0 * low, 100.0 * high, METHOD_WILSON, n, confidence)


def newcombe_difference(a: Interval, b: Interval) -> Interval:
    """a - b from two proportions' Wilson intervals (percent): Newcombe's hybrid score
    interval (Newcombe 1998, method 10), never zero-wide while either interval has width."""
    if a.value is None or b.value is None or None in (a.low, a.high, b.low, b.high):
        return none_interval(METHOD_NEWCOMBE)
    d = a.value - b.value
    low = d - float(np.hypot(a.value - a.low, b.high - b.value))  # type: ignore[operator]
    high = d + float(np.hypot(a.high - a.value, b.value - b.low))  # type: ignore[operator]
    return Interval(d, low, high, METHOD_NEWCOMBE, min(a.n, b.n), a.confidence)


def newcombe_for(ci: Interval, a: Interval, b: Interval) -> Interval:
    """A change `ci` with no spread to resample: its value, with Newcombe's interval of the
    two counts' Wilson intervals `a` and `b` (module note), at their confidence."""
    d = newcombe_difference(a, b)
    return Interval(ci.value, d.low, d.high, METHOD_NEWCOMBE, ci.n, d.confidence)


def _pooled_wilson(events: np.ndarray, trials: np.ndarray, confidence: float) -> Interval | None:
    """The Wilson interval of sum(events) of sum(trials); None where it is no proportion
    (more events than trials: a WER over 100% from insertions, or no trials)."""
    k, n = int(events.sum()), int(trials.sum())
    if n <= 0 or k > n:
        return None
    return wilson_pct(k, n, confidence)


def _pooled_rate(events: np.ndarray, trials: np.ndarray, axis: int = -1) -> np.ndarray:
    """100 * sum(events) / sum(trials) along `axis` (vectorized over resamples); nan where
    no trial was drawn (0/0: the resample is left out of the percentiles)."""
    total = trials.sum(axis=axis)
    rate = 100.0 * events.sum(axis=axis) / np.where(total > 0, total, 1)
    return np.where(total > 0, rate, np.nan)


def rate_pct(
    events: Sequence[float] | np.ndarray,
    trials: Sequence[float] | np.ndarray,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
    confidence: float = CONFIDENCE,
) -> Interval:
    """A pooled rate in percent, 100 * sum(events) / sum(trials), over units (a WER: each
    sentence's edits over its reference words), with a bootstrap over the units: a unit's
    events and trials are drawn together, so the spread between units is in the interval.

    No spread to resample (one unit, or every resample the same rate: no event at all)
    gives the Wilson interval of the pooled count instead (module note, `at_bound`).
    """
    e, t = np.asarray(events, dtype=float), np.asarray(trials, dtype=float)
    if e.shape != t.shape or e.ndim != 1:
        raise ValueError(f"events and trials must be 1-D of one length: {e.shape} vs {t.shape}")

    ci = bootstrap([e, t], _pooled_rate, n_resamples, seed, confidence, paired=True)
    if at_bound(ci):
        exact = _pooled_wilson(e, t, confidence)
        if exact is not None:
            return Interval(ci.value, exact.low, exact.high, METHOD_WILSON, e.size, confidence)
    return ci


def rate_change_pct(
    events_a: Sequence[float] | np.ndarray,
    trials_a: Sequence[float] | np.ndarray,
    events_b: Sequence[float] | np.ndarray,
    trials_b: Sequence[float] | np.ndarray,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
    confidence: float = CONFIDENCE,
) -> Interval:
    """rate(A) - rate(B) in percentage points over the same units (unit i of A is unit i of
    B: two systems on the same sentences), a paired bootstrap: the same draws for both, so
    what the units share cancels out.

    No spread to resample (both without an event, or the same gap on every unit) gives
    Newcombe's interval of the two pooled counts' Wilson intervals (module note), which
    ignores the pairing and so errs wide.
    """
    arrays = [np.asarray(v, dtype=float) for v in (events_a, trials_a, events_b, trials_b)]

    def stat(ea: np.ndarray, ta: np.ndarray, eb: np.ndarray, tb: np.ndarray, axis: int = -1):
        return _pooled_rate(ea, ta, axis) - _pooled_rate(eb, tb, axis)

    ci = bootstrap(arrays, stat, n_resamples, seed, confidence, paired=True)
    if at_bound(ci):
        a = _pooled_wilson(arrays[0], arrays[1], confidence)
        b = _pooled_wilson(arrays[2], arrays[3], confidence)
        if a is not None and b is not None:
            return newcombe_for(ci, a, b)
    return ci


def continuity_interval(
    records: Iterable[Mapping[str, Any]], threshold_s: float | None = None
) -> Interval:
    """`continuity_pct` of the scored records with its Wilson interval.

    threshold_s None: the recorded `continuity_ok` (the run's threshold, the headline);
    a number: `continuous_at` that threshold. A failed request counts as not continuous.
    """
    scored = scored_records(records)
    if threshold_s is None:
        k = sum(1 for r in scored if r.get("ok") and r.get("continuity_ok"))
    else:
        k = sum(1 for r in scored if continuous_at(r, threshold_s))
    return wilson_pct(k, len(scored))


def continuity_intervals_at(
    records: Iterable[Mapping[str, Any]], thresholds_s: Sequence[float]
) -> dict[float, Interval]:
    """`continuity_interval(records, t)` for each t, the records walked once."""
    scored = scored_records(records)
    playable = [r for r in scored if r.get("ok") and r.get("ttfa_s") is not None]
    behind = [float(r.get("max_underrun_s") or 0.0) for r in playable]  # as `continuous_at`
    return {t: wilson_pct(sum(1 for u in behind if u <= t), len(scored)) for t in thresholds_s}
