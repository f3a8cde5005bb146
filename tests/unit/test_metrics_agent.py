"""The agent mode's figures (thetalker.metrics) on timelines worked out by hand."""

from __future__ import annotations

import pytest

from thetalker import metrics

PIECES = ["One", " two.", " Three", " four."]
TIMES = [0.0, 0.1, 0.2, 0.3]
UNITS = [(0, "One two."), (2, "Three four.")]
FRAME = 4800  # 0.1 s at 24 kHz


def test_last_word_of_each_unit() -> None:
    assert metrics.unit_text_sent_s(TIMES, PIECES, ["One two.", "Three four."]) == [0.1, 0.3]
    # Units split mid-piece by a server (clauses): the piece that completes it.
    assert metrics.unit_text_sent_s(TIMES, PIECES, ["One", "two. Three", "four."]) == [
        0.0,
        0.2,
        0.3,
    ]
    # A unit longer than what was sent ends at the last piece; no text: no time.
    assert metrics.unit_text_sent_s(TIMES, PIECES, ["One two. Three four. Five"]) == [0.3]
    assert metrics.unit_text_sent_s([], [], ["x"]) == [None]


def test_first_audio_lag_and_stalls_with_a_gap_between_sentences() -> None:
    arrivals = [0.5, 0.6, 0.9, 1.0]
    sizes = [FRAME] * 4
    fig = metrics.agent_figures(TIMES, PIECES, 0.35, arrivals, sizes, UNITS, 24000)
    assert fig["ttfa_first_text_s"] == pytest.approx(0.5)
    assert fig["ttfa_input_done_s"] == pytest.approx(0.15)
    assert fig["text_s"] == pytest.approx(0.35)
    # Sentence 1: frame 0 at 0.5, its last word at 0.1; sentence 2: frame 2 at 0.9 vs 0.3.
    assert fig["sentence_lag_s"] == pytest.approx([0.4, 0.6])
    # The player ran dry at 0.7 and started sentence 2 when it came: heard = received.
    assert fig["sentence_heard_lag_s"] == pytest.approx([0.4, 0.6])
    # Continuity from the first frame, the one implementation: one stall of 0.2 s.
    whole = metrics.request_metrics(arrivals, sizes, b"\x00\x00" * 9600, 24000)
    assert whole["stalls"] == 1 and whole["stall_s"] == pytest.approx(0.2)
    assert whole["max_underrun_s"] == pytest.approx(0.2)


def test_heard_lag_waits_for_the_audio_before_it() -> None:
    arrivals = [0.5, 0.52, 0.54, 0.56]  # a burst: sentence 2 comes while 1 still plays
    fig = metrics.agent_figures(TIMES, PIECES, 0.35, arrivals, [FRAME] * 4, UNITS, 24000)
    assert fig["sentence_lag_s"] == pytest.approx([0.4, 0.24])
    assert fig["sentence_heard_lag_s"] == pytest.approx([0.4, 0.4])  # played at 0.7


def test_audio_before_the_text_ends_gives_a_negative_ttfa_from_input_done() -> None:
    fig = metrics.agent_figures(TIMES, PIECES, 2.0, [0.5], [FRAME], UNITS[:1], 24000)
    assert fig["ttfa_input_done_s"] == pytest.approx(-1.5)


def test_no_audio_gives_no_times() -> None:
    fig = metrics.agent_figures(TIMES, PIECES, 0.35, [], [], [], 24000)
    assert fig["ttfa_first_text_s"] is None and fig["ttfa_input_done_s"] is None
    assert fig["sentence_lag_s"] == [] and fig["sentence_heard_lag_s"] == []
    # A unit announced with no frame after it has no lag.
    fig = metrics.agent_figures(TIMES, PIECES, 0.35, [0.5], [FRAME], UNITS, 24000)
    assert fig["sentence_lag_s"][1] is None


def _record(ok: bool, ttfa_text: float, ttfa_done: float, lags: list[float]) -> dict:
    return {
        "warmup": False,
        "ok": ok,
        "t_submit_s": 0.0,
        "wall_s": 2.0,
        "audio_s": 1.0,
        "ttfa_s": ttfa_text,
        "max_underrun_s": 0.0,
        "continuity_ok": ok,
        "stalls": 1,
        "ttfa_first_text_s": ttfa_text,
        "ttfa_input_done_s": ttfa_done,
        "sentence_lag_s": lags,
        "sentence_heard_lag_s": lags,
    }


def test_point_figures_pool_sessions_and_sentences() -> None:
    records = [
        _record(True, 0.2, -0.1, [0.3, 0.5]),
        _record(True, 0.4, 0.1, [0.7]),
        _record(False, 9.0, 9.0, [9.0]),  # a failed session counts only against continuity
    ]
    out = metrics.agent_intervals(records)
    assert out["n_scored"] == 3 and out["n_ok"] == 2
    assert out["ttfa_first_text_s_p50"].value == pytest.approx(0.3)
    assert out["ttfa_input_done_s_p50"].value == pytest.approx(0.0)
    assert out["sentence_lag_s_p50"].value == pytest.approx(0.5)
    assert out["continuity_pct"].value == pytest.approx(200 / 3)
    assert out["stalls_per_session"] == pytest.approx(1.0)
    assert out["rtfx"].value == pytest.approx(1.0)  # 2 s of audio over a 2 s window
    empty = metrics.agent_intervals([])
    assert empty["ttfa_first_text_s_p50"].value is None
