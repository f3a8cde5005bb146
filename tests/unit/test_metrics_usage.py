"""Issue 50's per-point figures, each against a number worked by hand: streams in flight
(Little's law), time to the first N seconds of audio, the first-audio tail's spread
(thetalker.metrics.sessions) and energy / CPU-seconds per second of audio
(thetalker.metrics.usage). The same numbers are in tutorials/03-streaming-metrics.md."""

from __future__ import annotations

import pytest

from thetalker.metrics import (
    TIME_TO_AUDIO_KEY,
    energy_above_idle_j,
    per_audio_s,
    point_fields,
    sessions_in_flight,
    summarize_point,
    tail_spread,
    time_to_audio_s,
    trapezoid_j,
    wh_per_million_chars,
)

RATE = 24_000  # 48,000 bytes a second of 16-bit mono


def test_sessions_in_flight_is_durations_over_the_window() -> None:
    # Three requests of 2, 3 and 5 s within a 4 s window: 10 / 4 = 2.5 streams in flight.
    assert sessions_in_flight([2.0, 3.0, 5.0], 4.0) == 2.5
    assert sessions_in_flight([2.0, None], 4.0) == 0.5  # no duration: counts 0
    assert sessions_in_flight([2.0], 0.0) is None


def test_time_to_audio_is_the_chunk_that_completes_it() -> None:
    arrivals, sizes = [0.3, 0.9, 1.2], [48_000, 48_000, 24_000]  # 1 s, 1 s, 0.5 s of audio
    assert time_to_audio_s(arrivals, sizes, RATE, 2.0) == 0.9
    assert time_to_audio_s(arrivals, sizes, RATE, 2.5) == 1.2
    assert time_to_audio_s(arrivals, sizes, RATE, 3.0) is None  # never reached: none
    assert time_to_audio_s([0.3], [48_000, 1], RATE, 0.5) is None  # not a timeline


def test_tail_spread_by_hand() -> None:
    # 1..5 s: p25 2, p50 3, p75 4, p99 4.96 (linear) -> IQR 2, p99/p50 1.6533...
    spread = tail_spread([1.0, 2.0, 3.0, 4.0, 5.0, None])
    assert spread["iqr"] == pytest.approx(2.0)
    assert spread["p99_over_p50"] == pytest.approx(4.96 / 3.0)
    assert tail_spread([]) == {"p99_over_p50": None, "iqr": None}
    assert tail_spread([0.0, 0.0])["p99_over_p50"] is None  # no ratio to a zero median


def _record(i: int, t: float, wall: float, ok: bool = True, **kw) -> dict:
    return {
        "request_index": i,
        "ok": ok,
        "t_submit_s": t,
        "wall_s": wall,
        "audio_s": 2.5 if ok else 0.0,
        "sample_rate": RATE,
        "chunk_arrival_s": [0.3, 0.9 + i / 10, 1.2 + i / 10] if ok else [],
        "chunk_bytes": [48_000, 48_000, 24_000] if ok else [],
        "ttfa_audible_s": 0.3 + i / 10 if ok else None,
        **kw,
    }


def test_a_point_summary_carries_them_and_a_slim_record_keeps_its_time() -> None:
    # Submitted at 0, 1, 2 s, lasting 2, 2, 1 s (the last failed): window 0..3 s, 5/3 in flight.
    records = [_record(0, 0.0, 2.0), _record(1, 1.0, 2.0), _record(2, 2.0, 1.0, ok=False)]
    s = summarize_point(records, concurrency=2)
    assert s["sessions_in_flight"] == pytest.approx(5.0 / 3.0)
    assert s["usable_audio_s"] == 2.0
    assert (s["time_to_usable_audio_s"]["n"], s["time_to_usable_audio_s"]["p50"]) == (2, 0.95)
    assert s["n_short_of_usable_audio"] == 0
    assert s["ttfa_audible_iqr_s"] == pytest.approx(0.05)  # 0.3 and 0.4: p75 - p25
    longer = summarize_point(records, usable_audio_s=3.0)  # 2.5 s streams never reach 3 s
    assert longer["time_to_usable_audio_s"]["n"] == 0
    assert longer["n_short_of_usable_audio"] == 2
    slim = [point_fields(r, usable_audio_s=2.5) for r in records]
    assert slim[1][TIME_TO_AUDIO_KEY] == (2.5, pytest.approx(1.3))
    assert "chunk_arrival_s" not in slim[1]
    assert summarize_point(slim, usable_audio_s=2.5)["time_to_usable_audio_s"]["p50"] == (
        pytest.approx(1.25)
    )


def test_energy_by_the_trapezoid_rule_by_hand() -> None:
    # A scripted curve: 100 W at 0 s, 300 W at 2 s, 300 W at 3 s, 200 W at 5 s.
    # (100+300)/2*2 + 300*1 + (300+200)/2*2 = 400 + 300 + 500 = 1,200 J over 5 s.
    assert trapezoid_j([0.0, 2.0, 3.0, 5.0], [100.0, 300.0, 300.0, 200.0]) == 1200.0
    assert trapezoid_j([0.0], [100.0]) is None
    assert trapezoid_j([1.0, 0.0], [1.0, 1.0]) is None  # time going back
    # Idle 80 W over the same 5 s: 1,200 - 400 = 800 J the load cost.
    above = energy_above_idle_j(1200.0, 80.0, 5.0)
    assert above == 800.0
    # 800 J for 16 s of audio: 50 J per audio-second; for 2,000 characters:
    # 800 / 3600 Wh / 2,000 * 1e6 = 111.11 Wh per million characters.
    assert per_audio_s(above, 16.0) == 50.0
    assert wh_per_million_chars(above, 2000) == pytest.approx(111.111, abs=1e-3)
    assert per_audio_s(3.0, 0.0) is None
    assert wh_per_million_chars(None, 10) is None
    assert energy_above_idle_j(1200.0, None, 5.0) is None
