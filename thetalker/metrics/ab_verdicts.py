"""A verdict per figure of B against A: regression, improvement, or no change the run can show.

Serves the A/B table (results/tables/ab.md, over `intervals.paired`'s PairedChange) and
thetalker-compare's verdict column (its unpaired intervals, wrapped in a PairedChange).

`judge` calls a change a regression (an improvement) only with 3 or more rounds (`MIN_ROUNDS`:
two rounds' Student t is exact only for normal noise, and a start's noise is not) and when ALL
of the following hold (thetalker-compare's folders of one round each: the interval alone, and
its `why` says so):

1. its interval lies wholly on the worse (better) side of no change (1 for a ratio, 0 for
   a difference): the change is not noise between prompts (an interval with no spread,
   every request alike, is its estimate: condition 4 judges it);
2. the estimate's size reaches the minimum effect (`MinEffect`): a change too small to
   matter is not named, however sure;
3. EVERY round's own estimate is on that side by at least the minimum
   effect. The arms run interleaved (A B, then B A, ...), which cancels a machine's linear
   drift from the pooled estimate; a drift larger than the change shows as opposite signs
   in alternate rounds, and then no verdict is given rather than a false alarm;
4. the rounds' own estimates, taken as N observations of the change
   (`between_rounds`: Student t, N - 1 degrees of freedom; a ratio on the log scale), give
   an interval clear of no change too. The bootstrap of condition 1 sees the noise between
   prompts only; a fresh server per arm adds noise between starts (a start that lands on a
   busy moment of the machine, a batch that forms differently), which only the rounds
   measure. An A/A run on a busy 2-core machine had one round's B at 7x A's first audio p95
   and the other at 1.15x: conditions 1-3 called that a regression, this one does not.
   The judged figures of one point are a family (`families`: RTFx, first audio, continuity,
   failures, output length), and this interval is taken at 1 - 0.05 / families
   (Bonferroni), so that an A/A run names a change somewhere at a point in at most 5% of
   runs, not 5% per figure: a release gate that cries wolf on one run in five is switched
   off. With 3 rounds and 5 families that is 9.9 standard errors; with 2 rounds, 64: two
   rounds show only a change they agree on within a few percent. Run 3 or more. Rounds
   all alike (a share at 0 or 100% in each: every stream of a start stalled, or none, as
   an A/A on the engine gave, A's starts stalling 0.6 and 2.5 s and B's not) have no
   spread to scale by: where the requests within them varied, the bootstrap of condition 1
   measured the noise and decides; where they did not either, the rounds count only once a
   sign test tells N alike of N from chance at the family's level (`unanimous_rounds`: 8
   rounds for 5 families).

Otherwise "no change the run can show": not "no change", only none this run is large
enough to see (`resolution` says how small a change it could have seen, and
`requests_to_show` about how many requests would show a given one).

A failed arm overrides all this (`failed_arm`): an arm whose scored requests mostly
failed measures its failures, so no figure of that point is a speed-up (vllm-omni #7184
read zero throughput for three days as a figure).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from thetalker.metrics.intervals.core import CONFIDENCE, METHOD_REPEATS, Interval, none_interval
from thetalker.metrics.intervals.paired import PairedChange
from thetalker.metrics.intervals.rounds import repeats_interval
from thetalker.metrics.point import is_dropped

__all__ = [
    "REGRESSION",
    "IMPROVEMENT",
    "NO_CHANGE",
    "VERDICT_KINDS",
    "MinEffect",
    "Verdict",
    "judge",
    "MIN_ROUNDS",
    "between_rounds",
    "family_confidence",
    "unanimous_rounds",
    "failed_arm",
    "minimum_effect",
    "resolution",
    "requests_to_show",
]

# The fewest rounds a verdict rests on. Two rounds' Student t is exact only for normal noise;
# a start's noise is not (an engine start either stalls its first batch a second or two, or
# not): an engine A/A had both of B's starts stall and neither of A's, B's first audio per
# audio second 17.5x and 18.1x A's, two rounds alike enough for t with 1 degree of freedom.
MIN_ROUNDS = 3
REGRESSION = "regression"
IMPROVEMENT = "improvement"
NO_CHANGE = "no change the run can show"
# What a figure is, for its minimum effect and units: a ratio (RTFx, output length: %),
# a time difference (s), a share difference (percentage points), a score difference (DNSMOS
# OVRL, points of its 1-5 scale).
VERDICT_KINDS = ("ratio", "time", "share", "score")


@dataclass(frozen=True)
class MinEffect:
    """The smallest change a verdict names, per kind of figure.

    rate_pct: a ratio (RTFx, output length) must move by this many percent of A.
    time_s, time_pct: a time difference must reach the LARGER of time_s seconds and
    time_pct percent of A's value (20 ms is nothing at 2 s, 10% is nothing at 50 ms).
    share_pp: a share (continuity, failures) must move by this many percentage points.
    score: a score (DNSMOS OVRL, 1-5) must move by this many points.
    """

    rate_pct: float = 5.0
    time_s: float = 0.020
    time_pct: float = 10.0
    share_pp: float = 5.0
    score: float = 0.1

    def __post_init__(self) -> None:
        for name in ("rate_pct", "time_s", "time_pct", "share_pp", "score"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"MinEffect.{name} must be a number >= 0, got {value!r}")


@dataclass(frozen=True)
class Verdict:
    """label: REGRESSION, IMPROVEMENT or NO_CHANGE from `judge`; `failed_arm`'s label is
    "failed arm (A|B): k of n requests failed". why: one line saying what decided it."""

    label: str
    why: str


def _kind(kind: str) -> None:
    if kind not in VERDICT_KINDS:
        raise ValueError(f"verdict kind must be one of {VERDICT_KINDS}, got {kind!r}")


def minimum_effect(kind: str, min_effect: MinEffect, base: float | None = None) -> float:
    """The minimum effect in the change's own units: a ratio's distance from 1 (0.05 for
    5%), a time's seconds (the larger of time_s and time_pct of |base|, A's value), a
    share's percentage points."""
    _kind(kind)
    if kind == "ratio":
        return min_effect.rate_pct / 100.0
    if kind == "share":
        return min_effect.share_pp
    if kind == "score":
        return min_effect.score
    relative = min_effect.time_pct / 100.0 * abs(base) if base is not None else 0.0
    return max(min_effect.time_s, relative)


