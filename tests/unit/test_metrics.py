"""thetalker.metrics against hand-computed timelines; each test pins one property.

Arithmetic in the comments: 24 kHz mono s16le is 48000 B/s, so 4800 B = 100 ms.
"""

from __future__ import annotations

import numpy as np
import pytest

from thetalker.metrics import (
    DEFAULT_ONSET,
    OLD_ONSET_RULE,
    ContinuityStats,
    Interval,
    MixedOnsetRulesError,
    OnsetError,
    OnsetSettings,
    StallStats,
    audible_onset_s,
    compute_continuity_stats,
    compute_stalls,
    continuity_change_bootstrap,
    continuous_at,
    newcombe_difference,
    paired_interval,
    perceived_first_audio_s,
    percentile_interval,
    percentiles,
    playback_time_s,
    point_cost,
    point_intervals,
    point_onset,
    rate_change_pct,
    record_metrics,
    record_onset,
    repeats_interval,
    request_metrics,
    rtfx_bootstrap,
    rtfx_interval,
    rtfx_ratio_interval,
    summarize_point,
    usd_per_million_chars,
    wilson_pct,
)
from thetalker.metrics import onset as onset_mod

RATE = 24000  # 48000 B/s


# --- continuity: upstream's worked examples and edge cases -------------------------------


def test_late_second_chunk_is_one_event_of_the_deficit():
    # at 0.5 s the player needs 24000 B, has 4800: deficit 19200 B = 0.4 s
    assert compute_continuity_stats([0.0, 0.5], [4800, 4800], RATE) == ContinuityStats(
        0.4, 1, False
    )


def test_threshold_boundary_is_inclusive():
    # at 0.2 s: 9600 - 4800 = 4800 B = exactly 0.1 s, still continuous
    stats = compute_continuity_stats([0.0, 0.2], [4800, 4800], RATE)
    assert stats.underrun_event_count == 1
    assert stats.max_underrun_s == pytest.approx(0.1)
    assert stats.is_continuous


def test_threshold_is_an_argument():
    stats = compute_continuity_stats([0.0, 0.2], [4800, 4800], RATE, threshold_s=0.05)
    assert not stats.is_continuous


def test_upstream_keyword_names():
    # vllm-omni's own call: chunk_arrival_times_s, sample_width (bytes per sample)
    stats = compute_continuity_stats(
        chunk_arrival_times_s=[0.0, 0.5],
        chunk_bytes=[4800, 4800],
        sample_rate=RATE,
        sample_width=2,
        channels=1,
        threshold_s=0.5,
    )
    assert stats == ContinuityStats(pytest.approx(0.4), 1, True)


def test_maximum_not_sum_of_deficits():
    # deficits: at 0.3: 14400-4800=9600 (0.2 s); at 0.6: 28800-9600=19200 (0.4 s)
    # at 0.7: 33600-57600 < 0 -> no event
    stats = compute_continuity_stats([0.0, 0.3, 0.6, 0.7], [4800, 4800, 48000, 4800], RATE)
    assert stats.underrun_event_count == 2
    assert stats.max_underrun_s == pytest.approx(0.4)


def test_deficit_of_exactly_zero_is_no_event():
    # at 0.1 s the player needs exactly the 4800 B it has
    assert compute_continuity_stats([0.0, 0.1], [4800, 4800], RATE) == ContinuityStats()


def test_nothing_checked_after_the_last_chunk():
    # one chunk of 100 ms, however late the stream "ends", is continuous
    assert compute_continuity_stats([5.0], [4800], RATE) == ContinuityStats()


@pytest.mark.parametrize(
    ("arrivals", "nbytes", "rate"),
    [([], [], RATE), ([0.0, 1.0], [4800], RATE), ([0.0, 1.0], [4800, 4800], 0)],
)
def test_degenerate_input_is_neutral(arrivals, nbytes, rate):
    assert compute_continuity_stats(arrivals, nbytes, rate) == ContinuityStats()


def test_start_time_is_first_arrival_not_zero():
    # same shape shifted by a 2 s time to first byte: same answer
    assert compute_continuity_stats([2.0, 2.5], [4800, 4800], RATE) == ContinuityStats(
        pytest.approx(0.4), 1, False
    )


# --- stalls: a pausing player ----------------------------------------------------------


def test_stalls_count_episodes_and_total_pause():
    # chunk0 plays 0.0-0.1; chunk1 arrives 0.5: stall 0.4, plays 0.5-0.6;
    # chunk2 arrives 0.55 (buffered), plays 0.6-0.7; chunk3 arrives 1.0: stall 0.3
    stats = compute_stalls([0.0, 0.5, 0.55, 1.0], [4800] * 4, RATE)
    assert stats.stalls == 2
    assert stats.stall_s == pytest.approx(0.7)


