"""The two statistics a point bootstraps, percentiles and RTFx (a sum over the window), with
the closed forms that replace the resampling from `LARGE_SAMPLE_N` requests on.

Serves points.csv's TTFA and perceived-first-audio p50/p90 (the TTFA table) and a one-round
point's RTFx (the throughput table; `headline.point_intervals`), and the agent table's
(`thetalker.metrics.agent`).

Large samples. 10,000 resamples of n requests are 10,000 x n draws: at a point of 100,000
requests, 10^9 integers and their gathering, about 40 s of CPU for the four percentiles and
the RTFx of one point, where reading its records takes under 2. From `LARGE_SAMPLE_N`
observations on, the two statistics a point bootstraps get the closed-form intervals the
bootstrap approximates at that size: a percentile the distribution-free order-statistic
interval (the ranks l and u with P(l <= B < u) >= confidence for B ~ Binomial(n, q): the
interval [x_(l), x_(u)] covers the population's q-quantile whatever the distribution), and
a sum over requests (RTFx with its window kept) the normal interval of a sum, value +/-
z * s * sqrt(n) / window, s the requests' standard deviation. Their `method` names them
("order-statistic", "normal"); below `LARGE_SAMPLE_N` nothing changes. At 5,000 requests
both agree with the bootstrap's bounds to within its own Monte Carlo noise
(tests/unit/test_analysis_arrays.py). Other statistics are always resampled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from thetalker.metrics.intervals.core import (
    METHOD_BOOTSTRAP,
    METHOD_NORMAL,
    METHOD_ORDER_STATISTIC,
    SEED,
    Interval,
    none_interval,
)
from thetalker.metrics.intervals.resampling import shared_bootstrap
from thetalker.metrics.point import measurement_window_s, scored_records

__all__ = [
    "Percentiles",
    "SumOverWindow",
    "percentile_job",
    "percentile_intervals",
    "percentile_interval",
    "delivered_audio_s",
    "rtfx_bootstrap",
    "rtfx_job",
]


@dataclass(frozen=True)
class Percentiles:
    """Percentiles `qs` (linear interpolation, as `percentiles`) as a bootstrap statistic;
    over `LARGE_SAMPLE_N` observations or more, their order-statistic intervals."""

    qs: tuple[float, ...]
    # what `resampling.shared_bootstrap` names its closed form's Intervals
    closed_form_method: ClassVar[str] = METHOD_ORDER_STATISTIC

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
    closed_form_method: ClassVar[str] = METHOD_NORMAL

    def __call__(self, x: np.ndarray, axis: int = -1) -> np.ndarray:
        return x.sum(axis=axis) / self.window_s

    def closed_form(self, data: np.ndarray, confidence: float) -> list[tuple[float, float]]:
        """value +/- z * s * sqrt(n) / window_s: the standard error of a sum of n draws."""
        from statistics import NormalDist

        value = float(self(data))
        z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
        half = z * float(data.std(ddof=1)) * float(np.sqrt(data.size)) / self.window_s
        return [(value - half, value + half)]


def percentile_job(
    name: str, values: Iterable[float | None], qs: Sequence[float]
) -> tuple[tuple[tuple[str, float], ...], tuple[list[float], Any]]:
    """A `shared_bootstrap` job of percentiles `qs` of the values (None left out), keyed
    (name, q)."""
    sample = [float(v) for v in values if v is not None]
    return tuple((name, q) for q in qs), (sample, Percentiles(tuple(qs)))


def percentile_intervals(
    series: Mapping[str, Iterable[float | None]],
    qs: Sequence[float],
    seed: int = SEED,
    **kw: Any,
) -> dict[str, dict[float, Interval]]:
    """`percentile_interval(values, q)` of each series at each q (the same Intervals):
    {name: {q: Interval}}, the series of one size sharing one draw (`shared_bootstrap`)."""

    jobs = dict(percentile_job(name, values, qs) for name, values in series.items())
    found = shared_bootstrap(jobs, seed=seed, **kw)
    return {name: {q: found[(name, q)] for q in qs} for name in series}


def percentile_interval(
    values: Iterable[float | None], q: float, seed: int = SEED, **kw: Any
) -> Interval:
    """Percentile `q` (linear interpolation, as `percentiles`) with a bootstrap over values."""
    return percentile_intervals({"values": values}, [q], seed=seed, **kw)["values"][q]


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
    job = rtfx_job(scored)
    if job is None:
        return none_interval(METHOD_BOOTSTRAP, len(scored))
    return shared_bootstrap({"rtfx": job}, seed=seed, **kw)["rtfx"]


def rtfx_job(scored: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, Any] | None:
    """`rtfx_bootstrap`'s sample and statistic (None: no window, no interval)."""
    window_s = measurement_window_s(scored)
    if window_s <= 0:
        return None
    return delivered_audio_s(scored), SumOverWindow(window_s)
