"""Every interval the tables print: bootstrap, Wilson, t over repeats, paired and Welch
t, ratio and change intervals, and the one rule for a sample with no spread (`at_bound`).
scipy is imported where it is used."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from thetalker.metrics.point import (
    measurement_window_s,
    percentiles,
    scored_records,
    summarize_point,
)
from thetalker.metrics.stream import CONTINUITY_THRESHOLDS_S, continuous_at, perceived_first_audio_s

__all__ = [
    "delivered_audio_s",
    "none_interval",
    "percentile_ci",
    "CONFIDENCE",
    "SEED",
    "N_RESAMPLES",
    "LARGE_SAMPLE_N",
    "Percentiles",
    "SumOverWindow",
    "Interval",
    "bootstrap",
    "percentile_interval",
    "wilson_pct",
    "at_bound",
    "newcombe_difference",
    "rate_pct",
    "rate_change_pct",
    "continuity_interval",
    "continuity_intervals_at",
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
    "shared_bootstrap",
    "percentile_intervals",
    "shared_change_bootstrap",
    "rtfx_change_job",
    "percentile_change_job",
    "continuity_change_job",
    "continuity_change_at_bound",
    "share_change_pct",
]

# --- intervals ---------------------------------------------------------------------------
#
# One implementation of every interval the tables print. Bootstrap intervals are scipy's
# percentile bootstrap (well defined on small or tied samples where BCa's jackknife
# degenerates), seeded, so a rebuild prints the same digits; a resample whose statistic is
# undefined (nan: no reference word drawn, 0/0) is left out of the percentiles.
#
# No spread is no certainty. A bootstrap over a sample where every observation sits at a
# bound (no word wrong in any sentence, every stream continuous) resamples the same figure
# every time and would print a zero-wide interval: "0.00 ± 0.00". The sample cannot rule out
# a small rate, so a count with no spread (or too few units to bootstrap) gets the Wilson
# score interval of its pooled count instead (k words with no error: [0, about 3.8/k]), and
# a difference of two such counts Newcombe's hybrid score interval built from their two
# Wilson intervals. `rate_pct`, `rate_change_pct` and `continuity_change_bootstrap` apply
# it; shares of streams (`continuity_interval`) are Wilson intervals to begin with.
# scipy is imported where it is used: the client computes no interval and need not load it.
#
# Large samples. 10,000 resamples of n requests are 10,000 x n draws: at a point of 100,000
# requests, 10^9 integers and their gathering, about 40 s of CPU for the four percentiles and
# the RTFx of one point, where reading its records takes under 2. From `LARGE_SAMPLE_N`
# observations on, the two statistics a point bootstraps get the closed-form intervals the
# bootstrap approximates at that size: a percentile the distribution-free order-statistic
# interval (the ranks l and u with P(l <= B < u) >= confidence for B ~ Binomial(n, q): the
# interval [x_(l), x_(u)] covers the population's q-quantile whatever the distribution), and
# a sum over requests (RTFx with its window kept) the normal interval of a sum, value +/-
# z * s * sqrt(n) / window, s the requests' standard deviation. Their `method` names them
# ("order-statistic", "normal"); below `LARGE_SAMPLE_N` nothing changes. At 5,000 requests
# both agree with the bootstrap's bounds to within its own Monte Carlo noise
# (tests/unit/test_analysis_arrays.py). Other statistics are always resampled.

CONFIDENCE = 0.95
N_RESAMPLES = 10_000
SEED = 0
# Resamples evaluated at once: bounds memory at about this many x n floats.
_BATCH = 1000

METHOD_BOOTSTRAP = "bootstrap"  # percentile bootstrap over requests
METHOD_WILSON = "wilson"  # Wilson score interval of a proportion
METHOD_NEWCOMBE = "newcombe"  # Newcombe's hybrid score interval of a difference of proportions
METHOD_REPEATS = "repeats-t"  # Student t over the N rounds of a point
METHOD_PAIRED = "paired-t"  # Student t over the per-round differences (or log ratios)
METHOD_WELCH = "welch-t"  # Welch t over the rounds of two independent runs
METHOD_NONE = "none"  # too little data for an interval: value only
METHOD_ORDER_STATISTIC = "order-statistic"  # a percentile's binomial order-statistic interval
METHOD_NORMAL = "normal"  # a sum's normal interval (its standard error from the sample)

# From this many observations on, a percentile's and a sum's intervals are computed in closed
# form, not by resampling (module note: "Large samples").
LARGE_SAMPLE_N = 5_000


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


def none_interval(method: str, n: int = 0, value: float | None = None) -> Interval:
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
    paired: bool = False,
) -> Interval:
    """Percentile bootstrap of `statistic(*samples, axis=-1)` (vectorized over `axis`).

    With two or more samples each is resampled on its own (two independent runs), or, with
    `paired`, all with the same draws (the columns of one table: a sentence's edits and
    words, or two systems on the same sentences). Any sample with fewer than 2 values: the
    value with no interval; any empty: no value. Resamples whose statistic is nan are left
    out of the percentiles.
    """
    from scipy import stats

    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    arrays = [np.asarray(s, dtype=float) for s in samples]
    if paired and len({a.shape for a in arrays}) > 1:
        raise ValueError(f"paired samples must be of one length: {[a.size for a in arrays]}")
    n = min(a.size for a in arrays)
    if n == 0:
        return none_interval(METHOD_BOOTSTRAP)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = _finite(statistic(*arrays, axis=-1))
    if n < 2 or value is None:
        return none_interval(METHOD_BOOTSTRAP, n, value)
    with np.errstate(divide="ignore", invalid="ignore"):
        res = stats.bootstrap(
            tuple(arrays),
            statistic,
            n_resamples=n_resamples,
            batch=_BATCH,
            vectorized=True,
            paired=paired,
            axis=-1,
            confidence_level=confidence,
            method="percentile",
            rng=np.random.default_rng(seed),
        )
    # scipy's percentile bounds, with undefined resamples left out (the same numbers when
    # there are none).
    draws = np.asarray(res.bootstrap_distribution, dtype=float)
    draws = draws[~np.isnan(draws)]
    if draws.size == 0:
        return none_interval(METHOD_BOOTSTRAP, n, value)
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = (_finite(b) for b in np.percentile(draws, [tail, 100.0 - tail]))
    if low is None or high is None:
        return none_interval(METHOD_BOOTSTRAP, n, value)
    return Interval(value, low, high, METHOD_BOOTSTRAP, n, confidence)


def at_bound(ci: Interval) -> bool:
    """True when an interval with a value has no width to show: too few units to resample,
    or every resample the same (every observation at a bound, or all alike)."""
    return ci.value is not None and (ci.low is None or ci.high is None or ci.low == ci.high)


# Resampled values held at once by the shared bootstraps below (per array): bounds their
# memory at about 8 bytes x this, whatever the sample's size.
_BLOCK_VALUES = 4_000_000


def _resample_blocks(n: int, seed: int, n_resamples: int) -> Iterator[np.ndarray]:
    """The row indices of `bootstrap`'s resamples of one sample of size n, in blocks of
    rows: the draws scipy.stats.bootstrap makes from `default_rng(seed)` (numpy fills a
    (1000, n) block as it fills consecutive smaller ones), in blocks sized by memory."""
    rng = np.random.default_rng(seed)
    rows = max(1, min(_BATCH, _BLOCK_VALUES // n))
    for k in range(0, n_resamples, rows):
        yield rng.integers(0, n, (min(rows, n_resamples - k), n))


def percentile_ci(theta: np.ndarray, confidence: float) -> tuple[float | None, float | None]:
    """The percentile interval of a bootstrap distribution, as `bootstrap` takes it from
    scipy's: its resamples with an undefined statistic (nan) left out, then the percentiles
    at (1 - confidence) / 2 and its complement; (None, None) when none is left."""
    draws = np.asarray(theta, dtype=float)
    draws = draws[~np.isnan(draws)]
    if draws.size == 0:
        return None, None
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = (_finite(b) for b in np.percentile(draws, [tail, 100.0 - tail]))
    return low, high


def _check_bootstrap(n_resamples: int, confidence: float) -> None:
    """`bootstrap`'s refusals of its settings, for the shared bootstraps alike."""
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


