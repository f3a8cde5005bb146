"""B against A on the same prompts in the same slots: the interleaved A/B's paired changes.

Serves the A/B table (`results/tables/ab.md`): each arm of one round ran the same prompts,
seed and arrival schedule on a fresh server (round 1 A then B, round 2 B then A, ...), so
A's and B's records of one round with the same `request_index` are one prompt in one slot:
a pair. `pair_rounds` pairs them (and refuses what is not a pair); `paired_change` and
`paired_rtfx_ratio` give B against A with the stratified paired bootstrap:

- each resample draws, within each round, request positions with replacement, the SAME
  positions for A and B (the prompt's own difficulty cancels), pools the rounds' draws and
  computes statistic(B) against statistic(A): B / A (`kind="ratio"`) or B - A
  (`"difference"`);
- strata are rounds, so each round keeps its size (and, for RTFx, its own window): the
  interval holds the noise between prompts, not a mix of rounds of different lengths;
- `per_round`: each round's own estimate, for the verdict's check that every round agrees
  (thetalker.metrics.ab_verdicts: interleaving cancels linear drift, so drift shows as
  opposite signs in alternate rounds).

A figure is a function record -> float | None (None: the record has no value, a failed
request's time to first audio, say). A pair where either side has no value is dropped for
that figure (`n_pairs` counts the pairs used); a figure that gives every record a value (a
failure flag, 1.0 for a failed request) keeps every pair, so a request that failed on one
side only counts in the failure share. No interval is zero-wide (`core.at_bound`): arms
alike in every pair give the estimate with no interval.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from thetalker.metrics.intervals.closed_forms import delivered_audio_s
from thetalker.metrics.intervals.core import (
    CONFIDENCE,
    METHOD_PAIRED_BOOTSTRAP,
    N_RESAMPLES,
    SEED,
    Interval,
    none_interval,
)
from thetalker.metrics.intervals.resampling import percentile_ci
from thetalker.metrics.point import measurement_window_s, scored_records

__all__ = [
    "PairedChange",
    "pair_rounds",
    "paired_change",
    "paired_rtfx_ratio",
    "percentile_statistic",
    "mean_statistic",
    "share_pct_statistic",
    "failure_flag",
]

Record = Mapping[str, Any]
Pair = tuple[Record, Record]
Figure = Callable[[Record], float | None]
Statistic = Callable[..., Any]  # statistic(x, axis=-1), vectorized over the last axis
KINDS = ("ratio", "difference")
# Resampled values held at once per arm (bounds the memory whatever the run's size).
_BLOCK_VALUES = 4_000_000


@dataclass(frozen=True)
class PairedChange:
    """B against A over the paired requests of an A/B's rounds.

    estimate: statistic(B) / statistic(A) (kind "ratio") or statistic(B) - statistic(A)
    ("difference") over all rounds' pairs pooled (None: no value). interval: its Interval
    (`.low`, `.high`; `.value` is the estimate). per_round: each round's own estimate, over
    that round's pairs only (None for a round without one). n_pairs: the pairs used (those
    where both sides have a value). a, b: the statistic over all of A's / B's used values.
    """

    estimate: float | None
    interval: Interval
    per_round: list[float | None]
    n_pairs: int
    a: float | None
    b: float | None
    kind: str = "difference"
    n_rounds: int = field(default=0)


def _index(record: Record, side: str, k: int) -> int:
    value = record.get("request_index")
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"round {k}: a record of {side} has request_index {value!r}, not an int")
    return value


def _by_index(records: Iterable[Record], side: str, k: int) -> dict[int, Record]:
    out: dict[int, Record] = {}
    for record in scored_records(records):
        i = _index(record, side, k)
        if i in out:
            raise ValueError(f"round {k}: request_index {i} appears twice in {side}'s records")
        out[i] = record
    return out


def pair_rounds(
    a_rounds: Sequence[Iterable[Record]], b_rounds: Sequence[Iterable[Record]]
) -> list[list[Pair]]:
    """Each round's scored (non-warmup) records of A and B paired by `request_index`, in
    index order. Refused in one line (ValueError) naming the round (1-based) and the
    request_index: a different `sample_id` on the two sides, a request on one side only, a
    request_index twice on one side; and unequal numbers of rounds."""
    if len(a_rounds) != len(b_rounds):
        raise ValueError(f"A has {len(a_rounds)} round(s), B {len(b_rounds)}: an A/B pairs rounds")
    out = []
    for k, (ra, rb) in enumerate(zip(a_rounds, b_rounds, strict=True), start=1):
        by_a, by_b = _by_index(ra, "A", k), _by_index(rb, "B", k)
        for i in sorted(set(by_a) ^ set(by_b)):
            side, other = ("A", "B") if i in by_a else ("B", "A")
            raise ValueError(f"round {k}: request_index {i} is in {side}'s records, not {other}'s")
        pairs = []
        for i in sorted(by_a):
            sa, sb = by_a[i].get("sample_id"), by_b[i].get("sample_id")
            if sa != sb:
                raise ValueError(
                    f"round {k}: request_index {i} is sample_id {sa!r} in A, {sb!r} in B"
                )
            pairs.append((by_a[i], by_b[i]))
        out.append(pairs)
    return out


def percentile_statistic(q: float) -> Statistic:
    """Percentile q (linear interpolation, as `point.percentiles`) over the last axis."""

    def stat(x: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.percentile(x, q, axis=axis)

    stat.__name__ = f"p{q:g}"
    return stat


def mean_statistic(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """The mean over the last axis."""
    return np.mean(x, axis=axis)


def share_pct_statistic(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """The share of 1s among 0/1 flags, in percent (differences in percentage points)."""
    return 100.0 * np.mean(x, axis=axis)


def failure_flag(record: Record) -> float:
    """1.0 for a request that failed (not ok), else 0.0: every record has a value, so a
    request that failed on one side only counts (with `share_pct_statistic`: the failure
    share in percent)."""
    return 0.0 if record.get("ok") else 1.0


def _finite(x: Any) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _compare(sb: Any, sa: Any, kind: str) -> Any:
    with np.errstate(divide="ignore", invalid="ignore"):
        if kind == "ratio":
            return np.where(np.asarray(sa) != 0, np.asarray(sb) / np.asarray(sa), np.nan)
        return np.asarray(sb) - np.asarray(sa)


def _check(kind: str, n_resamples: int, confidence: float) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def _values(pairs: Sequence[Pair], figure: Figure) -> tuple[np.ndarray, np.ndarray]:
    """A's and B's values of the pairs where both sides have one."""
    kept = [
        (float(x), float(y))
        for ra, rb in pairs
        if (x := figure(ra)) is not None and (y := figure(rb)) is not None
    ]
    if not kept:
        return np.empty(0), np.empty(0)
    xa, xb = np.array(kept).T
    return xa, xb


def _draws(sizes: Sequence[int], seed: int, n_resamples: int) -> Iterable[list[np.ndarray]]:
    """Blocks of resamples: per round, the positions drawn (rows: resamples), one draw used
    for both arms. Seeded, so a rebuild prints the same digits."""
    rng = np.random.default_rng(seed)
    rows = max(1, _BLOCK_VALUES // max(sum(sizes), 1))
    for start in range(0, n_resamples, rows):
        block = min(rows, n_resamples - start)
        yield [rng.integers(0, n, (block, n)) for n in sizes]


def _interval(value: float | None, theta: np.ndarray, n: int, confidence: float) -> Interval:
    if value is None or n < 2:
        return none_interval(METHOD_PAIRED_BOOTSTRAP, n, value)
    low, high = percentile_ci(theta, confidence)
    if low is None or high is None or low == high:  # no spread is no certainty
        return none_interval(METHOD_PAIRED_BOOTSTRAP, n, value)
    return Interval(value, low, high, METHOD_PAIRED_BOOTSTRAP, n, confidence)


def paired_change(
    pairs_by_round: Sequence[Sequence[Pair]],
    figure: Figure,
    statistic: Statistic,
    kind: str,
    seed: int = SEED,
    n_resamples: int = N_RESAMPLES,
    confidence: float = CONFIDENCE,
) -> PairedChange:
    """statistic(B) against statistic(A) over `pair_rounds`' pairs, with the stratified
    paired bootstrap (module note). `figure(record)` gives a record's value (None: none; a
    pair with None on either side is dropped for this figure, and `n_pairs` counts the pairs
    kept); `statistic(x, axis=-1)` is vectorized (`percentile_statistic(95)`,
    `mean_statistic`, `share_pct_statistic`). kind "ratio": B / A (no value where A's is 0);
    "difference": B - A."""
    _check(kind, n_resamples, confidence)
    rounds = [_values(pairs, figure) for pairs in pairs_by_round]
    used = [(xa, xb) for xa, xb in rounds if xa.size]
    per_round = [
        _finite(_compare(statistic(xb), statistic(xa), kind)) if xa.size else None
        for xa, xb in rounds
    ]
    n = sum(xa.size for xa, _ in used)
    if n == 0:
        return PairedChange(
            None, none_interval(METHOD_PAIRED_BOOTSTRAP), per_round, 0, None, None, kind,
            len(rounds),
        )  # fmt: skip
    pooled_a = np.concatenate([xa for xa, _ in used])
    pooled_b = np.concatenate([xb for _, xb in used])
    a, b = _finite(statistic(pooled_a)), _finite(statistic(pooled_b))
    estimate = None if a is None or b is None else _finite(_compare(b, a, kind))
    theta = []
    if estimate is not None and n >= 2:
        for idx in _draws([xa.size for xa, _ in used], seed, n_resamples):
            ra = np.concatenate([xa[i] for (xa, _), i in zip(used, idx, strict=True)], axis=1)
            rb = np.concatenate([xb[i] for (_, xb), i in zip(used, idx, strict=True)], axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                theta.append(_compare(statistic(rb, axis=-1), statistic(ra, axis=-1), kind))
    dist = np.concatenate(theta) if theta else np.empty(0)
    ci = _interval(estimate, dist, n, confidence)
    return PairedChange(estimate, ci, per_round, n, a, b, kind, len(rounds))


def _rtfx_strata(pairs: Sequence[Pair]) -> tuple[np.ndarray, np.ndarray, float, float] | None:
    """A's and B's delivered audio per pair and each arm's window in this round (None: a
    round without a window on a side, and with audio there: no RTFx)."""
    if not pairs:
        return None
    recs_a, recs_b = [ra for ra, _ in pairs], [rb for _, rb in pairs]
    audio_a, audio_b = delivered_audio_s(recs_a), delivered_audio_s(recs_b)
    windows = []
    for audio, recs in ((audio_a, recs_a), (audio_b, recs_b)):
        window = measurement_window_s(recs)
        if window <= 0:
            if audio.any():
                return None
            window = 1.0  # no audio over any window: RTFx 0 (rounds.round_rtfx's rule)
        windows.append(window)
    return audio_a, audio_b, windows[0], windows[1]


def paired_rtfx_ratio(
    pairs_by_round: Sequence[Sequence[Pair]],
    seed: int = SEED,
    n_resamples: int = N_RESAMPLES,
    confidence: float = CONFIDENCE,
) -> PairedChange:
    """RTFx B / A over an A/B's rounds: each arm's RTFx is the mean over rounds of that
    round's RTFx (its delivered audio over its own window; a failed request delivers 0, a
    round that delivered nothing is 0: `rounds.round_rtfx`'s rules), and the estimate is
    mean B / mean A (per_round: each round's B / A). The resampling is `paired_change`'s:
    within each round, the same request positions for A and B redrawn with replacement,
    each arm's RTFx over its redrawn requests keeping its round's window. Every pair counts
    (a failed request is 0 audio, not a gap); a round without a window where it delivered
    audio is left out (per_round None)."""
    _check("ratio", n_resamples, confidence)
    strata = [_rtfx_strata(pairs) for pairs in pairs_by_round]
    used = [s for s in strata if s is not None]
    per_round = [
        None if s is None else _finite(_compare(s[1].sum() / s[3], s[0].sum() / s[2], "ratio"))
        for s in strata
    ]
    n = sum(s[0].size for s in used)
    if not used:
        return PairedChange(
            None, none_interval(METHOD_PAIRED_BOOTSTRAP), per_round, 0, None, None, "ratio",
            len(strata),
        )  # fmt: skip
    a = float(np.mean([s[0].sum() / s[2] for s in used]))
    b = float(np.mean([s[1].sum() / s[3] for s in used]))
    estimate = _finite(_compare(b, a, "ratio"))
    theta = []
    if estimate is not None and n >= 2:
        for idx in _draws([s[0].size for s in used], seed, n_resamples):
            ta = sum(s[0][i].sum(axis=1) / s[2] for s, i in zip(used, idx, strict=True))
            tb = sum(s[1][i].sum(axis=1) / s[3] for s, i in zip(used, idx, strict=True))
            theta.append(_compare(tb, ta, "ratio"))  # the means' 1/N cancels
    dist = np.concatenate(theta) if theta else np.empty(0)
    ci = _interval(estimate, dist, n, confidence)
    return PairedChange(estimate, ci, per_round, n, a, b, "ratio", len(strata))
