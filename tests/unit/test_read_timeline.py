"""Read-level timelines (issue 22 item 1) against numbers worked by hand, and records
written before reads were kept (schema /1) loading with the figures they were written with.

Arithmetic: 24 kHz mono s16le is 48000 B/s, so 4800 B = 100 ms; a frame is 2 bytes.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from thetalker import metrics
from thetalker.client.decode import drop_front
from thetalker.data.record_reads import read_records
from thetalker.data.records import OPTIONAL_RECORD_FIELDS, SCHEMA_VERSION, Record

RATE = 24000


def _tone(seconds: float, amplitude: int = 8000) -> np.ndarray:
    t = np.arange(int(round(seconds * RATE))) / RATE
    return (amplitude * np.sin(2 * np.pi * 440 * t)).astype(np.int16)


def test_whole_frames_play_as_reads_bring_them_odd_bytes_carried():
    # 4801 B: 2400 frames play, 1 byte waits; + 1 B makes one more frame (2 B); 4798 B even.
    assert metrics.playable_timeline([0.0, 0.1, 0.3], [4801, 1, 4798]) == (
        [0.0, 0.1, 0.3],
        [4800, 2, 4798],
    )
    # a 1-byte read completes no frame: its byte plays with the next read's
    assert metrics.playable_timeline([0.0, 0.05], [1, 9599]) == ([0.05], [9600])
    # a half frame left at the very end is not audio
    assert metrics.playable_timeline([0.0], [3]) == ([0.0], [2])
    assert metrics.playable_timeline([0.0, 0.1], [1]) == ([], [])  # lengths differ


def test_odd_read_then_a_late_read_stalls_once_by_hand():
    # Reads of 4801 B at 0.0 and 4799 B at 0.3 (one 9600 B chunk): the player plays 4800 B
    # (0.1 s), the odd byte waits; at 0.3 the carried byte and 4799 B make 4800 B: it ran
    # dry from 0.1 to 0.3, one stall of 0.2 s; upstream's deficit at 0.3 is also 0.2 s.
    pcm = _tone(0.2)
    figs = metrics.request_metrics(
        [0.3], [9600], pcm, RATE, read_arrival_s=[0.0, 0.3], read_bytes=[4801, 4799]
    )
    assert figs["ttfa_s"] == 0.0
    assert figs["stalls"] == 1 and figs["stall_s"] == pytest.approx(0.2)
    assert figs["max_underrun_s"] == pytest.approx(0.2) and figs["continuity_ok"] is False


def test_a_chunk_split_across_reads_has_its_first_byte_at_the_first_read():
    # One server chunk of 9600 B (0.2 s) arriving as 4800 B at 0.0 and 4800 B at 0.3.
    # Chunk view: the chunk arrives at 0.3 whole, so first byte 0.3 and no stall.
    # Read view: first byte 0.0; the player plays 0.1 s, runs dry at 0.1, resumes at 0.3:
    # one stall of 0.2 s; upstream's deficit at the second read (0.3 * 48000 - 4800) / 48000
    # = 0.2 s > 0.1 s, so not continuous. PCM: 0.15 s of silence, then a tone. The onset rule
    # (20 ms frames every 10 ms, the first of 2 frames at -45 dBFS or more) finds the frame
    # that starts at 0.14 s (half of it is tone): 0.04 s into the second read, which plays
    # from 0.3: heard at 0.34.
    pcm = np.concatenate([np.zeros(3600, np.int16), _tone(0.05)])
    assert pcm.nbytes == 9600
    chunk_view = metrics.request_metrics([0.3], [9600], pcm, RATE)
    read_view = metrics.request_metrics(
        [0.3], [9600], pcm, RATE, read_arrival_s=[0.0, 0.3], read_bytes=[4800, 4800]
    )
    assert chunk_view["ttfa_s"] == 0.3 and chunk_view["max_underrun_s"] == 0.0
    assert chunk_view["ttfa_audible_s"] == pytest.approx(0.44)
    assert read_view["ttfa_s"] == 0.0
    assert read_view["leading_silence_s"] == pytest.approx(0.14)
    assert read_view["ttfa_audible_naive_s"] == pytest.approx(0.14)
    assert read_view["ttfa_audible_s"] == pytest.approx(0.34)
    assert read_view["max_underrun_s"] == pytest.approx(0.2)
    assert read_view["underrun_events"] == 1 and read_view["continuity_ok"] is False
    assert read_view["stalls"] == 1 and read_view["stall_s"] == pytest.approx(0.2)
    assert read_view["audio_s"] == chunk_view["audio_s"] == pytest.approx(0.2)


def test_first_byte_is_the_first_read_even_before_a_whole_frame():
    # 1 B at 0.05, the rest at 0.25: the first byte came at 0.05, the player starts at 0.25
    figs = metrics.request_metrics(
        [0.25], [4800], _tone(0.1), RATE, read_arrival_s=[0.05, 0.25], read_bytes=[1, 4799]
    )
    assert figs["ttfa_s"] == 0.05
    assert figs["ttfa_audible_s"] == pytest.approx(0.25)
    assert figs["stalls"] == 0 and figs["max_underrun_s"] == 0.0


def test_first_byte_from_the_request_sent():
    assert metrics.first_byte_from_sent_s(0.30, 0.12) == pytest.approx(0.18)
    assert metrics.first_byte_from_sent_s(None, 0.12) is None
    assert metrics.first_byte_from_sent_s(0.30, None) is None


def test_a_wav_header_is_taken_off_the_reads_too():
    # 44 B header + 100 B audio in the first read, 44 B header alone in another stream
    assert drop_front([0.0, 0.1], [144, 4800], 44) == ([0.0, 0.1], [100, 4800])
    assert drop_front([0.0, 0.1], [44, 4800], 44) == ([0.1], [4800])


# A record as schema /1 wrote it (2026-12-01): no reads, no connect_s, request_sent_s,
# ttfa_from_sent_s. Chunks 4800 B at 0.1 s and 4800 B at 0.6 s: deficit at 0.6 is
# (0.5 * 48000 - 4800) / 48000 = 0.4 s, one event, one stall of 0.4 s; a tone from the start.
OLD_RECORD = {
    "request_index": 0, "sample_id": "s0", "text": "hello", "text_chars": 5,
    "warmup": False, "ok": True, "error": None, "http_status": 200, "t_submit_s": 1.5,
    "schedule_lag_s": None, "t_connect_s": 0.001, "connection_reused": False,
    "ttfa_s": 0.1, "leading_silence_s": 0.0, "ttfa_audible_s": 0.1,
    "ttfa_audible_naive_s": 0.1, "wall_s": 0.62, "chunk_arrival_s": [0.1, 0.6],
    "chunk_bytes": [4800, 4800], "audio_s": 0.2, "sample_rate": 24000,
    "max_underrun_s": 0.4, "underrun_events": 1, "continuity_ok": False, "stalls": 1,
    "stall_s": 0.4, "audio_path": None, "protocol": "http",
}  # fmt: skip


def test_an_old_record_file_loads_and_gives_the_same_numbers(tmp_path: Path):
    assert SCHEMA_VERSION == "thetalker.data.records/2"
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(OLD_RECORD) + "\n", encoding="utf-8")
    (rec,) = read_records(path)
    assert rec == OLD_RECORD
    new_fields = {"read_arrival_s", "read_bytes", "connect_s", "request_sent_s"}
    assert new_fields | {"ttfa_from_sent_s"} <= set(OPTIONAL_RECORD_FIELDS)
    assert Record(**rec).read_arrival_s is None  # the new fields default to absent
    # recomputed from its own timeline (the chunks: it has no reads), the figures it carries
    again = metrics.record_metrics(rec, _tone(0.2))
    shared = {k: v for k, v in again.items() if k in OLD_RECORD}
    assert shared == pytest.approx({k: OLD_RECORD[k] for k in shared})
    assert set(again) - set(shared) == {"audible", "audible_onset_rule"}  # issue 22's rule
    assert again["audible"] is True
    summary = metrics.summarize_point([rec])
    assert summary["ttfa_s"]["p50"] == 0.1 and summary["continuity_pct"] == 0.0
    assert summary["stalls_total"] == 1


def test_a_new_record_recomputes_from_its_reads():
    rec = {
        **OLD_RECORD,
        "chunk_arrival_s": [0.3],
        "chunk_bytes": [9600],
        "read_arrival_s": [0.0, 0.3],
        "read_bytes": [4800, 4800],
    }
    figs = metrics.record_metrics(rec, _tone(0.2))
    assert figs["ttfa_s"] == 0.0 and figs["stall_s"] == pytest.approx(0.2)


@settings(max_examples=60)
@given(st.lists(st.integers(1, 9000), min_size=1, max_size=12))
def test_playable_frames_are_the_reads_bytes_less_a_last_half_frame(sizes):
    arrivals = [0.01 * i for i in range(len(sizes))]
    played_at, played = metrics.playable_timeline(arrivals, sizes)
    assert sum(played) == sum(sizes) - sum(sizes) % 2  # every byte but a last half frame
    assert all(n > 0 and n % 2 == 0 for n in played)
    assert set(played_at) <= set(arrivals) and played_at == sorted(played_at)
    # a frame never plays before its last byte came
    for t, done in zip(played_at, itertools.accumulate(played), strict=True):
        came = sum(n for a, n in zip(arrivals, sizes, strict=True) if a <= t)
        assert came >= done