@dataclass(frozen=True)
class Percentiles:
    """Percentiles `qs` (linear interpolation, as `percentiles`) as a bootstrap statistic;
    over `LARGE_SAMPLE_N` observations or more, their order-statistic intervals."""

    qs: tuple[float, ...]

    def __call__(self, x: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.percentile(x, list(self.qs), axis=axis)

    def closed_form(self, data: np.ndarray, confidence: float) -> list[tuple[float, float]]:
        """Per q, [x_(l), x_(u)] (1-based order statistics) with l the least rank whose
        Binomial(n, q) CDF reaches (1 - confidence) / 2 and u one past the least rank
        where it reaches its complement: P(l <= B < u) >= confidence."""
        ordered = np.sort(data)
        n, tail = ordered.size, (1.0 - confidence) / 2.0
        bounds = []
        for q in self.qs:
            low_rank = max(1, _binomial_quantile(tail, n, q / 100.0))
            high_rank = min(n, _binomial_quantile(1.0 - tail, n, q / 100.0) + 1)
            bounds.append((float(ordered[low_rank - 1]), float(ordered[high_rank - 1])))
        return bounds


def _binomial_quantile(level: float, n: int, p: float) -> int:
    """The least k in 0..n with P(B <= k) >= level, B ~ Binomial(n, p) (scipy.special's
    `bdtr`, by bisection: the CDF rises with k)."""
    from scipy.special import bdtr

    low, high = 0, n  # P(B <= n) = 1 >= level
    while low < high:
        mid = (low + high) // 2
        if bdtr(mid, n, p) >= level:
            high = mid
        else:
            low = mid + 1
    return low


@dataclass(frozen=True)
class SumOverWindow:
    """sum(x) / window_s (RTFx with the run's window kept) as a bootstrap statistic; over
    `LARGE_SAMPLE_N` observations or more, its normal interval."""

    window_s: float

    def __call__(self, x: np.ndarray, axis: int = -1) -> np.ndarray:
        return x.sum(axis=axis) / self.window_s

    def closed_form(self, data: np.ndarray, confidence: float) -> list[tuple[float, float]]:
        """value +/- z * s * sqrt(n) / window_s: the standard error of a sum of n draws."""
        from statistics import NormalDist

        value = float(self(data))
        z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
        half = z * float(data.std(ddof=1)) * float(np.sqrt(data.size)) / self.window_s
        return [(value - half, value + half)]


_CLOSED_FORM_METHOD = {Percentiles: METHOD_ORDER_STATISTIC, SumOverWindow: METHOD_NORMAL}


def _percentile_job(
    name: str, values: Iterable[float | None], qs: Sequence[float]
) -> tuple[tuple[tuple[str, float], ...], tuple[list[float], Any]]:
    """A `shared_bootstrap` job of percentiles `qs` of the values (None left out), keyed
    (name, q)."""
    sample = [float(v) for v in values if v is not None]
    return tuple((name, q) for q in qs), (sample, Percentiles(tuple(qs)))


def shared_bootstrap(
    jobs: Mapping[Any, tuple[Sequence[float] | np.ndarray, Any]],
    seed: int = SEED,
    n_resamples: int = N_RESAMPLES,
    confidence: float = CONFIDENCE,
    threads: int = 1,
    large_sample_n: int | None = LARGE_SAMPLE_N,
) -> dict[Any, Interval]:
    """`bootstrap([sample], statistic)` of each job (name: (sample, statistic)), the same
    Intervals, with one draw of resamples for all the samples of one size. A `Percentiles`
    or `SumOverWindow` statistic over `large_sample_n` observations or more gets its closed
    form instead (module note: "Large samples"; None: always resampled).

    Each one-sample `bootstrap` seeded alike draws the same indices for samples of the same
    size, so drawing them once and applying every statistic is the same bootstrap for a
    fraction of the work (the draws and the gathering dominate it). A statistic may give
    several rows at once (`np.percentile(x, [50, 90], axis=-1)`); its job then names a
    tuple of Intervals' keys: {("p50", "p90"): (x, stat)}. `threads` > 1: the statistics
    of one block of resamples are computed by that many threads (numpy's gathering and
    partitioning let go of the GIL); each is the same computation, so the same figures."""
    _check_bootstrap(n_resamples, confidence)
    out: dict[Any, Interval] = {}
    by_size: dict[int, list[tuple[Any, np.ndarray, Any, Any]]] = {}
    for name, (sample, statistic) in jobs.items():
        data = np.asarray(sample, dtype=float)
        keys = name if isinstance(name, tuple) else (name,)
        with np.errstate(divide="ignore", invalid="ignore"):
            values = np.atleast_1d(statistic(data, axis=-1)) if data.size else None
        if data.size < 2:
            for k, key in enumerate(keys):
                value = None if values is None else _finite(values[k])
                out[key] = none_interval(METHOD_BOOTSTRAP, int(data.size), value)
            continue
        method = _CLOSED_FORM_METHOD.get(type(statistic))
        if method and large_sample_n is not None and data.size >= large_sample_n:
            out.update(_closed_form(keys, data, statistic, values, method, confidence))
            continue
        by_size.setdefault(data.size, []).append((keys, data, statistic, values))
    pool = ThreadPoolExecutor(threads) if threads > 1 and len(jobs) > 1 else None
    for n, group in by_size.items():
        thetas: list[list[np.ndarray]] = [[] for _ in group]
        for rows in _resample_blocks(n, seed, n_resamples):

            def one(job: tuple[Any, np.ndarray, Any, Any], rows: np.ndarray = rows) -> np.ndarray:
                with np.errstate(divide="ignore", invalid="ignore"):
                    return np.atleast_2d(job[2](job[1][rows], axis=-1))

            found = pool.map(one, group) if pool is not None else map(one, group)
            for theta, block in zip(thetas, found, strict=True):
                theta.append(block)
        for theta, (keys, _, _, values) in zip(thetas, group, strict=True):
            dist = np.concatenate(theta, axis=-1)
            for k, key in enumerate(keys):
                value = _finite(values[k])
                if value is None:
                    out[key] = none_interval(METHOD_BOOTSTRAP, n, None)
                    continue
                low, high = percentile_ci(dist[k], confidence)
                out[key] = (
                    none_interval(METHOD_BOOTSTRAP, n, value)
                    if low is None or high is None
                    else Interval(value, low, high, METHOD_BOOTSTRAP, n, confidence)
                )
    if pool is not None:
        pool.shutdown()
    return out


def _closed_form(
    keys: Sequence[Any],
    data: np.ndarray,
    statistic: Percentiles | SumOverWindow,
    values: np.ndarray,
    method: str,
    confidence: float,
) -> dict[Any, Interval]:
    """`shared_bootstrap`'s Intervals of one large sample by `statistic.closed_form`."""
    if np.isnan(data).any():  # as resampling would: no interval where the value has none
        return {
            key: none_interval(method, data.size, _finite(values[k])) for k, key in enumerate(keys)
        }
    out = {}
    for k, (key, (low, high)) in enumerate(
        zip(keys, statistic.closed_form(data, confidence), strict=True)
    ):
        value = _finite(values[k])
        out[key] = (
            Interval(value, low, high, method, data.size, confidence)
            if value is not None
            else none_interval(method, data.size, None)
        )
    return out


def percentile_intervals(
    series: Mapping[str, Iterable[float | None]],
    qs: Sequence[float],
    seed: int = SEED,
    **kw: Any,
) -> dict[str, dict[float, Interval]]:
    """`percentile_interval(values, q)` of each series at each q (the same Intervals):
    {name: {q: Interval}}, the series of one size sharing one draw (`shared_bootstrap`)."""

    jobs = dict(_percentile_job(name, values, qs) for name, values in series.items())
    found = shared_bootstrap(jobs, seed=seed, **kw)
    return {name: {q: found[(name, q)] for q in qs} for name in series}


def percentile_interval(
    values: Iterable[float | None], q: float, seed: int = SEED, **kw: Any
) -> Interval:
    """Percentile `q` (linear interpolation, as `percentiles`) with a bootstrap over values."""
    return percentile_intervals({"values": values}, [q], seed=seed, **kw)["values"][q]


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


def _newcombe_for(ci: Interval, a: Interval, b: Interval) -> Interval:
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
            return _newcombe_for(ci, a, b)
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


def delivered_audio_s(scored: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """Per scored request, the audio it counts for in RTFx (0 for a failed one)."""
    return np.array([float(r.get("audio_s") or 0.0) if r.get("ok") else 0.0 for r in scored])


def rtfx_bootstrap(records: Iterable[Mapping[str, Any]], seed: int = SEED, **kw: Any) -> Interval:
    """RTFx of one run with a bootstrap over its requests, the window kept.

    Each resample draws the scored requests with replacement (failed ones count 0 audio)
    and divides their audio seconds by the run's own `window_s`: the spread of what the
    requests delivered, at the load the run held. It does not see run-to-run drift (a
    warmer server, a noisy neighbour); only repeats do.
    """
    scored = scored_records(records)
    job = _rtfx_job(scored)
    if job is None:
        return none_interval(METHOD_BOOTSTRAP, len(scored))
    return shared_bootstrap({"rtfx": job}, seed=seed, **kw)["rtfx"]


def _rtfx_job(scored: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, Any] | None:
    """`rtfx_bootstrap`'s sample and statistic (None: no window, no interval)."""
    window_s = measurement_window_s(scored)
    if window_s <= 0:
        return None
    return delivered_audio_s(scored), SumOverWindow(window_s)


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


def shared_change_bootstrap(
    jobs: Mapping[Any, tuple[tuple[Sequence[float], Sequence[float]], Any]],
    seed: int = SEED,
    n_resamples: int = N_RESAMPLES,
    confidence: float = CONFIDENCE,
) -> dict[Any, Interval]:
    """`bootstrap([a, b], statistic)` of each job (name: ((a, b), statistic)), the same
    Intervals, with one draw of resamples for all the jobs whose samples have the same two
    sizes: scipy draws A's block of 1000 resamples, then B's, batch after batch, from the
    one seeded generator; the draws depend on the sizes alone. A job may name a tuple of
    keys for a statistic of several rows (as `shared_bootstrap`)."""
    _check_bootstrap(n_resamples, confidence)
    out: dict[Any, Interval] = {}
    groups: dict[tuple[int, int], list[tuple[Any, np.ndarray, np.ndarray, Any, Any]]] = {}
    for name, ((a, b), statistic) in jobs.items():
        xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        keys = name if isinstance(name, tuple) else (name,)
        n = min(xa.size, xb.size)
        if n == 0:
            out.update({key: none_interval(METHOD_BOOTSTRAP) for key in keys})
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            values = np.atleast_1d(statistic(xa, xb, axis=-1))
        if n < 2:
            out.update({key: none_interval(METHOD_BOOTSTRAP, n, _finite(values[k]))
                        for k, key in enumerate(keys)})  # fmt: skip
            continue
        groups.setdefault((xa.size, xb.size), []).append((keys, xa, xb, statistic, values))
    for (na, nb), group in groups.items():
        rng = np.random.default_rng(seed)
        thetas: list[list[np.ndarray]] = [[] for _ in group]
        for k in range(0, n_resamples, _BATCH):
            rows = min(_BATCH, n_resamples - k)
            ia, ib = rng.integers(0, na, (rows, na)), rng.integers(0, nb, (rows, nb))
            for theta, (_, xa, xb, statistic, _) in zip(thetas, group, strict=True):
                with np.errstate(divide="ignore", invalid="ignore"):
                    theta.append(np.atleast_2d(statistic(xa[ia], xb[ib], axis=-1)))
        for theta, (keys, _, _, _, values) in zip(thetas, group, strict=True):
            dist = np.concatenate(theta, axis=-1)
            n = min(na, nb)
            for k, key in enumerate(keys):
                value = _finite(values[k])
                low, high = percentile_ci(dist[k], confidence) if value is not None else (None,) * 2
                out[key] = (
                    none_interval(METHOD_BOOTSTRAP, n, value)
                    if value is None or low is None or high is None
                    else Interval(value, low, high, METHOD_BOOTSTRAP, n, confidence)
                )
    return out


def rtfx_change_job(
    records_a: Iterable[Mapping[str, Any]], records_b: Iterable[Mapping[str, Any]], ratio: bool
) -> tuple[tuple[np.ndarray, np.ndarray], Any] | None:
    """`rtfx_change_bootstrap`'s samples and statistic (None: a run without a window)."""
    sa, sb = scored_records(records_a), scored_records(records_b)
    wa, wb = measurement_window_s(sa), measurement_window_s(sb)
    if wa <= 0 or wb <= 0:
        return None

    def stat(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        top, bottom = x.sum(axis=axis) / wa, y.sum(axis=axis) / wb
        return top / bottom if ratio else top - bottom

    return (delivered_audio_s(sa), delivered_audio_s(sb)), stat


def rtfx_change_bootstrap(
    records_a: Iterable[Mapping[str, Any]],
    records_b: Iterable[Mapping[str, Any]],
    ratio: bool = True,
    seed: int = SEED,
    **kw: Any,
) -> Interval:
    """RTFx(A) / RTFx(B) (or A - B) of two independent runs, each run's requests
    resampled on their own and each run's window kept (as `rtfx_bootstrap`)."""
    job = rtfx_change_job(records_a, records_b, ratio)
    if job is None:
        return none_interval(METHOD_BOOTSTRAP)
    return shared_change_bootstrap({"rtfx": job}, seed=seed, **kw)["rtfx"]


def percentile_change_job(
    a: Iterable[float | None], b: Iterable[float | None], qs: Sequence[float]
) -> tuple[tuple[list[float], list[float]], Any]:
    """`percentile_change_bootstrap`'s samples and a statistic of one row per q."""
    xa = [float(v) for v in a if v is not None]
    xb = [float(v) for v in b if v is not None]

    def stat(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.percentile(x, list(qs), axis=axis) - np.percentile(y, list(qs), axis=axis)

    return (xa, xb), stat


def percentile_change_bootstrap(
    a: Iterable[float | None], b: Iterable[float | None], q: float, seed: int = SEED, **kw: Any
) -> Interval:
    """Percentile q of A minus that of B, two independent samples resampled on their own."""
    return shared_change_bootstrap({"q": percentile_change_job(a, b, [q])}, seed=seed, **kw)["q"]


def continuity_change_job(
    records_a: Iterable[Mapping[str, Any]], records_b: Iterable[Mapping[str, Any]]
) -> tuple[tuple[list[float], list[float]], Any]:
    """`continuity_change_bootstrap`'s samples and statistic."""

    def flags(records: Iterable[Mapping[str, Any]]) -> list[float]:
        return [
            1.0 if r.get("ok") and r.get("continuity_ok") else 0.0 for r in scored_records(records)
        ]

    return (flags(records_a), flags(records_b)), _share_difference_pct


def _share_difference_pct(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """The share of 1s in `x` minus that in `y`, in percentage points (per resample)."""
    return 100.0 * (x.mean(axis=axis) - y.mean(axis=axis))


def continuity_change_bootstrap(
    records_a: Iterable[Mapping[str, Any]],
    records_b: Iterable[Mapping[str, Any]],
    seed: int = SEED,
    **kw: Any,
) -> Interval:
    """continuity_pct(A) - continuity_pct(B) in percentage points, two independent runs'
    scored requests resampled on their own (a failed request is not continuous); no spread
    to resample (every stream continuous in both, say): Newcombe's interval (module note)."""
    flags, _ = continuity_change_job(records_a, records_b)
    return share_change_pct(*flags, seed=seed, **kw)


def share_change_pct(
    flags_a: Sequence[float], flags_b: Sequence[float], seed: int = SEED, **kw: Any
) -> Interval:
    """The share of 1s in `flags_a` minus that in `flags_b` (0/1 per stream), in percentage
    points, each side resampled on its own; no spread to resample (every stream clean on
    both sides, say): Newcombe's interval (module note), as for continuity."""
    job = ((list(flags_a), list(flags_b)), _share_difference_pct)
    ci = shared_change_bootstrap({"c": job}, seed=seed, **kw)["c"]
    return continuity_change_at_bound(ci, job, kw.get("confidence", CONFIDENCE))


def continuity_change_at_bound(
    ci: Interval, job: tuple[tuple[list[float], list[float]], Any], level: float = CONFIDENCE
) -> Interval:
    """The continuity change's Interval from its bootstrap `ci` over `job`'s flags: `ci`
    itself, or, with no spread to resample (`at_bound`: every stream continuous in both
    runs, say), Newcombe's interval from the two runs' Wilson intervals (`_newcombe_for`)."""
    if not at_bound(ci):
        return ci
    (fa, fb), _ = job
    a = wilson_pct(int(sum(fa)), len(fa), level)
    return _newcombe_for(ci, a, wilson_pct(int(sum(fb)), len(fb), level))


def point_intervals(
    rounds: Sequence[Iterable[Mapping[str, Any]]],
    thresholds_s: Sequence[float] = CONTINUITY_THRESHOLDS_S,
    seed: int = SEED,
    threads: int = 1,
    rtfx_by_round: Sequence[float | None] | None = None,
) -> dict[str, Any]:
    """The headline figures of one point with their intervals, from its records alone.

    `rounds`: the records of each run of the point (one list when the point ran once).
    Pooled over the rounds: continuity (Wilson), at the run's threshold and at each of
    `thresholds_s`, TTFA and perceived-first-audio p50/p90 (bootstrap over requests).
    RTFx: `rtfx_interval` (repeats when N > 1, else the bootstrap with the window kept).
    Keys: `rtfx`, `continuity_pct`, `continuity_pct_at` ({threshold: Interval}),
    `ttfa_s_p50`, `ttfa_s_p90`, `perceived_first_audio_s_p50`, `..._p90` (Intervals),
    `perceived_first_audio_s` (percentiles dict), `rtfx_by_round`, `rounds`. `threads`:
    the bootstraps' (`shared_bootstrap`), the same figures on any number. `rtfx_by_round`:
    each round's `summarize_point(...)["rtfx"]` where the caller has them (a point's row
    does), so the rounds are not summarised twice.
    """
    rounds = [list(r) for r in rounds]
    pooled = scored_records(_pool(rounds))
    ok = [r for r in pooled if r.get("ok")]
    ttfa = [r.get("ttfa_s") for r in ok]
    perceived = [perceived_first_audio_s(r) for r in ok]
    by_round = (
        list(rtfx_by_round)
        if rtfx_by_round is not None
        else [summarize_point(r)["rtfx"] for r in rounds]
    )
    # Every bootstrap of the point at once: those over samples of one size share the draws.
    jobs: dict[Any, Any] = dict(
        _percentile_job(name, values, (50, 90))
        for name, values in (("ttfa_s", ttfa), ("perceived", perceived))
    )
    one = scored_records(rounds[0]) if len(rounds) == 1 else []
    rtfx_job = _rtfx_job(one) if len(rounds) == 1 else None
    if rtfx_job is not None:
        jobs["rtfx"] = rtfx_job
    found = shared_bootstrap(jobs, seed=seed, threads=threads)
    if len(rounds) > 1:
        rtfx = repeats_interval(by_round)
    else:
        rtfx = found["rtfx"] if rtfx_job else none_interval(METHOD_BOOTSTRAP, len(one))
    return {
        "rounds": len(rounds),
        "rtfx": rtfx,
        "rtfx_by_round": by_round,
        "continuity_pct": continuity_interval(pooled),
        "continuity_pct_at": continuity_intervals_at(pooled, thresholds_s),
        "ttfa_s_p50": found[("ttfa_s", 50)],
        "ttfa_s_p90": found[("ttfa_s", 90)],
        "perceived_first_audio_s": percentiles(perceived),
        "perceived_first_audio_s_p50": found[("perceived", 50)],
        "perceived_first_audio_s_p90": found[("perceived", 90)],
    }
