"""Invariants of thetalker.metrics under generated timelines (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from thetalker.metrics import (
    bytes_per_second,
    compute_continuity_stats,
    compute_stalls,
    request_figures,
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
    base = request_figures(arrivals, nbytes, pcm, RATE)["audio_s"]
    shuffled = list(nbytes)
    rnd.shuffle(shuffled)
    # split every chunk in two pieces arriving together (a sample may straddle them)
    split_t = [t for t in arrivals for _ in range(2)]
    split_b = [part for b in nbytes for part in (b // 2 + 1, b - b // 2 - 1)]
    assert request_figures(arrivals, shuffled, pcm, RATE)["audio_s"] == base
    assert request_figures(split_t, split_b, pcm, RATE)["audio_s"] == base
    assert base == sum(nbytes) / BPS


@settings(max_examples=60)
@given(timelines(max_chunks=6), st.floats(0.0, 0.5), st.integers(100, 30000))
def test_audible_first_audio_is_never_before_first_byte(tl, silence_s, amplitude):
    arrivals, nbytes = tl
    n_samples = sum(nbytes) // 2
    pcm = np.zeros(n_samples, np.int16)
    onset = min(int(silence_s * RATE), n_samples)
    pcm[onset:] = amplitude
    figs = request_figures(arrivals, nbytes, pcm, RATE)
    assert figs["ttfa_audible_s"] >= figs["ttfa_s"]
    assert figs["ttfa_audible_s"] >= figs["ttfa_audible_naive_s"] - 1e-9