def test_upstream_events_can_exceed_stall_episodes():
    # upstream (never pauses): at 0.5 deficit 24000-4800 > 0; at 0.505 24240-5280 > 0: 2 events.
    # a pausing player: stalls 0.1-0.5, plays chunk1 0.5-0.51, chunk2 (0.505) is already in.
    arrivals, nbytes = [0.0, 0.5, 0.505], [4800, 480, 4800]
    assert compute_continuity_stats(arrivals, nbytes, RATE).underrun_event_count == 2
    assert compute_stalls(arrivals, nbytes, RATE) == StallStats(1, pytest.approx(0.4))


def test_no_stall_when_data_keeps_ahead():
    assert compute_stalls([0.0, 0.05, 0.1], [4800] * 3, RATE) == StallStats()


# --- audible onset ----------------------------------------------------------------------


def _tone(seconds: float, rate: int = RATE, amplitude: int = 8000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (amplitude * np.sin(2 * np.pi * 440 * t)).astype(np.int16)


def _square(seconds: float, amplitude: int, rate: int = RATE) -> np.ndarray:
    """+a, -a, +a, ...: any even-length frame has mean 0 and RMS exactly a."""
    signs = np.where(np.arange(int(seconds * rate)) % 2 == 0, 1, -1)
    return (amplitude * signs).astype(np.int16)


# -44 dBFS RMS: 32768 * 10^(-44/20) = 206.75, so a = 207 (-43.99 dBFS); -46 dBFS: 164.2 -> 164
# (-46.01 dBFS). The threshold is -45 dBFS (0.005623 of full scale = 184.3).
A_44_DBFS, A_46_DBFS = 207, 164


def test_a_minus_44_dbfs_onset_is_found_at_its_first_whole_frame():
    # 0.5 s of zeros, then the square. The frame at 0.49 s holds 10 ms of it: RMS
    # 207 * sqrt(1/2) = 146 (-47 dBFS), not active; the frames at 0.50 and 0.51 s are
    # (-44 dBFS): two in a row, so the onset is 0.50 s.
    pcm = np.concatenate([np.zeros(int(0.5 * RATE), np.int16), _square(0.5, A_44_DBFS)])
    assert audible_onset_s(pcm, RATE) == pytest.approx(0.5)
    assert audible_onset_s(pcm.tobytes(), RATE) == pytest.approx(0.5)


def test_a_minus_46_dbfs_stream_is_inaudible():
    pcm = np.concatenate([np.zeros(int(0.5 * RATE), np.int16), _square(0.5, A_46_DBFS)])
    assert audible_onset_s(pcm, RATE) is None


def test_a_dc_offset_is_not_sound():
    # The whole stream sits at +3000 (-20.8 dBFS if read as sound); the -44 dBFS square
    # starts at 0.5 s. Each frame's own mean is removed, so the offset frames have RMS 0
    # and the onset is the square's, 0.50 s (without DC removal it would be 0.0 s).
    pcm = np.concatenate([np.zeros(int(0.5 * RATE), np.int16), _square(0.5, A_44_DBFS)])
    offset = (pcm.astype(np.int32) + 3000).astype(np.int16)
    assert audible_onset_s(offset, RATE) == pytest.approx(0.5)


def test_a_loud_onset_starts_at_the_first_frame_it_reaches():
    # A -15 dBFS tone from 0.3 s: the frame at 0.29 s holds 10 ms of it (about -18 dBFS),
    # active, as is the one at 0.30 s: the onset is the start of the first, 0.29 s.
    pcm = np.concatenate([np.zeros(int(0.3 * RATE), np.int16), _tone(0.5)])
    assert audible_onset_s(pcm, RATE) == pytest.approx(0.29)


def test_a_quiet_burst_shorter_than_a_frame_is_not_an_onset():
    # A 10 ms burst of the -44 dBFS square at 0.20 s touches the frames at 0.19 and 0.20 s,
    # each holding 10 ms of it (-47 dBFS): neither is active, so no onset.
    pcm = np.zeros(int(0.5 * RATE), np.int16)
    pcm[int(0.2 * RATE) : int(0.21 * RATE)] = _square(0.01, A_44_DBFS)
    assert audible_onset_s(pcm, RATE) is None


def test_one_active_frame_is_not_an_onset():
    # A 20 ms burst of the -44 dBFS square exactly on the frame at 0.20 s: that frame is
    # active; its neighbours at 0.19 and 0.21 s hold 10 ms of it (-47 dBFS), not active.
    # One active frame, not 2 in a row: no onset.
    pcm = np.zeros(int(0.5 * RATE), np.int16)
    pcm[int(0.2 * RATE) : int(0.22 * RATE)] = _square(0.02, A_44_DBFS)
    assert audible_onset_s(pcm, RATE) is None


def test_a_run_that_spans_two_blocks_of_the_search_is_one_onset():
    # The search judges frames 0-31 first, then 32-95, ... (onset.FIRST_BLOCK_FRAMES = 32).
    # The -44 dBFS square from 0.31 s: frame 31 (0.31 s) is the last of the first block and
    # frame 32 the first of the next; two in a row across the boundary, onset 0.31 s.
    assert onset_mod.FIRST_BLOCK_FRAMES == 32
    pcm = np.concatenate([np.zeros(int(0.31 * RATE), np.int16), _square(0.5, A_44_DBFS)])
    assert audible_onset_s(pcm, RATE) == pytest.approx(0.31)
    # And one far into the stream: frame 1250, in the sixth block (frames 992-2015).
    late = np.concatenate([np.zeros(int(12.5 * RATE), np.int16), _square(0.5, A_44_DBFS)])
    assert audible_onset_s(late, RATE) == pytest.approx(12.5)


@pytest.mark.parametrize("pcm", [np.zeros(4800, np.int16), np.zeros(0, np.int16), b"\x01"])
def test_no_onset_is_none_never_zero(pcm):
    assert audible_onset_s(pcm, RATE) is None


def test_a_silent_stream_is_inaudible_not_audible_at_once():
    silence = np.zeros(int(0.5 * RATE), np.int16)
    figs = request_metrics([0.1], [silence.nbytes], silence, RATE)
    assert figs["ttfa_s"] == pytest.approx(0.1)
    assert figs["audible"] is False
    assert figs["leading_silence_s"] is None
    assert figs["ttfa_audible_s"] is None and figs["ttfa_audible_naive_s"] is None
    assert figs["audible_onset_rule"] == "abs-45dBFS/20ms/10ms/2"


def test_an_inaudible_stream_counts_against_audible_pct():
    silent = _rec(0, 0.0, 1.0, ttfa=0.1)
    silent.update(audible=False, ttfa_audible_s=None)
    loud = [_rec(1, 0.0, 1.0, ttfa=0.2), _rec(2, 0.0, 1.0, ttfa=0.4)]
    s = summarize_point([silent, *loud])
    assert s["n_inaudible"] == 1
    assert s["audible_pct"] == pytest.approx(200 / 3)
    assert s["ttfa_audible_s"]["n"] == 2  # the silent one has no audible time, not 0
    assert s["ttfa_audible_s"]["p50"] == pytest.approx(0.3)


def test_old_records_keep_their_audibility_and_name_their_rule():
    old = _rec(0, 0.0, 1.0, ttfa=0.2)
    old.pop("audible", None)
    old.pop("audible_onset_rule", None)
    s = summarize_point([old])
    assert s["audible_pct"] == 100.0
    assert s["audible_onset_rule"] == OLD_ONSET_RULE


# --- onset settings a run states ----------------------------------------------------------

# -40 dBFS: 32768 * 10^(-40/20) = 327.7 -> 328 (-39.99 dBFS): active at -45, not at -30;
# -29 dBFS: 1162.6 -> 1163 (-28.99 dBFS): active at both.
A_40_DBFS, A_29_DBFS = 328, 1163
AT_30_DBFS = OnsetSettings(threshold_dbfs=-30.0)


def quiet_then_loud() -> np.ndarray:
    """0.3 s of zeros, 0.3 s at -40 dBFS, 0.4 s at -29 dBFS (hand-made, 24 kHz)."""
    return np.concatenate(
        [
            np.zeros(int(0.3 * RATE), np.int16),
            _square(0.3, A_40_DBFS),
            _square(0.4, A_29_DBFS),
        ]
    )


def test_a_minus_30_dbfs_threshold_finds_the_onset_later():
    pcm = quiet_then_loud()
    # -45: the frame at 0.29 s holds 10 ms of the -40 dBFS square (328 * sqrt(1/2) = 232,
    # -43 dBFS): active, as is 0.30 s, so the onset is 0.29 s.
    assert audible_onset_s(pcm, RATE) == pytest.approx(0.29)
    # -30: the quiet part is not active; the frame at 0.59 s mixes both squares
    # (sqrt((328^2 + 1163^2) / 2) = 854, -31.7 dBFS): not active; 0.60 and 0.61 s are.
    assert audible_onset_s(pcm, RATE, AT_30_DBFS) == pytest.approx(0.60)
    figs = request_metrics([0.1], [pcm.nbytes], pcm, RATE, onset=AT_30_DBFS)
    assert figs["audible_onset_rule"] == "abs-30dBFS/20ms/10ms/2"
    assert figs["leading_silence_s"] == pytest.approx(0.60)
    assert figs["ttfa_audible_s"] == pytest.approx(0.70)


def test_a_stream_audible_at_minus_45_is_inaudible_at_minus_30():
    pcm = np.concatenate([np.zeros(int(0.3 * RATE), np.int16), _square(0.5, A_40_DBFS)])
    assert audible_onset_s(pcm, RATE) == pytest.approx(0.29)
    figs = request_metrics([0.1], [pcm.nbytes], pcm, RATE, onset=AT_30_DBFS)
    assert figs["audible"] is False and figs["ttfa_audible_s"] is None


def test_run_frames_frame_and_hop_are_the_detectors():
    pcm = quiet_then_loud()
    # 3 in a row: 0.29, 0.30, 0.31 s are active at -45; the onset is still 0.29 s.
    assert audible_onset_s(pcm, RATE, OnsetSettings(run_frames=3)) == pytest.approx(0.29)
    # 40 ms frames every 20 ms at -30: the frame at 0.58 s holds 20 ms of each square
    # (-31.7 dBFS), the one at 0.60 s only the loud one: the onset is 0.60 s.
    wide = OnsetSettings(threshold_dbfs=-30.0, frame_s=0.04, hop_s=0.02)
    assert audible_onset_s(pcm, RATE, wide) == pytest.approx(0.60)
    assert wide.label() == "abs-30dBFS/40ms/20ms/2"


@pytest.mark.parametrize(
    "settings",
    [
        DEFAULT_ONSET,
        AT_30_DBFS,
        OnsetSettings(-50.5, 0.025, 0.0125, 3),
        OnsetSettings(-60.0, 0.01, 0.005, 1),
    ],
)
def test_a_label_gives_its_settings_back(settings):
    assert OnsetSettings.from_label(settings.label()) == settings
    assert settings.problem() is None


def test_the_default_is_the_public_reports_rule():
    assert DEFAULT_ONSET.label() == "abs-45dBFS/20ms/10ms/2"
    assert OnsetSettings.from_spec(None) == OnsetSettings.from_spec({}) == DEFAULT_ONSET
    assert OnsetSettings.from_spec({"threshold_dbfs": -30}) == AT_30_DBFS
    assert OnsetSettings.from_spec({"threshold_dbfs": -30}).to_dict()["threshold_dbfs"] == -30.0
    with pytest.raises(ValueError, match="no label of the absolute onset rule"):
        OnsetSettings.from_label(OLD_ONSET_RULE)


@pytest.mark.parametrize(
    ("spec", "field", "why"),
    [
        ({"threshold_dbfs": 0}, "threshold_dbfs", "below 0 dBFS"),
        ({"threshold_dbfs": 3.0}, "threshold_dbfs", "below 0 dBFS"),
        ({"threshold_dbfs": float("nan")}, "threshold_dbfs", "finite number"),
        ({"threshold_dbfs": float("-inf")}, "threshold_dbfs", "finite number"),
        ({"threshold_dbfs": "-45"}, "threshold_dbfs", "finite number"),
        ({"frame_s": 0}, "frame_s", "above 0 s"),
        ({"hop_s": -0.01}, "hop_s", "above 0 s"),
        ({"hop_s": 0.03}, "hop_s", "longer than frame_s"),
        ({"run_frames": 0}, "run_frames", "at least 1"),
        ({"run_frames": 2.0}, "run_frames", "integer"),
        ({"run_frames": True}, "run_frames", "integer"),
        ({"frame_s": 0.0123456789}, "frame_s", "6 significant digits"),
        ({"threshold": -30}, "threshold", "unknown onset setting"),
    ],
)
def test_bad_onset_settings_are_refused_naming_the_field(spec, field, why):
    with pytest.raises(OnsetError) as refused:
        OnsetSettings.from_spec(spec)
    assert refused.value.field == field and why in refused.value.why
    assert str(refused.value).startswith(f"{field}: ")


def test_a_record_is_recomputed_by_the_rule_it_names():
    pcm = quiet_then_loud()
    rec = {
        "request_index": 3,
        "chunk_arrival_s": [0.1],
        "chunk_bytes": [pcm.nbytes],
        "sample_rate": RATE,
        **request_metrics([0.1], [pcm.nbytes], pcm, RATE, onset=AT_30_DBFS),
    }
    assert record_onset(rec) == AT_30_DBFS
    again = record_metrics(rec, pcm)
    assert again["leading_silence_s"] == pytest.approx(0.60) == rec["leading_silence_s"]
    assert again["audible_onset_rule"] == "abs-30dBFS/20ms/10ms/2"
    # Another rule only when asked for; a record without a rule: today's default.
    assert record_metrics(rec, pcm, onset=DEFAULT_ONSET)["leading_silence_s"] == pytest.approx(0.29)
    old = {k: v for k, v in rec.items() if k != "audible_onset_rule"}
    assert record_metrics(old, pcm)["leading_silence_s"] == pytest.approx(0.29)
    with pytest.raises(ValueError, match="record 3: audible_onset_rule 'peak/9' is no rule"):
        record_metrics({**rec, "audible_onset_rule": "peak/9"}, pcm)


def test_a_point_of_mixed_onset_rules_says_so():
    at_45 = {**_rec(0, 0.0, 1.0), "audible": True, "audible_onset_rule": DEFAULT_ONSET.label()}
    at_30 = [
        {**_rec(i, 0.0, 1.0), "audible": True, "audible_onset_rule": AT_30_DBFS.label()}
        for i in (1, 2)
    ]
    assert point_onset(at_30) == AT_30_DBFS
    assert summarize_point(at_30)["audible_onset_rule"] == "abs-30dBFS/20ms/10ms/2"
    with pytest.raises(MixedOnsetRulesError) as mixed:
        point_onset([at_45, *at_30])
    assert str(mixed.value) == (
        "records measured with 2 audible onset rules: abs-30dBFS/20ms/10ms/2 (2 records), "
        "abs-45dBFS/20ms/10ms/2 (1 record)"
    )
    assert summarize_point([at_45, *at_30])["audible_onset_rule"] == (
        "mixed: abs-30dBFS/20ms/10ms/2; abs-45dBFS/20ms/10ms/2"
    )


def test_audible_onset_plays_later_when_player_stalled_first():
    # chunk0: 0.1 s of silence at t=0.2; chunk1 (a -44 dBFS square, onset exactly at its
    # start, 0.1 s of audio) arrives at 0.6. naive: 0.2 + 0.1 = 0.3; the player ran dry
    # at 0.3 and plays the onset at 0.6.
    silence = np.zeros(int(0.1 * RATE), np.int16)
    tone = _square(0.5, A_44_DBFS)
    pcm = np.concatenate([silence, tone])
    figs = request_metrics([0.2, 0.6], [silence.nbytes, tone.nbytes], pcm, RATE)
    assert figs["ttfa_s"] == pytest.approx(0.2)
    assert figs["leading_silence_s"] == pytest.approx(0.1)
    assert figs["ttfa_audible_naive_s"] == pytest.approx(0.3)
    assert figs["ttfa_audible_s"] == pytest.approx(0.6)
    assert figs["stalls"] == 1 and figs["stall_s"] == pytest.approx(0.3)


def test_audible_equals_naive_sum_when_nothing_stalls():
    pcm = np.concatenate([np.zeros(int(0.25 * RATE), np.int16), _square(0.5, A_44_DBFS)])
    figs = request_metrics([0.08], [pcm.nbytes], pcm, RATE)
    assert figs["ttfa_audible_s"] == pytest.approx(figs["ttfa_audible_naive_s"])
    assert figs["ttfa_audible_s"] == pytest.approx(0.33)


def test_playback_time_beyond_audio_is_none():
    assert playback_time_s([0.0], [4800], 0.2, RATE) is None
    assert playback_time_s([], [], 0.0, RATE) is None


def test_request_metrics_of_an_empty_stream():
    figs = request_metrics([], [], b"", RATE)
    assert figs["ttfa_s"] is None and figs["ttfa_audible_s"] is None
    assert figs["audio_s"] == 0.0 and figs["continuity_ok"] is False


def test_audio_seconds_from_bytes_and_rate():
    figs = request_metrics([0.1, 0.2], [22050, 22050], np.zeros(22050, np.int16), 22050)
    # 44100 B at 22050 Hz mono s16le (44100 B/s) is one second
    assert figs["audio_s"] == pytest.approx(1.0)


# --- per load point ---------------------------------------------------------------------


def _rec(i, t_submit, wall, ok=True, audio=1.0, chars=10, continuous=True, warmup=False, **kw):
    return {
        "request_index": i,
        "warmup": warmup,
        "ok": ok,
        "t_submit_s": t_submit,
        "wall_s": wall,
        "audio_s": audio if ok else 0.0,
        "text_chars": chars,
        "continuity_ok": continuous and ok,
        "ttfa_s": kw.get("ttfa", 0.1) if ok else None,
        "ttfa_audible_s": kw.get("ttfa", 0.1) if ok else None,
        "stalls": 0,
    }


def test_point_summary_by_hand():
    records = [
        _rec(0, 0.0, 5.0, warmup=True, audio=100.0),  # ignored
        _rec(1, 10.0, 2.0, audio=4.0, chars=40, ttfa=0.1),
        _rec(2, 10.5, 2.5, audio=6.0, chars=60, ttfa=0.3, continuous=False),
        _rec(3, 11.0, 1.0, ok=False, chars=30),
        _rec(4, 12.0, 2.0, audio=10.0, chars=100, ttfa=0.2),
    ]
    s = summarize_point(records, concurrency=2)
    # window: first scored send 10.0, last finish 12.0 + 2.0 = 14.0
    assert s["window_s"] == pytest.approx(4.0)
    assert s["n_scored"] == 4 and s["n_ok"] == 3 and s["error_rate"] == pytest.approx(0.25)
    assert s["rtfx"] == pytest.approx((4 + 6 + 10) / 4.0)
    # continuous: requests 1 and 4 of 4 scored (the failure counts against), of 3 ok
    assert s["continuity_pct"] == pytest.approx(50.0)
    assert s["continuity_pct_ok_only"] == pytest.approx(200 / 3)
    assert s["chars_per_s"] == pytest.approx((40 + 100) / 4.0)
    assert s["ttfa_s"]["p50"] == pytest.approx(0.2) and s["ttfa_s"]["n"] == 3
    assert s["concurrency"] == 2


def test_point_summary_with_nothing_scored_is_neutral():
    s = summarize_point([_rec(0, 0.0, 1.0, warmup=True)])
    assert s["n_scored"] == 0 and s["rtfx"] is None and s["continuity_pct"] is None
    assert s["ttfa_s"] == {"p50": None, "p90": None, "p95": None, "p99": None, "n": 0}


def test_percentiles_interpolate_linearly_and_skip_none():
    p = percentiles([1.0, 2.0, 3.0, 4.0, None])
    assert p["p50"] == pytest.approx(2.5)
    assert p["p90"] == pytest.approx(3.7)
    assert p["n"] == 4


# --- cost -------------------------------------------------------------------------------


def test_usd_per_million_chars_by_hand():
    # 2.99 USD/h at 1000 chars/s: 3.6e6 chars an hour -> 2.99 / 3.6 = 0.8306 per million
    assert usd_per_million_chars(2.99, 1000.0) == pytest.approx(0.830555, rel=1e-5)
    assert usd_per_million_chars(2.99, 0.0) is None
    assert usd_per_million_chars(2.99, None) is None


def test_cost_only_where_continuity_reaches_95():
    assert point_cost({"continuity_pct": 95.0, "chars_per_s": 1000.0}, 2.99) == pytest.approx(
        0.830555, rel=1e-5
    )
    assert point_cost({"continuity_pct": 94.9, "chars_per_s": 1000.0}, 2.99) is None
    assert point_cost({"continuity_pct": None, "chars_per_s": 1000.0}, 2.99) is None


# --- the player's view ------------------------------------------------------------------


def _played(ttfa: float | None, underrun: float, ok: bool = True) -> dict:
    return {"ok": ok, "ttfa_s": ttfa, "max_underrun_s": underrun, "warmup": False}


def test_continuous_at_is_inclusive_and_false_for_a_failure():
    assert continuous_at(_played(0.1, 0.1), 0.1)
    assert not continuous_at(_played(0.1, 0.1001), 0.1)
    assert continuous_at(_played(0.1, 0.15), 0.2)
    assert not continuous_at(_played(None, 0.0), 0.2)  # no audio
    assert not continuous_at(_played(0.1, 0.0, ok=False), 0.2)


def test_perceived_first_audio_adds_the_gapless_prebuffer():
    # first byte at 0.2 s, worst deficit 0.4 s: a gapless player starts at 0.6 s
    assert perceived_first_audio_s(_played(0.2, 0.4)) == pytest.approx(0.6)
    assert perceived_first_audio_s(_played(0.2, 0.0)) == pytest.approx(0.2)
    assert perceived_first_audio_s(_played(0.2, 0.0, ok=False)) is None


# --- intervals --------------------------------------------------------------------------


def test_wilson_of_ten_out_of_ten_is_not_certain():
    # Wilson, z = 1.95996: low = n / (n + z^2) = 10 / 13.8414 = 0.72247
    ci = wilson_pct(10, 10)
    assert ci.value == 100.0 and ci.high == pytest.approx(100.0)
    assert ci.low == pytest.approx(72.2467, abs=1e-3)
    assert ci.method == "wilson" and ci.n == 10


def test_no_spread_is_no_certainty_in_a_change_of_continuity():
    # Every stream continuous in both runs: each resample's change is 0, and the bootstrap
    # printed "+0.0 [+0.0, +0.0]". 6 and 8 streams rule out no small drop: Newcombe's
    # interval from the two Wilson intervals.
    a = [_rec(i, 0.0, 1.0) for i in range(6)]
    b = [_rec(i, 0.0, 1.0) for i in range(8)]
    ci = continuity_change_bootstrap(a, b)
    assert ci.value == 0.0 and ci.method == "newcombe"
    low_a, low_b = wilson_pct(6, 6).low, wilson_pct(8, 8).low
    assert (ci.low, ci.high) == pytest.approx((-(100 - low_a), 100 - low_b))
    # With spread it stays the bootstrap.
    c = [_rec(i, 0.0, 1.0, continuous=i % 2 == 0) for i in range(8)]
    assert continuity_change_bootstrap(a, c).method == "bootstrap"


def test_a_newcombe_interval_is_labelled_with_the_confidence_it_was_computed_at():
    # One stream a side: too few to resample, so the bootstrap gives no bounds (labelled at
    # the default level) and Newcombe's interval at the level asked takes their place. The
    # interval said its bounds were at 95% while they were at 90%.
    a, b = [_rec(0, 0.0, 1.0)], [_rec(0, 0.0, 1.0)]
    ci = continuity_change_bootstrap(a, b, confidence=0.90)
    assert ci.method == "newcombe" and ci.confidence == 0.90
    low_a = wilson_pct(1, 1, 0.90).low
    assert ci.low == pytest.approx(-(100 - low_a))
    paired = rate_change_pct([0], [10], [0], [10], confidence=0.90)
    assert paired.method == "newcombe" and paired.confidence == 0.90


def test_newcombe_by_hand():
    # 9/10 minus 5/10: d = 40 points, bounds from the two Wilson intervals' distances.
    a, b = wilson_pct(9, 10), wilson_pct(5, 10)
    d = newcombe_difference(a, b)
    assert d.value == pytest.approx(40.0)
    assert d.low == pytest.approx(40.0 - np.hypot(90.0 - a.low, b.high - 50.0))
    assert d.high == pytest.approx(40.0 + np.hypot(a.high - 90.0, 50.0 - b.low))


def test_wilson_by_hand_at_half():
    # 5 of 10: centre 0.5, half-width z*sqrt(0.25/10 + z^2/400)/(1 + z^2/10)
    z = 1.959963984540054
    half = z * np.sqrt(0.25 / 10 + z**2 / 400) / (1 + z**2 / 10)
    ci = wilson_pct(5, 10)
    assert ci.low == pytest.approx(100 * (0.5 - half)) and ci.high == pytest.approx(
        100 * (0.5 + half)
    )
    assert ci.half_width == pytest.approx(100 * half)


def test_degenerate_intervals_are_neutral():
    assert wilson_pct(0, 0) == Interval(None, None, None, "none", 0)
    assert percentile_interval([], 50) == Interval(None, None, None, "none", 0)
    one = percentile_interval([0.3, None], 50)
    assert one.value == 0.3 and one.low is None and one.n == 1
    assert rtfx_bootstrap([]).value is None
    assert repeats_interval([None, None]).value is None
    assert not Interval(1.0, None, None, "none", 1).excludes(0.0)


def test_bootstrap_is_seeded_and_brackets_the_percentile():
    values = [0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 0.9, 1.2]
    a, b = percentile_interval(values, 90), percentile_interval(values, 90)
    assert a == b
    assert a.value == pytest.approx(np.percentile(values, 90))
    assert a.low <= a.value <= a.high and a.method == "bootstrap" and a.n == 8


def test_rtfx_bootstrap_keeps_the_window():
    # 4 requests of 2 s audio each, all sent at 0 and done at 1 s: window 1 s, RTFx 8.
    # Every resample draws four 2 s requests: the interval is the point [8, 8].
    recs = [{"ok": True, "t_submit_s": 0.0, "wall_s": 1.0, "audio_s": 2.0} for _ in range(4)]
    assert rtfx_bootstrap(recs) == Interval(8.0, 8.0, 8.0, "bootstrap", 4)
    # one failure: RTFx 6 (it counts 0 audio), the resamples spread from 2 to 8
    recs[0] = {**recs[0], "ok": False}
    ci = rtfx_bootstrap(recs)
    assert ci.value == pytest.approx(6.0) and 2.0 <= ci.low < 6.0 < ci.high <= 8.0


def test_repeats_interval_is_student_t_by_hand():
    # mean 10, sd 1 over 4 rounds: se 0.5, t(0.975, 3) = 3.182446
    ci = repeats_interval([9.0, 11.0, 9.0, 11.0])
    sd = np.std([9.0, 11.0, 9.0, 11.0], ddof=1)
    assert ci.value == 10.0 and ci.n == 4 and ci.method == "repeats-t"
    assert ci.half_width == pytest.approx(3.182446 * sd / 2.0, rel=1e-5)


def test_rtfx_interval_uses_repeats_when_there_are_rounds():
    def run(audio):
        return [{"ok": True, "t_submit_s": 0.0, "wall_s": 1.0, "audio_s": audio}]

    assert rtfx_interval([run(2.0)]).method == "bootstrap"
    ci = rtfx_interval([run(2.0), run(4.0)])
    assert ci.method == "repeats-t" and ci.value == pytest.approx(3.0) and ci.n == 2


def test_paired_ratio_by_round():
    # A is 2x B in every round, whatever the round's drift: the ratio is exactly 2
    ci = paired_interval([20.0, 30.0, 25.0], [10.0, 15.0, 12.5], ratio=True)
    assert ci == Interval(pytest.approx(2.0), pytest.approx(2.0), pytest.approx(2.0), "paired-t", 3)
    # differences 1, 2, 3: mean 2, sd 1, se 1/sqrt(3), t(0.975, 2) = 4.302653
    d = paired_interval([11.0, 12.0, 13.0], [10.0, 10.0, 10.0])
    assert d.value == pytest.approx(2.0)
    assert d.half_width == pytest.approx(4.302653 / np.sqrt(3), rel=1e-5)
    assert not d.excludes(0.0)  # too wide for 3 rounds


def test_ratio_interval_marks_indistinguishable_systems():
    def run(audio, n=20):
        return [
            {"ok": True, "t_submit_s": 0.1 * i, "wall_s": 1.0, "audio_s": audio + 0.3 * (i % 5)}
            for i in range(n)
        ]

    same = rtfx_ratio_interval([run(2.0)], [run(2.0)])
    assert same.value == pytest.approx(1.0) and not same.excludes(1.0)
    apart = rtfx_ratio_interval([run(4.0)], [run(2.0)])
    assert apart.value > 1.5 and apart.excludes(1.0)
    paired = rtfx_ratio_interval([run(4.0), run(4.2)], [run(2.0), run(2.1)])
    assert paired.method == "paired-t" and paired.n == 2


def test_point_intervals_from_records():
    recs = [
        {
            "ok": True,
            "warmup": False,
            "t_submit_s": 0.1 * i,
            "wall_s": 1.0,
            "audio_s": 2.0,
            "ttfa_s": 0.1 + 0.01 * i,
            "max_underrun_s": 0.03 * i,  # 0, .03, ... .27
            "continuity_ok": 0.03 * i <= 0.1,
        }
        for i in range(10)
    ]
    got = point_intervals([recs])
    assert got["rounds"] == 1 and got["rtfx"].method == "bootstrap"
    # at 0.05 s: i = 0, 1 -> 2 of 10; at 0.1: i <= 3 -> 4; at 0.2: i <= 6 -> 7
    assert [got["continuity_pct_at"][t].value for t in (0.05, 0.1, 0.2)] == [20.0, 40.0, 70.0]
    assert got["continuity_pct"].value == 40.0
    perceived = [0.1 + 0.01 * i + 0.03 * i for i in range(10)]
    assert got["perceived_first_audio_s"]["p90"] == pytest.approx(np.percentile(perceived, 90))
    assert got["perceived_first_audio_s_p50"].value == pytest.approx(np.median(perceived))


def test_point_summary_json_form_is_the_field_list_in_order():
    """summary.json's bytes: the fields in declaration order, percentile blocks as dicts;
    the mapping view reads the same values."""
    import dataclasses
    import json

    from thetalker.metrics import PointSummary

    s = summarize_point([_rec(1, 10.0, 2.0, audio=4.0, chars=40, ttfa=0.1)], concurrency=1)
    assert isinstance(s, PointSummary)
    names = [f.name for f in dataclasses.fields(PointSummary)]
    assert list(s.to_dict()) == names == list(s)
    assert json.dumps(s.to_dict()) == json.dumps(dict(s))
    assert s["rtfx"] == s.rtfx and s.get("missing") is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.rtfx = 0.0  # type: ignore[misc]


def test_point_summary_fields_are_the_declared_summary_fields():
    """summary.json's schema (data/records.py) declares every PointSummary field, and its
    required core is PointSummary's: a new figure is declared where readers look."""
    import dataclasses

    from thetalker.data.records import OPTIONAL_SUMMARY_FIELDS, SUMMARY_FIELDS
    from thetalker.metrics import PointSummary

    names = {f.name for f in dataclasses.fields(PointSummary)}
    assert names - set(SUMMARY_FIELDS) - set(OPTIONAL_SUMMARY_FIELDS) == set()
    assert set(SUMMARY_FIELDS) - names == set()
