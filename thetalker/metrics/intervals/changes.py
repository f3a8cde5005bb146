"""Changes between two runs, B against A (or A against B): RTFx ratios and differences,
percentile differences and the change in a share of streams, each run resampled on its own.

Serves thetalker-compare's TTFA p50/p90 B - A, continuity B - A and clean-stream share B - A
(its changes table and changes.csv; thetalker.report.compare, which runs the jobs here through
`resampling.shared_change_bootstrap`), the ratio column of the throughput table
(`rtfx_ratio_interval`, thetalker.report.tables), and the A/B comparisons to come. A change
with no spread to resample gets Newcombe's interval (`proportions`' note).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from thetalker.metrics.intervals.closed_forms import delivered_audio_s
from thetalker.metrics.intervals.core import (
    CONFIDENCE,
    METHOD_BOOTSTRAP,
    SEED,
    Interval,
    at_bound,
    none_interval,
)
from thetalker.metrics.intervals.proportions import newcombe_for, wilson_pct
from thetalker.metrics.intervals.resampling import shared_change_bootstrap
from thetalker.metrics.intervals.rounds import paired_interval, pool_rounds
from thetalker.metrics.point import measurement_window_s, scored_records, summarize_point

__all__ = [
    "rtfx_ratio_interval",
    "rtfx_change_job",
    "rtfx_change_bootstrap",
    "percentile_change_job",
    "percentile_change_bootstrap",
    "continuity_change_job",
    "continuity_change_bootstrap",
    "share_change_pct",
    "continuity_change_at_bound",
]


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
    return rtfx_change_bootstrap(
        pool_rounds(rounds_a), pool_rounds(rounds_b), ratio=True, seed=seed, **kw
    )


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
    to resample (every stream continuous in both, say): Newcombe's interval (`proportions`'
    note)."""
    flags, _ = continuity_change_job(records_a, records_b)
    return share_change_pct(*flags, seed=seed, **kw)


def share_change_pct(
    flags_a: Sequence[float], flags_b: Sequence[float], seed: int = SEED, **kw: Any
) -> Interval:
    """The share of 1s in `flags_a` minus that in `flags_b` (0/1 per stream), in percentage
    points, each side resampled on its own; no spread to resample (every stream clean on
    both sides, say): Newcombe's interval (`proportions`' note), as for continuity."""
    job = ((list(flags_a), list(flags_b)), _share_difference_pct)
    ci = shared_change_bootstrap({"c": job}, seed=seed, **kw)["c"]
    return continuity_change_at_bound(ci, job, kw.get("confidence", CONFIDENCE))


def continuity_change_at_bound(
    ci: Interval, job: tuple[tuple[list[float], list[float]], Any], level: float = CONFIDENCE
) -> Interval:
    """The continuity change's Interval from its bootstrap `ci` over `job`'s flags: `ci`
    itself, or, with no spread to resample (`at_bound`: every stream continuous in both
    runs, say), Newcombe's interval from the two runs' Wilson intervals (`newcombe_for`)."""
    if not at_bound(ci):
        return ci
    (fa, fb), _ = job
    a = wilson_pct(int(sum(fa)), len(fa), level)
    return newcombe_for(ci, a, wilson_pct(int(sum(fb)), len(fb), level))
