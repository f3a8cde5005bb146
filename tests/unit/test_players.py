"""thetalker.metrics.players against timelines worked by hand.

24 kHz mono s16le is 48000 B/s, so a chunk of 4800 B is 100 ms of audio. The pausing
zero-buffer player starts chunk 0 at its arrival and each next chunk at max(its arrival,
the end of the one before); a stall is the wait between.
"""

from __future__ import annotations

import math

import pytest

from thetalker.metrics import (
    PLAYER_MODELS,
    has_no_stall,
    passes_stall_gate,
    pausing_stall_points,
    pausing_stalls_s,
    player_model,
    request_metrics,
    start_buffer_for_pct,
    start_buffer_s,
    summarize_players,
)

RATE = 24000
CHUNK = 4800  # 100 ms


def _record(arrivals: list[float], ok: bool = True) -> dict:
    sizes = [CHUNK] * len(arrivals)
    figs = request_metrics(arrivals, sizes, b"\0\0" * (CHUNK // 2) * len(arrivals), RATE)
    return {
        **figs,
        "ok": ok,
        "warmup": False,
        "chunk_arrival_s": arrivals,
        "chunk_bytes": sizes,
        "sample_rate": RATE,
    }


def test_the_largest_stall_breaks_the_gate():
    # chunk 0 plays 0.0-0.1; chunk 1 arrives at 0.7: one stall of 0.6 s > 500 ms.
    rec = _record([0.0, 0.7])
    assert pausing_stalls_s(rec) == pytest.approx([0.6])
    assert not passes_stall_gate(rec)


def test_the_total_stall_breaks_the_gate():
    # Every 0.5 s a 0.1 s chunk: stalls of 0.4 s at 0.1, 0.6, 1.1: largest 400 ms passes,
    # total 1200 ms > 1000 ms fails.
    rec = _record([0.0, 0.5, 1.0, 1.5])
    assert pausing_stalls_s(rec) == pytest.approx([0.4, 0.4, 0.4])
    assert not passes_stall_gate(rec)
    # ...and vllm-omni's max deficit at 0.1 s also fails it (deficit 1.5 - 0.3 = 1.2 s)
    assert rec["max_underrun_s"] == pytest.approx(1.2)


def test_each_stall_is_placed_after_the_audio_played_before_it():
    # Every 0.5 s a 0.1 s chunk: the player runs dry after 1, 2 and 3 chunks; the stalls are
    # pausing_stalls_s's, to the last bit, and none after the audio that kept ahead.
    rec = _record([0.0, 0.5, 1.0, 1.5, 1.55])
    points = pausing_stall_points(rec)
    assert [b for b, _ in points] == [CHUNK, 2 * CHUNK, 3 * CHUNK]
    assert [s for _, s in points] == pausing_stalls_s(rec)
    assert pausing_stall_points(_record([0.0, 0.05, 0.1])) == []


def test_the_gate_limits_are_inclusive():
    # chunk 1 at 0.6: a stall of exactly 0.5 s (total 0.5 s) passes; not "no stall".
    rec = _record([0.0, 0.6])
    assert passes_stall_gate(rec)
    assert not has_no_stall(rec)


def test_no_stall_when_data_keeps_ahead():
    rec = _record([0.0, 0.05, 0.1])
    assert pausing_stalls_s(rec) == []
    assert has_no_stall(rec) and passes_stall_gate(rec)
    assert start_buffer_s(rec) == 0.0


def test_a_failed_request_passes_no_model_and_needs_an_infinite_buffer():
    rec = _record([0.0, 0.05], ok=False)
    assert not passes_stall_gate(rec) and not has_no_stall(rec)
    assert start_buffer_s(rec) == math.inf


def test_the_start_buffer_is_the_max_deficit():
    # chunk 1 at 0.5 after 0.1 s of audio: a player that waited 0.4 s before starting
    # would reach chunk 1's first sample at 0.0 + 0.4 + 0.1 = 0.5, just as it arrives.
    rec = _record([0.0, 0.5])
    assert start_buffer_s(rec) == pytest.approx(0.4)


def test_start_buffer_for_a_share_of_streams_is_nearest_rank():
    buffers = [0.1 * k for k in range(10)]  # 0.0 .. 0.9
    # 90% of 10 = 9 streams gapless needs the 9th smallest (0.8); 95% and 99% need all 10.
    assert start_buffer_for_pct(buffers, 90) == pytest.approx(0.8)
    assert start_buffer_for_pct(buffers, 95) == pytest.approx(0.9)
    assert start_buffer_for_pct(buffers, 99) == pytest.approx(0.9)
    # One unplayable stream: 90% still reachable (0.8), 95% is not (inf).
    with_failure = [*buffers[:9], math.inf]
    assert start_buffer_for_pct(with_failure, 90) == pytest.approx(0.8)
    assert start_buffer_for_pct(with_failure, 95) == math.inf
    assert start_buffer_for_pct([], 90) is None


def test_point_figures_under_each_model():
    records = [
        _record([0.0, 0.05]),  # no stall
        _record([0.0, 0.6]),  # one 0.5 s stall: passes the gate
        _record([0.0, 0.7]),  # 0.6 s: fails the gate
        _record([0.0, 0.05], ok=False),  # failed
    ]
    s = summarize_players(records)
    assert s["no_stall_pct"] == 25.0
    assert s["stall_gate_pct"] == 50.0
    assert s["largest_stall_s_max"] == pytest.approx(0.6)
    # buffers: 0, 0.5, 0.6, inf; 90% of 4 -> the 4th smallest: inf -> None (unreachable)
    assert s["start_buffer_s"]["p90"] is None
    assert s["start_buffer_s"]["n"] == 4


def test_player_models_are_named_and_map_to_summary_columns():
    assert player_model("max_deficit_0.1s").column == "continuity_pct"
    assert player_model("max_deficit_0.2s").column == "continuity_pct_0.2s"
    assert PLAYER_MODELS["stall_gate"].column == "stall_gate_pct"
    with pytest.raises(ValueError, match="player model 'fancy'"):
        player_model("fancy")
