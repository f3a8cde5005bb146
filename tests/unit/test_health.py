"""Audio health of a stream (thetalker.quality.health) on hand-made signals whose answer is
known: a sine cut into chunks has no clicking join, the same sine with one phase jump at a
join has exactly one; clipping, DC offset, mid-stream silence, a cut ending, empty audio."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.support.records import make_record
from thetalker.data.record_writes import append_record
from thetalker.data.wavio import write_wav
from thetalker.quality import health

RATE = 16_000


def tone(seconds: float, amp: float = 0.5, hz: float = 220.0, phase: float = 0.0) -> np.ndarray:
    t = np.arange(int(round(seconds * RATE))) / RATE
    return amp * np.sin(2 * np.pi * hz * t + phase)


def pcm(x: np.ndarray) -> np.ndarray:
    return np.clip(np.round(x * 32768), -32768, 32767).astype(np.int16)


def chunks_of(n_samples: int, sizes: list[int]) -> list[int]:
    """chunk_bytes cutting n samples into chunks of these sample counts (the rest last)."""
    out = [2 * s for s in sizes]
    return out + [2 * n_samples - sum(out)]


def test_a_sine_cut_into_chunks_has_no_clicking_join():
    x = tone(1.0)
    # Odd byte counts too: a boundary inside a sample belongs to that sample.
    chunk_bytes = [3001, 5000, 999, 7000, 4400]
    chunk_bytes.append(2 * x.size - sum(chunk_bytes))
    h = health.stream_health(pcm(x), RATE, chunk_bytes)
    assert h.joins == 5
    assert h.clicking_joins == 0
    assert h.defects() == ["truncated"]  # a sine to its last sample ends loud


def test_a_phase_jump_at_one_join_is_counted_once_where_it_is():
    # 0.25 s of a 200 Hz sine ends at a zero crossing (50 whole periods); the next chunk
    # starts a quarter period ahead, at the crest: a step of the amplitude (0.5) where
    # the sine's own steps are at most 0.5 * 2 pi 200 / 16000 = 0.039.
    first = tone(0.25, hz=200.0)
    rest = tone(0.75, hz=200.0, phase=np.pi / 2)
    x = np.concatenate([first, rest, np.zeros(1600)])  # ends in silence: not cut
    cut = [1000, first.size - 1000, 3000]
    h = health.stream_health(pcm(x), RATE, chunks_of(x.size, cut))
    assert h.joins == 3
    assert h.clicking_joins == 1
    assert h.click_at_s == [0.25]
    assert h.defects() == ["clicks"]


def test_a_sine_in_one_sample_chunks_has_no_clicking_join_and_a_real_jump_is_found():
    # Every sample a join (2-byte chunks): no step inside a chunk is left to judge a join
    # against, and a clean sine counted a click at almost every sample (1.2 M on 4 MB). A
    # side with no step inside a chunk is judged by its neighbouring steps, joins or not.
    x = tone(1.0, hz=200.0)
    h = health.stream_health(pcm(x), RATE, [2] * x.size)
    assert h.joins == x.size - 1
    assert h.clicking_joins == 0
    # The same chunks over the phase jump at 0.25 s: that one join is a click, no other.
    jump = np.concatenate([tone(0.25, hz=200.0), tone(0.75, hz=200.0, phase=np.pi / 2)])
    h = health.stream_health(pcm(jump), RATE, [2] * jump.size)
    assert h.clicking_joins == 1 and h.click_at_s == [0.25]


def test_a_jump_inside_a_chunk_is_no_clicking_join():
    first = tone(0.25, hz=200.0)
    x = np.concatenate([first, tone(0.75, hz=200.0, phase=np.pi / 2)])
    h = health.stream_health(pcm(x), RATE, chunks_of(x.size, [1000, 2000]))
    assert h.clicking_joins == 0


def test_a_step_below_the_floor_is_no_click():
    # The same jump at -60 dB: 0.0005 of full scale, under CLICK_FLOOR (0.01).
    first = tone(0.25, amp=0.0005, hz=200.0)
    x = np.concatenate([first, tone(0.75, amp=0.0005, hz=200.0, phase=np.pi / 2)])
    h = health.stream_health(pcm(x), RATE, chunks_of(x.size, [first.size]))
    assert h.clicking_joins == 0


def test_clipping_is_a_run_at_full_scale_not_one_peak():
    clipped = pcm(np.clip(tone(0.5, amp=1.5), -1.0, 1.0))
    assert health.clip_runs(clipped) > 0
    # A sine normalised so its peak touches full scale once per half period: one or two
    # samples at the rail, never three.
    peaked = tone(0.5, amp=1.0, hz=250.0, phase=np.pi / 2 / 16)
    assert health.clip_runs(pcm(peaked)) == 0
    h = health.stream_health(clipped, RATE, [clipped.size * 2])
    assert "clipping" in h.defects()


def test_dc_offset():
    x = np.concatenate([tone(0.5), np.zeros(1600)])
    h = health.stream_health(pcm(x + 0.05), RATE, [0])
    assert h.dc_offset == pytest.approx(0.05, abs=1e-3)
    assert h.defects() == ["dc_offset"]
    assert health.stream_health(pcm(x + 0.005), RATE, [0]).defects() == []


def test_mid_stream_silence_its_length_and_place():
    # 0.5 s tone, 1.2 s of zeros, 0.5 s tone at 16 kHz: frames of 320 every 160 samples;
    # the frames wholly in the gap start at 8000..26880 (k = 50..168): 119 frames,
    # (119 - 1) * 0.01 + 0.02 = 1.2 s, from 0.5 s.
    x = np.concatenate([tone(0.5), np.zeros(int(1.2 * RATE)), tone(0.5), np.zeros(3200)])
    h = health.stream_health(pcm(x), RATE, [x.size * 2])
    assert h.longest_mid_silence_s == pytest.approx(1.2)
    assert h.mid_silence_at_s == pytest.approx(0.5)
    assert h.defects() == ["mid_silence"]
    # 0.9 s: a pause, not a defect; leading and trailing silence are never "mid-stream".
    y = np.concatenate([np.zeros(RATE), tone(0.5), np.zeros(int(0.9 * RATE)), tone(0.5)])
    y = np.concatenate([y, np.zeros(2 * RATE)])
    h = health.stream_health(pcm(y), RATE, [y.size * 2])
    assert h.longest_mid_silence_s == pytest.approx(0.9)
    assert h.defects() == []


def test_a_stream_cut_while_loud_is_truncated():
    loud_end = health.stream_health(pcm(tone(0.5)), RATE, [RATE])
    assert loud_end.end_dbfs == pytest.approx(20 * np.log10(0.5 / np.sqrt(2)), abs=0.1)
    assert loud_end.defects() == ["truncated"]
    x = np.concatenate([tone(0.5), np.zeros(1600)])
    assert health.stream_health(pcm(x), RATE, [x.size * 2]).defects() == []


def test_silence_is_an_empty_success():
    h = health.stream_health(np.zeros(RATE, np.int16), RATE, [2 * RATE])
    assert not h.audible
    assert h.defects() == ["empty"]
    # Quiet noise under the audible level (-45 dBFS) is no audio either.
    rng = np.random.default_rng(0)
    h = health.stream_health(pcm(0.001 * rng.standard_normal(RATE)), RATE, [2 * RATE])
    assert h.defects() == ["empty"]


def _write_point(tmp_path, streams: list[np.ndarray | None], failed: int = 0):
    """records.jsonl with one warmup, then a record per stream (None: ok, no audio), then
    `failed` failed requests; each stream's WAV under audio/."""
    path = tmp_path / "c2" / "records.jsonl"
    path.parent.mkdir(parents=True)
    records = [make_record(0, warmup=True)]
    for i, x in enumerate(streams, start=1):
        rec = make_record(i)
        if x is None:
            rec.update(audio_s=0.0, chunk_bytes=[], chunk_arrival_s=[], audio_path=None)
        else:
            rel = f"audio/{i:05d}_s{i}.wav"
            write_wav(path.parent / rel, pcm(x).tobytes(), RATE)
            rec.update(audio_s=x.size / RATE, chunk_bytes=[x.size * 2], audio_path=rel)
            rec.update(sample_rate=RATE)
        records.append(rec)
    records += [make_record(len(streams) + 1 + k, ok=False) for k in range(failed)]
    with path.open("w", encoding="utf-8") as fh:
        for rec in records:
            append_record(fh, rec)
    return path


