"""The resampling engine: scipy's percentile bootstrap, and the shared draws that give its
Intervals for every statistic of a point (or of a change between two runs) at once.

Serves every bootstrapped figure: points.csv's TTFA and perceived-first-audio p50/p90 and a
one-round point's RTFx (through `closed_forms`), wer.csv's WER (`proportions.rate_pct`),
naturalness.csv's DNSMOS means, and thetalker-compare's changes (`shared_change_bootstrap`).

Bootstrap intervals are scipy's percentile bootstrap (well defined on small or tied samples
where BCa's jackknife degenerates), seeded, so a rebuild prints the same digits; a resample
whose statistic is undefined (nan: no reference word drawn, 0/0) is left out of the
percentiles. The shared bootstraps draw the indices scipy draws from the same seed, so they
give its Intervals to the last bit (tests/unit/test_analysis_arrays.py). A statistic that
has a closed form (`closed_form_method` and `closed_form(data, confidence)`: the percentiles
and RTFx of `closed_forms`) gets it instead from `LARGE_SAMPLE_N` observations on.
scipy is imported where it is used: the client computes no interval and need not load it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from thetalker.metrics.intervals.core import (
    CONFIDENCE,
    METHOD_BOOTSTRAP,
    N_RESAMPLES,
    SEED,
    Interval,
    none_interval,
)

__all__ = [
    "LARGE_SAMPLE_N",
    "bootstrap",
    "percentile_ci",
    "shared_bootstrap",
    "shared_change_bootstrap",
]

# Resamples evaluated at once: bounds memory at about this many x n floats.
_BATCH = 1000
# Resampled values held at once by the shared bootstraps below (per array): bounds their
# memory at about 8 bytes x this, whatever the sample's size.
_BLOCK_VALUES = 4_000_000

# From this many observations on, a statistic with a closed form (a percentile, a sum over
# requests) gets it, not a resampling (`closed_forms`' note: "Large samples").
LARGE_SAMPLE_N = 5_000


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


def shared_bootstrap(
    jobs: Mapping[Any, tuple[Sequence[float] | np.ndarray, Any]],
    seed: int = SEED,
    n_resamples: int = N_RESAMPLES,
    confidence: float = CONFIDENCE,
    threads: int = 1,
    large_sample_n: int | None = LARGE_SAMPLE_N,
) -> dict[Any, Interval]:
    """`bootstrap([sample], statistic)` of each job (name: (sample, statistic)), the same
    Intervals, with one draw of resamples for all the samples of one size. A statistic with
    a closed form (its `closed_form_method` and `closed_form(data, confidence)`:
    `closed_forms.Percentiles`, `SumOverWindow`) over `large_sample_n` observations or more
    gets that instead (`closed_forms`' note: "Large samples"; None: always resampled).

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
        method = getattr(statistic, "closed_form_method", None)
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
    statistic: Any,
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