def _units(kind: str, size: float) -> str:
    units = {"ratio": f"{100 * size:.1f}%", "time": f"{size:.3f} s", "share": f"{size:.1f} pp"}
    return units.get(kind, f"{size:.2f} points")


def judge(
    change: PairedChange,
    kind: str,
    higher_is_better: bool,
    min_effect: MinEffect | None = None,
    families: int = 1,
) -> Verdict:
    """The verdict on one figure's change (module note: all three conditions, or no
    change the run can show). kind: "ratio" (change.estimate is B / A), "time" or "share"
    (B - A in seconds or percentage points). higher_is_better: RTFx, continuity (True);
    times, failures (False). A time's minimum effect is relative to A's value
    (`change.a`), its rounds' too."""
    _kind(kind)
    effect = min_effect or MinEffect()
    null = 1.0 if kind == "ratio" else 0.0
    ci, estimate = change.interval, change.estimate
    if estimate is None:
        return Verdict(NO_CHANGE, "no value on one side: nothing to compare")
    flat_requests = ci.low is None or ci.high is None
    if flat_requests:
        if len([v for v in change.per_round if v is not None]) < 2:
            return Verdict(
                NO_CHANGE, "no interval (too few requests, or no spread): no change shown"
            )
        # No spread between requests (every stream the same length: RTFx does not move when
        # they are redrawn): nothing to judge at that level, the rounds judge it (condition 4).
        ci = Interval(estimate, estimate, estimate, ci.method, ci.n, ci.confidence)
    if ci.low > null:
        higher = True
    elif ci.high < null:
        higher = False
    else:
        return Verdict(NO_CHANGE, f"the interval [{ci.low:.4g}, {ci.high:.4g}] holds {null:g}")
    label = IMPROVEMENT if higher == higher_is_better else REGRESSION
    need = minimum_effect(kind, effect, change.a)
    size = abs(estimate - null)
    if size < need:
        return Verdict(
            NO_CHANGE,
            f"{_units(kind, size)} is below the minimum effect {_units(kind, need)}",
        )
    rounds = list(change.per_round)
    if 0 < len(rounds) < MIN_ROUNDS:
        return Verdict(
            NO_CHANGE,
            f"{len(rounds)} rounds: the noise between server starts is not measured (a verdict "
            f"needs {MIN_ROUNDS} or more)",
        )
    if len(rounds) >= 2:
        for k, value in enumerate(rounds, start=1):
            if value is None or (value - null if higher else null - value) < need:
                shown = "no value" if value is None else f"{value:.4g}"
                return Verdict(
                    NO_CHANGE,
                    f"round {k}'s own estimate ({shown}) is not {label} by "
                    f"{_units(kind, need)}: the rounds disagree (drift or noise)",
                )
        spread = between_rounds(change, kind, families)
        if spread.low is None and flat_requests:
            # Nothing varies but the starts: every stream of a start alike, every round
            # alike (a share at 0 or 100% in each): only a sign test over rounds is left.
            return Verdict(
                NO_CHANGE,
                f"the {len(rounds)} rounds are all alike ({rounds[0]:.4g}) and so is every "
                f"request in them: no measure of the noise between starts, and alike by chance "
                f"once in {2 ** (len(rounds) - 1):g} (a sign test needs "
                f"{unanimous_rounds(families)} rounds)",
            )
        if spread.low is None:  # rounds alike, requests not: the bootstrap measured it
            agree = f"; all {len(rounds)} rounds alike, the interval between requests decides"
        elif not spread.excludes(null):
            return Verdict(
                NO_CHANGE,
                f"between rounds [{_bound(spread.low)}, {_bound(spread.high)}] holds {null:g}: "
                f"the rounds differ more than the change (noise between server starts)",
            )
        else:
            agree = f"; all {len(rounds)} rounds agree, between rounds clear of {null:g} too"
    else:
        agree = "; one round: the verdict rests on the interval alone"
    return Verdict(
        label,
        f"{_units(kind, size)} beyond no change, interval [{ci.low:.4g}, {ci.high:.4g}] "
        f"clear of {null:g}{agree}",
    )


