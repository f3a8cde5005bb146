"""DNSMOS P.835 through the speechmos wheel's ONNX file (thetalker.quality.dnsmos): the
windows and polynomials as speechmos cuts and maps them, and the real model on the embedded
voice: clean Piper speech scores clearly above the same audio with white noise at 0 dB SNR."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.support.records import make_record
from thetalker.data.records import append_record
from thetalker.data.wavio import write_wav
from thetalker.quality import dnsmos


def test_a_short_clip_is_doubled_onto_itself_to_one_window():
    x = np.arange(16_000 * 5, dtype=float)  # 5 s -> 10 s: one window, at 0
    (w,) = dnsmos.windows(x)
    assert w.size == 144_160
    assert np.array_equal(w[:80_000], x) and np.array_equal(w[80_000:], x[:64_160])
    # 4 s -> 8 s (still short) -> 16 s: floor(16) - 9.01 = 6.99 -> 6, + 1 = 7 windows.
    assert len(dnsmos.windows(np.arange(16_000 * 4, dtype=float))) == 7


def test_a_long_clip_has_a_window_every_second():
    windows = dnsmos.windows(np.zeros(16_000 * 12))
    # floor(12) - 9.01 = 2.99 -> int 2, + 1 = 3 windows, at 0, 1 and 2 s.
    assert len(windows) == 3
    assert all(w.size == 144_160 for w in windows)
    assert dnsmos.windows(np.zeros(0)) == []


def test_the_published_polynomials():
    # OVRL: -0.06766283 x^2 + 1.11546468 x + 0.04602535 at x = 3: 2.78345...
    got = dnsmos.calibrate([3.0, 3.0, 3.0])
    assert got["ovrl"] == pytest.approx(-0.06766283 * 9 + 1.11546468 * 3 + 0.04602535)
    assert got["sig"] == pytest.approx(-0.08397278 * 9 + 1.22083953 * 3 + 0.0052439)
    assert got["bak"] == pytest.approx(-0.13166888 * 9 + 1.60915514 * 3 - 0.39604546)


def test_resampling_to_16k_keeps_the_length_and_the_range():
    x = np.clip(np.sin(np.arange(22_050) / 3.0) * 1.2, -1, 1)
    y = dnsmos.resample(x, 22_050)
    assert y.size == 16_000
    assert np.abs(y).max() <= 1.0


@pytest.fixture(scope="module")
def piper_speech() -> tuple[np.ndarray, int]:
    """A sentence in the embedded voice (Piper, joe), as floats."""
    pytest.importorskip("piper")
    from thetalker.server.engine import load_piper_voice

    voice = load_piper_voice(1)
    pcm = b"".join(
        c.audio_int16_bytes
        for c in voice.synthesize("The quick brown fox jumps over the lazy dog near the river.")
    )
    return np.frombuffer(pcm, "<i2") / 32768.0, voice.config.sample_rate


def _scorer() -> dnsmos.Dnsmos:
    try:
        return dnsmos.Dnsmos()
    except dnsmos.NotInstalled as exc:
        pytest.skip(str(exc))


def test_the_embedded_voice_scores_clearly_above_itself_in_white_noise(piper_speech):
    x, rate = piper_speech
    rng = np.random.default_rng(0)
    noisy = np.clip(x + rng.standard_normal(x.size) * np.sqrt(np.mean(x**2)), -1, 1)  # 0 dB
    scorer = _scorer()
    clean, dirty = scorer.score(x, rate), scorer.score(noisy, rate)
    # Measured: clean OVRL about 3.1-3.3, noisy about 1.6 (reference/ref.wav: 3.30 / 1.63).
    assert clean["ovrl"] > dirty["ovrl"] + 1.0
    assert clean["bak"] > dirty["bak"] + 1.5  # the background is what the noise ruins
    assert all(1.0 <= v <= 5.0 for v in (*clean.values(), *dirty.values()))


def test_point_scores_a_failed_request_at_the_floor(tmp_path, piper_speech):
    _scorer()
    x, rate = piper_speech
    path = tmp_path / "records.jsonl"
    ok = make_record(1)
    ok.update(audio_path="audio/a.wav", sample_rate=rate, audio_s=x.size / rate)
    write_wav(tmp_path / "audio" / "a.wav", (x * 32767).astype("<i2").tobytes(), rate)
    with path.open("w", encoding="utf-8") as fh:
        for rec in (make_record(0, warmup=True), ok, make_record(2, ok=False)):
            append_record(fh, rec)
    out = tmp_path / "dnsmos.json"
    assert dnsmos.main(["--records", str(path), "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["available"] is True
    good, failed = data["streams"]
    assert good["scored"] and good["ovrl"] > 2.0
    assert not failed["scored"] and failed["ovrl"] == dnsmos.FAILED_SCORE


def test_without_speechmos_the_file_says_not_installed(tmp_path, monkeypatch):
    def missing() -> None:
        raise dnsmos.NotInstalled("speechmos not installed (pip install ...)")

    monkeypatch.setattr(dnsmos, "model_path", missing)
    dnsmos._scorer.cache_clear()
    out = tmp_path / "dnsmos.json"
    assert dnsmos.main(["--records", "r.jsonl", "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == {
        "records": "r.jsonl",
        "available": False,
        "reason": "speechmos not installed (pip install ...)",
    }
    dnsmos._scorer.cache_clear()
