"""The headline figures of one point with their intervals, from its records alone.

Serves points.csv's interval columns, one row per point (thetalker.report.points): RTFx (the
throughput table), continuity at the run's threshold and at each threshold (the continuity
tables), TTFA and perceived-first-audio p50/p90 (the TTFA table). Every bootstrap of the
point is drawn at once (`resampling.shared_bootstrap`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from thetalker.metrics.intervals.closed_forms import percentile_job, rtfx_job
from thetalker.metrics.intervals.core import METHOD_BOOTSTRAP, SEED, none_interval
from thetalker.metrics.intervals.proportions import continuity_interval, continuity_intervals_at
from thetalker.metrics.intervals.resampling import shared_bootstrap
from thetalker.metrics.intervals.rounds import pool_rounds, repeats_interval
from thetalker.metrics.point import percentiles, scored_records, summarize_point
from thetalker.metrics.stream import CONTINUITY_THRESHOLDS_S, perceived_first_audio_s

__all__ = ["point_intervals"]


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
    pooled = scored_records(pool_rounds(rounds))
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
        percentile_job(name, values, (50, 90))
        for name, values in (("ttfa_s", ttfa), ("perceived", perceived))
    )
    one = scored_records(rounds[0]) if len(rounds) == 1 else []
    one_rtfx = rtfx_job(one) if len(rounds) == 1 else None
    if one_rtfx is not None:
        jobs["rtfx"] = one_rtfx
    found = shared_bootstrap(jobs, seed=seed, threads=threads)
    if len(rounds) > 1:
        rtfx = repeats_interval(by_round)
    else:
        rtfx = found["rtfx"] if one_rtfx else none_interval(METHOD_BOOTSTRAP, len(one))
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