def test_point_health_cli_judges_every_scored_stream(tmp_path):
    clean = np.concatenate([tone(0.5), np.zeros(1600)])
    records = _write_point(tmp_path, [clean, tone(0.5), None], failed=1)
    out = tmp_path / "health.json"
    assert health.main(["--records", str(records), "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["settings"]["click_ratio"] == health.CLICK_RATIO
    streams = data["streams"]
    assert [s["request_index"] for s in streams] == [1, 2, 3, 4]  # no warmup
    assert [s["defects"] for s in streams] == [[], ["truncated"], ["empty"], []]
    assert [s["ok"] for s in streams] == [True, True, True, False]


def test_an_ok_record_whose_audio_is_missing_is_named(tmp_path, capsys):
    records = _write_point(tmp_path, [tone(0.5)])
    (records.parent / "audio" / "00001_s1.wav").unlink()
    assert health.main(["--records", str(records), "--out", str(tmp_path / "h.json")]) == 2
    err = capsys.readouterr().err
    assert "record 2" in err and "00001_s1.wav not found" in err


def test_health_table_counts_a_failed_request_against_every_share(tmp_path):
    from thetalker.report import health as report

    point = tmp_path / "results" / "runs" / "local" / "piper" / "c8"
    point.mkdir(parents=True)
    streams = [
        {"ok": True, "defects": [], "joins": 3, "clicking_joins": 0},
        {"ok": True, "defects": ["clicks"], "joins": 2, "clicking_joins": 1},
        {"ok": True, "defects": ["clicks", "truncated"], "joins": 2, "clicking_joins": 2},
        {"ok": False, "defects": []},
    ]
    (point / "health.json").write_text(json.dumps({"streams": streams}))
    table = tmp_path / "health.md"
    assert report.main(["--health", str(point / "health.json"), "--table", str(table)]) == 0
    (row,) = report.health_rows([point / "health.json"])
    assert (row["system"], row["model"], row["run"], row["point"]) == (
        "local",
        "piper",
        "speed",
        "c8",
    )
    assert row["clean_pct"] == 25.0  # 1 of 4
    assert row["clicks_pct"] == 75.0  # 2 with clicks + 1 failed, of 4
    assert row["truncated_pct"] == 50.0
    assert row["clipping_pct"] == 25.0  # the failed one alone
    assert row["clicks_pct_low"] < 75.0 < row["clicks_pct_high"]
    assert (row["clicking_joins"], row["joins"]) == (3, 7)
    assert "| local | piper | speed | c8 | 4 | 25 [" in table.read_text()
    assert table.with_suffix(".csv").exists()