def _bound(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def family_confidence(families: int) -> float:
    """The confidence of each of `families` intervals judged at once, so that all hold
    together at CONFIDENCE (Bonferroni)."""
    return 1.0 - (1.0 - CONFIDENCE) / max(1, int(families))


def unanimous_rounds(families: int = 1) -> int:
    """The fewest rounds whose all-alike changes a sign test tells from chance at the
    family's level: the least N with 2 x 0.5^N <= 0.05 / families (8 for 5 families)."""
    alpha = (1.0 - CONFIDENCE) / max(1, int(families))
    return max(2, math.ceil(math.log2(2.0 / alpha) - 1e-12))


def between_rounds(change: PairedChange, kind: str, families: int = 1) -> Interval:
    """The change over its rounds' own estimates, each round one observation: their mean
    and Student t interval (N - 1 degrees of freedom) at `family_confidence(families)`; a
    ratio's on the log scale, given back as a ratio (its value the geometric mean). No
    interval with under 2 rounds with values, or a ratio round at or below 0."""
    _kind(kind)
    confidence = family_confidence(families)
    values = [v for v in change.per_round if v is not None]
    if len(values) >= 2 and max(values) == min(values):
        # Rounds all alike (a share at 0 or 100% in every round: every stream of a start
        # stalls, or none) give Student t no spread to scale by. Alike in N of N rounds is
        # chance 2 x 0.5^N under no change (a sign test): an interval only when that is
        # below the level, else none.
        if len(values) < unanimous_rounds(families):
            return none_interval(METHOD_REPEATS, len(values), values[0])
        return Interval(values[0], values[0], values[0], METHOD_REPEATS, len(values), confidence)
    if kind != "ratio":
        return repeats_interval(values, confidence)
    if not values or min(values) <= 0:
        return none_interval(METHOD_REPEATS)
    logs = repeats_interval([math.log(v) for v in values], confidence)

    def back(x: float | None) -> float | None:
        return None if x is None else math.exp(x)

    return Interval(
        back(logs.value), back(logs.low), back(logs.high), METHOD_REPEATS, logs.n, confidence
    )


def _counts(summary_or_records: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """(failed, scored) from a point summary (`n_failed`, `n_scored`) or its records
    (warmup and dropped arrivals left out, as `summarize_point` leaves them)."""
    if isinstance(summary_or_records, Mapping):
        if "n_failed" not in summary_or_records or "n_scored" not in summary_or_records:
            raise ValueError("a summary for failed_arm needs n_failed and n_scored")
        return int(summary_or_records["n_failed"]), int(summary_or_records["n_scored"])
    scored = [r for r in summary_or_records if not r.get("warmup") and not is_dropped(r)]
    return sum(1 for r in scored if not r.get("ok")), len(scored)


def failed_arm(
    summary_or_records: Mapping[str, Any] | Iterable[Mapping[str, Any]], side: str
) -> Verdict | None:
    """The verdict every figure of a point gets when this arm (`side`: "A" or "B") is a
    failed arm: more than half its scored requests failed. Its label is "failed arm
    (A): k of n requests failed", never a speed-up or a slow-down; None when the arm is not
    a failed arm. Called per arm with the arm's records (all rounds) or its summary."""
    failed, scored = _counts(summary_or_records)
    if scored == 0 or 2 * failed <= scored:
        return None
    return Verdict(
        f"failed arm ({side}): {failed} of {scored} requests failed",
        f"more than half of {side}'s scored requests failed: its figures measure failures",
    )


def resolution(change: PairedChange, kind: str, base: float | None = None) -> float | None:
    """The smallest change this run can show: the interval's half-width in the figure's
    units: % for a ratio, s for a time, pp for a share (None without an interval). With
    `base` (A's value, for a time), the half-width in % of it instead. A change smaller
    than this cannot clear the interval; a rule of thumb, not a power calculation."""
    _kind(kind)
    half = change.interval.half_width
    if half is None:
        return None
    if kind == "ratio":
        return 100.0 * half
    if base is not None and kind == "time":
        return 100.0 * half / abs(base) if base else None
    return half


def requests_to_show(change: PairedChange, n_pairs: int, target: float) -> int | None:
    """About how many requests per arm (over all rounds; `n_pairs` is this run's count)
    would bring the interval's half-width to `target`
    (in `resolution`'s units without base: % for a ratio, else the difference's own): the
    half-width shrinks as 1/sqrt(n), so n_pairs x (half-width / target)^2, rounded up. A
    rule of thumb: it assumes the spread stays what this run saw. None without an
    interval, or a target <= 0."""
    half = change.interval.half_width
    if half is None or target <= 0 or n_pairs <= 0:
        return None
    if change.kind == "ratio":
        half *= 100.0
    return max(1, math.ceil(n_pairs * (half / target) ** 2))
