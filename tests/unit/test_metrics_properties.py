"""Invariants of thetalker.metrics under generated timelines (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from thetalker.metrics import (
    bytes_per_second,
    compute_continuity_stats,
    compute_stalls,
    percentile_interval,
    request_metrics,
    rtfx_bootstrap,
    wilson_pct,
)

RATE = 24000
BPS = bytes_per_second(RATE)


@st.composite
def timelines(draw, max_chunks: int = 12):
    """Non-decreasing arrival times and positive even byte counts of the same length."""
    n = draw(st.integers(1, max_chunks))
    gaps = draw(st.lists(st.floats(0.0, 2.0, allow_nan=False), min_size=n, max_size=n))
    arrivals = list(np.cumsum(gaps))
    nbytes = draw(st.lists(st.integers(1, 48000).map(lambda b: 2 * b), min_size=n, max_size=n))
    return [float(a) for a in arrivals], nbytes


def _underruns_with_prebuffer(arrivals, nbytes, prebuffer_s) -> bool:
    """An independent player: starts `prebuffer_s` after the first chunk, never pauses."""
    t0, received = arrivals[0], nbytes[0]
    for t, b in zip(arrivals[1:], nbytes[1:], strict=True):
        if (t - t0 - prebuffer_s) * BPS - received > 1e-6:
            return True
        received += b
    return False


@given(timelines())
def test_continuity_figures_are_never_negative(tl):
    stats = compute_continuity_stats(*tl, RATE)
    stalls = compute_stalls(*tl, RATE)
    assert stats.max_underrun_s >= 0 and stats.underrun_event_count >= 0
    assert stalls.stalls >= 0 and stalls.stall_s >= 0
    # a player that never stalls never underruns, and the converse
    assert (stalls.stalls == 0) == (stats.underrun_event_count == 0) or stats.max_underrun_s < 1e-9


@given(timelines())
def test_max_underrun_is_the_smallest_prebuffer_that_avoids_every_underrun(tl):
    arrivals, nbytes = tl
    needed = compute_continuity_stats(arrivals, nbytes, RATE).max_underrun_s
    assert not _underruns_with_prebuffer(arrivals, nbytes, needed)
    if needed > 1e-3:
        assert _underruns_with_prebuffer(arrivals, nbytes, needed - 1e-3)


@given(timelines(), st.randoms(use_true_random=False))
def test_chunk_order_and_split_do_not_change_audio_seconds(tl, rnd):
    arrivals, nbytes = tl
    pcm = np.zeros(sum(nbytes) // 2, np.int16)
    base = request_metrics(arrivals, nbytes, pcm, RATE)["audio_s"]
    shuffled = list(nbytes)
    rnd.shuffle(shuffled)
    # split every chunk in two pieces arriving together (a sample may straddle them)
    split_t = [t for t in arrivals for _ in range(2)]
    split_b = [part for b in nbytes for part in (b // 2 + 1, b - b // 2 - 1)]
    assert request_metrics(arrivals, shuffled, pcm, RATE)["audio_s"] == base
    assert request_metrics(split_t, split_b, pcm, RATE)["audio_s"] == base
    assert base == sum(nbytes) / BPS


@settings(max_examples=60)
@given(timelines(max_chunks=6), st.floats(0.0, 0.5), st.integers(100, 30000))
def test_audible_first_audio_is_never_before_first_byte(tl, silence_s, amplitude):
    arrivals, nbytes = tl
    n_samples = sum(nbytes) // 2
    pcm = np.zeros(n_samples, np.int16)
    onset = min(int(silence_s * RATE), n_samples)
    # A square wave (a constant would be DC, not sound, to the onset rule).
    pcm[onset:] = amplitude * np.where(np.arange(n_samples - onset) % 2 == 0, 1, -1)
    figs = request_metrics(arrivals, nbytes, pcm, RATE)
    if not figs["audible"]:  # too short or too quiet: no audible time at all, never 0
        assert figs["ttfa_audible_s"] is None and figs["leading_silence_s"] is None
        return
    assert figs["ttfa_audible_s"] >= figs["ttfa_s"]
    assert figs["ttfa_audible_s"] >= figs["ttfa_audible_naive_s"] - 1e-9


# --- intervals ---------------------------------------------------------------------------


@settings(max_examples=60)
@given(st.integers(1, 200), st.data())
def test_wilson_contains_the_estimate_and_is_never_certain(n, data):
    k = data.draw(st.integers(0, n))
    ci = wilson_pct(k, n)
    assert ci.low <= ci.value <= ci.high
    # a finite sample never proves 0% or 100%: the far bound stays open
    assert ci.low < 100.0 and ci.high > 0.0


@settings(max_examples=40)
@given(st.integers(1, 50), st.data(), st.integers(2, 4))
def test_wilson_narrows_with_more_requests(n, data, factor):
    k = data.draw(st.integers(0, n))
    assert wilson_pct(k * factor, n * factor).half_width < wilson_pct(k, n).half_width


@st.composite
def runs(draw, min_size: int = 2, max_size: int = 30):
    """Scored records of one run: some failures, audio seconds varying request to request."""
    n = draw(st.integers(min_size, max_size))
    audio = draw(st.lists(st.floats(0.1, 10.0), min_size=n, max_size=n))
    ok = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    ok[0] = True
    return [
        {"ok": o, "warmup": False, "t_submit_s": 0.05 * i, "wall_s": 1.0, "audio_s": a}
        for i, (a, o) in enumerate(zip(audio, ok, strict=True))
    ]


@settings(max_examples=25)
@given(runs())
def test_rtfx_bootstrap_contains_the_estimate(records):
    ci = rtfx_bootstrap(records, n_resamples=2000)
    assert ci.low - 1e-9 <= ci.value <= ci.high + 1e-9


@settings(max_examples=20)
@given(runs(min_size=4))
def test_rtfx_bootstrap_narrows_with_more_requests(records):
    # the same requests four times over, in the same window: the spread of their sum
    # relative to the window halves (sqrt(4)); allow resampling noise
    many = [dict(r, t_submit_s=r["t_submit_s"] / 4) for r in records for _ in range(4)]
    few, lots = rtfx_bootstrap(records, n_resamples=2000), rtfx_bootstrap(many, n_resamples=2000)
    width_few = few.half_width / few.value
    width_lots = lots.half_width / lots.value
    assert width_lots <= width_few * 0.75 + 1e-9


@settings(max_examples=25)
@given(st.lists(st.floats(0.01, 5.0), min_size=2, max_size=40), st.sampled_from([50, 90]))
def test_percentile_interval_contains_the_estimate(values, q):
    ci = percentile_interval(values, q, n_resamples=2000)
    assert ci.low - 1e-9 <= ci.value <= ci.high + 1e-9
