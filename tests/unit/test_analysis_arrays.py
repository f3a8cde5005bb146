"""The array forms of the analysis give the figures of the forms they replaced, bit for bit:
the pausing player's play times (a chunk-by-chunk loop before), the shared bootstrap (one
scipy.stats.bootstrap per figure before), and a point's slim records (whole records)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from thetalker.metrics import intervals
from thetalker.metrics.intervals import (
    bootstrap,
    percentile_intervals,
    resampling,
    shared_bootstrap,
)
from thetalker.metrics.players import pausing_stalls_s, summarize_players
from thetalker.metrics.point import point_fields, summarize_point
from thetalker.metrics.stream import chunk_play_starts


def _loop_play_starts(arrivals, sizes, bps):
    """The chunk-by-chunk player `chunk_play_starts` was before (the reference)."""
    starts, ends = np.empty(len(arrivals)), np.empty(len(arrivals))
    play_end = -np.inf
    for i, (t_i, b_i) in enumerate(zip(arrivals, sizes, strict=True)):
        start = max(float(t_i), play_end)
        starts[i] = start
        play_end = start + int(b_i) / bps
        ends[i] = play_end
    return starts, ends


def test_play_starts_are_the_loops_to_the_last_bit():
    rng = random.Random(0)
    for _ in range(3000):
        n = rng.randint(0, 40)
        bps = rng.choice([48000, 44100, 32000, 2])
        times = [rng.uniform(0, 3) for _ in range(n)]
        if rng.random() < 0.8:
            times.sort()  # arrivals in order, as recorded; out of order too, below
        if rng.random() < 0.3:
            times = [round(t, 2) for t in times]  # ties: a chunk arriving as the last ends
        sizes = [rng.choice([0, 1, 960, 4800, 48000, rng.randint(0, 100000)]) for _ in times]
        new, old = chunk_play_starts(times, sizes, bps), _loop_play_starts(times, sizes, bps)
        assert np.array_equal(new[0], old[0]) and np.array_equal(new[1], old[1])


def test_stalls_are_the_play_starts_gaps_to_the_last_bit():
    """`pausing_stalls_s` walks the timeline in a plain loop (a record's tens of chunks):
    the same gaps as `chunk_play_starts`' arrays, float for float, ties and all."""
    rng = random.Random(1)
    for _ in range(3000):
        n = rng.randint(1, 40)
        rate = rng.choice([24000, 22050, 16000, 1])
        times = sorted(rng.uniform(0, 3) for _ in range(n))
        if rng.random() < 0.3:
            times = [round(t, 2) for t in times]
        sizes = [rng.choice([2, 960, 4800, 48000, 2 * rng.randint(1, 50000)]) for _ in times]
        record = {"chunk_arrival_s": times, "chunk_bytes": sizes, "sample_rate": rate}
        starts, ends = chunk_play_starts(times, sizes, 2.0 * rate)
        gaps = starts[1:] - ends[:-1]
        assert pausing_stalls_s(record) == [float(g) for g in gaps[gaps > 1e-9]]


@pytest.mark.parametrize("n", [2, 3, 17, 301])
def test_shared_bootstrap_is_scipys_bootstrap(n: int, monkeypatch: pytest.MonkeyPatch):
    # Blocks of a few rows (not scipy's 1000) and a count of resamples no block divides.
    monkeypatch.setattr(resampling, "_BLOCK_VALUES", 7 * n)
    rng = np.random.default_rng(n)
    ttfa = np.round(rng.gamma(2.0, 0.2, n), 3)  # rounded: ties, as real timings have
    audio = np.where(rng.random(n) < 0.1, 0.0, rng.uniform(0.5, 9.0, n))

    def p50(x, axis=-1):
        return np.percentile(x, 50, axis=axis)

    def p90(x, axis=-1):
        return np.percentile(x, 90, axis=axis)

    def rtfx(x, axis=-1):
        return x.sum(axis=axis) / 3.7

    def both(x, axis=-1):
        return np.percentile(x, [50, 90], axis=axis)

    kw = {"n_resamples": 2503, "seed": 3}
    found = shared_bootstrap(
        {("p50", "p90"): (ttfa, both), "rtfx": (audio, rtfx), "audio_p90": (audio, p90)}, **kw
    )
    assert found["p50"] == bootstrap([ttfa], p50, **kw)
    assert found["p90"] == bootstrap([ttfa], p90, **kw)
    assert found["rtfx"] == bootstrap([audio], rtfx, **kw)
    assert found["audio_p90"] == bootstrap([audio], p90, **kw)


def test_percentile_intervals_edge_cases_are_bootstraps():
    def p50(x, axis=-1):
        return np.percentile(x, 50, axis=axis)

    series = {"none": [], "one": [0.3], "nulls": [None, 0.2, None, 0.4], "tied": [0.5] * 6}
    found = percentile_intervals(series, [50], seed=0, n_resamples=500)
    for name, values in series.items():
        clean = [v for v in values if v is not None]
        assert found[name][50] == bootstrap([clean], p50, n_resamples=500), name


def test_slim_records_give_a_points_figures():
    from tests.support.synthetic_records import templates

    records = templates(80, 20, seed=5)
    slim = [point_fields(r) for r in records]
    assert summarize_point(slim, 4) == summarize_point(records, 4)
    assert summarize_players(slim) == summarize_players(records)


@pytest.mark.parametrize(("na", "nb"), [(2, 2), (5, 3), (40, 40)])
def test_shared_change_bootstrap_is_scipys_two_sample_bootstrap(na: int, nb: int):
    from thetalker.metrics.intervals import shared_change_bootstrap

    rng = np.random.default_rng(na * nb)
    a, b = np.round(rng.gamma(2.0, 0.2, na), 3), np.round(rng.gamma(2.0, 0.25, nb), 3)
    fa, fb = (rng.random(na) < 0.9).astype(float), (rng.random(nb) < 0.7).astype(float)

    def change(q):
        def stat(x, y, axis=-1):
            return np.percentile(x, q, axis=axis) - np.percentile(y, q, axis=axis)

        return stat

    def both(x, y, axis=-1):
        return np.percentile(x, [50, 90], axis=axis) - np.percentile(y, [50, 90], axis=axis)

    def ratio(x, y, axis=-1):
        return (x.sum(axis=axis) / 2.0) / (y.sum(axis=axis) / 3.0)

    kw = {"n_resamples": 2503, "seed": 1}
    found = shared_change_bootstrap(
        {("p50", "p90"): ((a, b), both), "ratio": ((fa, fb), ratio)}, **kw
    )
    assert found["p50"] == bootstrap([a, b], change(50), **kw)
    assert found["p90"] == bootstrap([a, b], change(90), **kw)
    assert found["ratio"] == bootstrap([fa, fb], ratio, **kw)


def test_a_points_intervals_are_the_same_on_any_number_of_threads():
    from tests.support.synthetic_records import templates
    from thetalker.metrics.intervals import point_intervals

    records = [dict(r, t_submit_s=0.1 * i) for i, r in enumerate(templates(60, 10, seed=7))]
    assert point_intervals([records], threads=2) == point_intervals([records], threads=1)


def test_large_sample_closed_forms_worked_by_hand():
    """The order-statistic interval of a median of 10 is [x_(2), x_(9)] (Binomial(10, 0.5):
    P(2 <= B < 9) = 97.9 %); the normal interval of a sum: 1+2+3+4 over a 2 s window is
    5 +/- 1.95996 x 1.29099 x 2 / 2."""
    jobs = {
        ("p50",): (np.arange(1.0, 11.0), intervals.Percentiles((50,))),
        "rtfx": (np.array([1.0, 2.0, 3.0, 4.0]), intervals.SumOverWindow(2.0)),
    }
    found = shared_bootstrap(jobs, large_sample_n=2)
    median = found["p50"]
    assert (median.value, median.low, median.high, median.method) == (
        5.5,
        2.0,
        9.0,
        "order-statistic",
    )
    rtfx = found["rtfx"]
    assert rtfx.method == "normal" and rtfx.value == 5.0
    assert rtfx.high - 5.0 == pytest.approx(1.959964 * 1.290994, rel=1e-6)
    assert rtfx.low == pytest.approx(10.0 - rtfx.high)


def test_large_samples_get_closed_forms_that_agree_with_the_bootstrap():
    """From LARGE_SAMPLE_N on, a point's percentiles and RTFx are computed in closed form;
    at that size each bound lies within a tenth of the bootstrap interval's width of the
    bootstrap's own (the same data, resampled). One observation fewer: resampled as ever."""
    n = intervals.LARGE_SAMPLE_N
    rng = np.random.default_rng(5)
    ttfa = np.round(rng.gamma(2.0, 0.2, n), 4)
    audio = np.where(rng.random(n) < 0.05, 0.0, rng.uniform(0.5, 9.0, n))
    jobs = {
        ("p50", "p90"): (ttfa, intervals.Percentiles((50, 90))),
        "rtfx": (audio, intervals.SumOverWindow(120.0)),
    }
    closed, resampled = shared_bootstrap(jobs), shared_bootstrap(jobs, large_sample_n=None)
    assert [closed[k].method for k in ("p50", "p90", "rtfx")] == [
        "order-statistic", "order-statistic", "normal",
    ]  # fmt: skip
    for key in ("p50", "p90", "rtfx"):
        a, b = closed[key], resampled[key]
        assert b.method == "bootstrap" and a.value == b.value and a.n == b.n == n
        width = b.high - b.low
        assert abs(a.low - b.low) < width / 10 and abs(a.high - b.high) < width / 10
    fewer = {k: (sample[:-1], stat) for k, (sample, stat) in jobs.items()}
    assert {iv.method for iv in shared_bootstrap(fewer).values()} == {"bootstrap"}


def test_wilson_is_scipys_binomtest_interval_to_the_last_bit():
    from scipy import stats

    rng = random.Random(2)
    cases = [(k, n) for n in range(1, 60) for k in range(n + 1)]
    cases += [(rng.randint(0, n), n) for n in (rng.randint(60, 10**7) for _ in range(2000))]
    for k, n in cases:
        for level in (0.95, 0.9):
            ci = stats.binomtest(k, n).proportion_ci(level, method="wilson")
            found = intervals.wilson_pct(k, n, level)
            assert (found.low, found.high) == (100.0 * float(ci.low), 100.0 * float(ci.high))
