"""The server's HTTP layer over `FakeEngine` (set timings, no Piper): fast, in-process.

Everything the contract says about requests, errors, streaming framing, SSE, voices, metrics
and disconnects, on a real aiohttp server on loopback (pytest-aiohttp picks a free port).
Real synthesis is tested in test_server_real.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from thetalker.server.app import ENGINE_KEY, make_app, parse_speech_request
from thetalker.server.engine import FakeEngine
from thetalker.server.formats import (
    AudioFormatError,
    flac_available,
    wav_bytes,
    wav_duration_s,
    wav_header,
)
from thetalker.server.prom import ServerMetrics
from thetalker.server.settings import DeployConfigError, engine_settings, load_deploy_config
from thetalker.server.voices import VoiceError, VoiceStore

RATE = 22050
STREAM = {"stream": True, "stream_format": "audio", "response_format": "pcm"}


def tone_wav(seconds: float, rate: int = 16000) -> bytes:
    return wav_bytes(b"\x01\x00" * int(seconds * rate), rate)


@pytest.fixture
async def client(aiohttp_client: Any, tmp_path: Path) -> Any:
    engine = FakeEngine(workers=1, chars_s=0.01)
    app = make_app(engine, voices_dir=tmp_path / "voices")
    return await aiohttp_client(app, server_kwargs={"handler_cancellation": True})


async def read_server_chunks(resp: aiohttp.ClientResponse) -> list[bytes]:
    """The body split where the server's HTTP chunks end (as the client must count them)."""
    chunks, current = [], b""
    async for data, end_of_chunk in resp.content.iter_chunks():
        current += data
        if end_of_chunk and current:
            chunks.append(current)
            current = b""
    if current:
        chunks.append(current)
    return chunks


async def post_speech(client: Any, **body: Any) -> aiohttp.ClientResponse:
    return await client.post("/v1/audio/speech", json={"input": "Hello there.", **body})


# --- request validation -------------------------------------------------------------------

BAD_REQUESTS = [
    ({"input": ""}, 400, "input"),
    ({"input": "   "}, 400, "input"),
    ({"text": "no input key"}, 400, "input"),
    ({"input": 5}, 400, "input"),
    ({"input": "Hi.", "model": "Qwen/Qwen3-TTS"}, 404, "model"),
    ({"input": "Hi.", "response_format": "ogg"}, 400, "response_format"),
    (
        {"input": "Hi.", "response_format": "mp3", **{"stream": True, "stream_format": "audio"}},
        400,
        "response_format",
    ),
    ({"input": "Hi.", "stream": True, "response_format": "flac"}, 400, "response_format"),
    ({"input": "Hi.", "response_format": "mp3"}, 400, "response_format"),
    ({"input": "Hi.", "stream_format": "chunks"}, 400, "stream_format"),
    ({"input": "Hi.", "stream": "yes"}, 400, "stream"),
    ({"input": "Hi.", "speed": 1.5, **STREAM}, 400, "speed"),
    ({"input": "Hi.", "speed": 9}, 400, "speed"),
    ({"input": "Hi.", "task_type": "Clone"}, 400, "task_type"),
    (
        {"input": "Hi.", "task_type": "Base", "ref_audio": "data:audio/wav;base64,AA"},
        400,
        "task_type",
    ),
    ({"input": "Hi.", "task_type": "VoiceDesign", "instructions": "deep"}, 400, "task_type"),
    ({"input": "Hi.", "ref_text": "hello"}, 400, "ref_text"),
    ({"input": "Hi.", "instructions": "x" * 501}, 400, "instructions"),
    ({"input": "Hi.", "max_new_tokens": 0}, 400, "max_new_tokens"),
    ({"input": "Hi.", "max_new_tokens": 5000}, 400, "max_new_tokens"),
    ({"input": "Hi.", "seed": "x"}, 400, "seed"),
    ({"input": "Hi.", "speaker": "ryan"}, 400, "speaker"),
    ({"input": "Hi.", "voice": "vivian"}, 400, "voice"),
]


@pytest.mark.parametrize(("body", "status", "param"), BAD_REQUESTS)
async def test_bad_request_gets_status_and_error_body(
    client: Any, body: dict, status: int, param: str
) -> None:
    resp = await client.post("/v1/audio/speech", json=body)
    assert resp.status == status
    error = (await resp.json())["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param
    assert error["code"] == status
    assert error["message"]


async def test_base_and_voicedesign_say_why(client: Any) -> None:
    for task, word in (("Base", "clone"), ("VoiceDesign", "design")):
        resp = await post_speech(client, task_type=task)
        assert word in (await resp.json())["error"]["message"]


async def test_unknown_speaker_names_the_valid_ones(client: Any) -> None:
    resp = await post_speech(client, speaker="ryan")
    assert "joe" in (await resp.json())["error"]["message"]


async def test_bad_json_is_400(client: Any) -> None:
    resp = await client.post("/v1/audio/speech", data=b"{not json")
    assert resp.status == 400
    assert (await resp.json())["error"]["type"] == "BadRequestError"
    resp = await client.post("/v1/audio/speech", json=["input"])
    assert resp.status == 400


async def test_speaker_is_case_insensitive_and_model_may_match(client: Any) -> None:
    for body in ({"speaker": "JOE"}, {"voice": "Joe"}, {"model": "piper-joe"}, {}):
        resp = await post_speech(client, response_format="pcm", **body)
        assert resp.status == 200, body
        assert len(await resp.read()) > 0


def test_parse_modes() -> None:
    def mode(**kw: Any) -> str:
        return parse_speech_request({"input": "x", **kw}, "piper-joe").mode

    assert mode() == "file"
    assert mode(stream=True) == "sse"  # stream alone means SSE
    assert mode(stream=True, stream_format="audio") == "audio"
    assert mode(stream_format="sse") == "sse"
    assert mode(stream=False) == "file"


# --- audio out ------------------------------------------------------------------------------


async def test_raw_pcm_stream_one_chunk_per_sentence(client: Any) -> None:
    resp = await post_speech(client, input="One. Two words. Three more words.", **STREAM)
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "audio/pcm"
    chunks = await read_server_chunks(resp)
    engine = FakeEngine(chars_s=0.01)
    expected = [engine.sentence_pcm(s) for s in ("One.", "Two words.", "Three more words.")]
    assert chunks == expected


async def test_wav_stream_sends_header_chunk_first(client: Any) -> None:
    body = {**STREAM, "response_format": "wav", "input": "One. Two."}
    resp = await client.post("/v1/audio/speech", json=body)
    assert resp.headers["Content-Type"] == "audio/wav"
    chunks = await read_server_chunks(resp)
    header = chunks[0]
    assert len(header) == 44
    assert header[:4] == b"RIFF" and header[8:12] == b"WAVE"
    assert struct.unpack_from("<I", header, 4)[0] == 0xFFFFFFFF
    assert struct.unpack_from("<I", header, 40)[0] == 0xFFFFFFFF
    assert struct.unpack_from("<I", header, 24)[0] == RATE
    assert struct.unpack_from("<H", header, 22)[0] == 1
    assert len(chunks) == 3


async def test_non_streamed_wav_and_pcm_agree(client: Any) -> None:
    wav = await (await post_speech(client, response_format="wav")).read()
    pcm = await (await post_speech(client, response_format="pcm")).read()
    assert struct.unpack_from("<I", wav, 24)[0] == RATE
    assert struct.unpack_from("<I", wav, 40)[0] == len(pcm)
    assert wav[44:] == pcm
    assert wav_duration_s(wav) == pytest.approx(len(pcm) / (2 * RATE))


@pytest.mark.skipif(not flac_available(), reason="soundfile not installed")
async def test_flac_decodes_to_the_same_pcm(client: Any) -> None:
    import io

    import numpy as np
    import soundfile

    flac = await (await post_speech(client, response_format="flac")).read()
    pcm = await (await post_speech(client, response_format="pcm")).read()
    samples, rate = soundfile.read(io.BytesIO(flac), dtype="int16")
    assert rate == RATE
    assert np.array_equal(samples, np.frombuffer(pcm, "<i2"))


async def test_speed_shortens_non_streamed_audio(client: Any) -> None:
    normal = await (await post_speech(client, response_format="pcm")).read()
    fast = await (await post_speech(client, response_format="pcm", speed=2.0)).read()
    assert len(fast) < len(normal)


async def test_sse_decodes_to_the_raw_stream(client: Any) -> None:
    text = "One. Two words."
    raw = b"".join(await read_server_chunks(await post_speech(client, input=text, **STREAM)))
    resp = await post_speech(client, input=text, stream=True, response_format="pcm")
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    events = parse_sse((await resp.read()).decode())
    kinds = [e["type"] for e in events]
    assert kinds == ["speech.audio.delta", "speech.audio.delta", "speech.audio.done"]
    audio = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert audio == raw
    assert events[-1]["usage"]["audio_seconds"] == pytest.approx(len(raw) / (2 * RATE))


def parse_sse(text: str) -> list[dict]:
    events = []
    for block in text.strip().split("\n\n"):
        data = [line[6:] for line in block.splitlines() if line.startswith("data: ")]
        events.append(json.loads("".join(data)))
    return events


async def test_engine_failure_before_audio_is_json_500(aiohttp_client: Any, tmp_path: Path) -> None:
    app = make_app(FakeEngine(fail_after=0), voices_dir=tmp_path)
    client = await aiohttp_client(app)
    resp = await post_speech(client, **STREAM)
    assert resp.status == 500
    assert (await resp.json())["error"]["code"] == 500


async def test_engine_failure_mid_stream_cuts_body_or_sends_sse_error(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    app = make_app(FakeEngine(fail_after=1), voices_dir=tmp_path)
    client = await aiohttp_client(app)
    resp = await post_speech(client, input="One. Two.", **STREAM)
    assert resp.status == 200
    with pytest.raises(aiohttp.ClientPayloadError):
        await resp.read()
    resp = await post_speech(client, input="One. Two.", stream=True, response_format="pcm")
    events = parse_sse((await resp.read()).decode())
    assert events[-1]["type"] == "speech.audio.error"
    assert events[-1]["error"]["code"] == 500


# --- disconnects free the worker ----------------------------------------------------------


async def test_client_disconnect_frees_the_worker(aiohttp_client: Any, tmp_path: Path) -> None:
    engine = FakeEngine(workers=1, chars_s=0.01, sentence_delay_s=0.2)
    client = await aiohttp_client(
        make_app(engine, voices_dir=tmp_path), server_kwargs={"handler_cancellation": True}
    )
    long_text = " ".join(f"Sentence {i}." for i in range(200))  # 40 s at 0.2 s a sentence
    resp = await post_speech(client, input=long_text, **STREAM)
    await resp.content.readany()
    assert engine.busy == 1
    resp.close()  # drop the connection mid-stream
    for _ in range(200):
        if engine.busy == 0:
            break
        await asyncio.sleep(0.05)
    assert engine.busy == 0
    # The only worker serves the next request.
    resp = await asyncio.wait_for(post_speech(client, response_format="pcm"), 30)
    assert resp.status == 200 and len(await resp.read()) > 0
    metrics = await (await client.get("/metrics")).text()
    assert "thetalker:requests_cancelled_total 1" in metrics
    assert "thetalker:requests_in_flight 0" in metrics


# --- other endpoints -----------------------------------------------------------------------


async def test_health_models_version(client: Any) -> None:
    assert await (await client.get("/health")).json() == {"status": "healthy"}
    models = await (await client.get("/v1/models")).json()
    assert models["object"] == "list" and models["data"][0]["id"] == "piper-joe"
    version = await (await client.get("/version")).json()
    assert version["version"] and version["piper_tts"]


async def test_health_503_until_engine_started(client: Any) -> None:
    engine = client.app[ENGINE_KEY]
    assert engine.ready  # the test server ran cleanup_ctx, which started it
    engine.started = False
    assert (await client.get("/health")).status == 503
    engine.started = True
    assert (await client.get("/health")).status == 200


async def test_metrics_count_requests_audio_and_latency(client: Any) -> None:
    await post_speech(client, response_format="pcm")
    await post_speech(client, input="")
    text = await (await client.get("/metrics")).text()
    values = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    assert values['thetalker:requests_total{status="200"}'] == 1
    assert values['thetalker:requests_total{status="400"}'] == 1
    assert values["thetalker:audio_seconds_total"] > 0
    assert values["thetalker:first_chunk_latency_seconds_count"] == 1
    assert values['thetalker:first_chunk_latency_seconds_bucket{le="+Inf"}'] == 1


def test_histogram_buckets_are_cumulative() -> None:
    metrics = ServerMetrics()
    for seconds in (0.005, 0.2, 0.2, 20.0):
        metrics.observe_first_chunk(seconds)
    text = metrics.render()
    assert 'first_chunk_latency_seconds_bucket{le="0.01"} 1' in text
    assert 'first_chunk_latency_seconds_bucket{le="0.25"} 3' in text
    assert 'first_chunk_latency_seconds_bucket{le="10"} 3' in text
    assert 'first_chunk_latency_seconds_bucket{le="+Inf"} 4' in text


# --- voices --------------------------------------------------------------------------------


def voice_form(name: str, audio: bytes | None = None, **fields: str) -> aiohttp.FormData:
    form = aiohttp.FormData()
    form.add_field("name", name)
    for key, value in fields.items():
        form.add_field(key, value)
    if audio is not None:
        form.add_field("audio_sample", audio, filename="ref.wav", content_type="audio/wav")
    return form


async def test_voices_round_trip(client: Any, tmp_path: Path) -> None:
    form = voice_form("Alice", tone_wav(2.0), consent="yes", ref_text="Hello.")
    resp = await client.post("/v1/audio/voices", data=form)
    assert resp.status == 200, await resp.text()
    voice = (await resp.json())["voice"]
    assert voice["name"] == "Alice" and voice["consent"] == "yes"
    assert voice["mime_type"] == "audio/wav" and voice["ref_text"] == "Hello."
    assert voice["file_size"] == len(tone_wav(2.0))
    listed = await (await client.get("/v1/audio/voices")).json()
    assert "Alice" in listed["voices"] and "joe" in listed["voices"]
    assert [v["name"] for v in listed["uploaded_voices"]] == ["Alice"]
    # Stored on disk and reloaded by a new store (as at a restart).
    assert "Alice" in VoiceStore(tmp_path / "voices").names()
    # Synthesis with an uploaded voice is refused as Base is.
    resp = await post_speech(client, voice="alice")
    assert resp.status == 400 and "clone" in (await resp.json())["error"]["message"]
    # Re-upload (any case) overwrites.
    form = voice_form("ALICE", tone_wav(3.0), consent="yes")
    assert (await client.post("/v1/audio/voices", data=form)).status == 200
    listed = await (await client.get("/v1/audio/voices")).json()
    assert [v["name"] for v in listed["uploaded_voices"]] == ["ALICE"]
    resp = await client.delete("/v1/audio/voices/alice")
    assert resp.status == 200 and (await resp.json())["success"] is True
    assert (await client.delete("/v1/audio/voices/alice")).status == 404
    listed = await (await client.get("/v1/audio/voices")).json()
    assert listed["uploaded_voices"] == []
    assert list((tmp_path / "voices").glob("alice*")) == []


BAD_VOICES = [
    (dict(name="a", audio=tone_wav(0.5), consent="y"), "audio_sample"),
    (dict(name="a", audio=tone_wav(31.0), consent="y"), "audio_sample"),
    (dict(name="a", audio=b"not audio at all", consent="y"), "audio_sample"),
    (dict(name="a", audio=tone_wav(2.0)), "consent"),
    (dict(name="a/b", audio=tone_wav(2.0), consent="y"), "name"),
    (dict(name="..", audio=tone_wav(2.0), consent="y"), "name"),
    (dict(name="a\\b", audio=tone_wav(2.0), consent="y"), "name"),
    (dict(name="a", consent="y"), "audio_sample"),
    (dict(name="a", audio=tone_wav(2.0), consent="y", speaker_embedding="[1]"), "audio_sample"),
    (dict(name="a", consent="y", speaker_embedding="[1, 'x']"), "speaker_embedding"),
]


@pytest.mark.parametrize(("kwargs", "param"), BAD_VOICES)
async def test_bad_voice_upload_is_400(client: Any, kwargs: dict, param: str) -> None:
    resp = await client.post("/v1/audio/voices", data=voice_form(**kwargs))
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error["param"] == param and error["code"] == 400


async def test_voice_file_over_10_mib_is_400(client: Any) -> None:
    big = wav_header(16000, 11 * 1024 * 1024) + b"\0" * (11 * 1024 * 1024)
    resp = await client.post("/v1/audio/voices", data=voice_form("big", big, consent="y"))
    assert resp.status == 400
    assert "10 MiB" in (await resp.json())["error"]["message"]


async def test_speaker_embedding_voice(client: Any) -> None:
    form = voice_form("emb", consent="y", speaker_embedding="[0.1, 0.2, 3]")
    resp = await client.post("/v1/audio/voices", data=form)
    assert resp.status == 200
    assert (await resp.json())["voice"]["mime_type"] == "application/json"


def test_voice_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import thetalker.server.voices as voices

    monkeypatch.setattr(voices, "MAX_VOICES", 2)
    store = VoiceStore(tmp_path)
    store.add("a", "y", audio=tone_wav(1.0))
    store.add("b", "y", audio=tone_wav(1.0))
    store.add("B", "y", audio=tone_wav(1.5))  # an overwrite is not a new voice
    with pytest.raises(VoiceError, match="too many"):
        store.add("c", "y", audio=tone_wav(1.0))


def test_wav_duration_rejects_garbage() -> None:
    with pytest.raises(AudioFormatError):
        wav_duration_s(b"RIFF\0\0\0\0WAVE")
    assert wav_duration_s(tone_wav(1.25)) == pytest.approx(1.25)


# --- deploy files and flags ----------------------------------------------------------------


def test_deploy_config_read_and_flags_override(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text("workers: 3\nthreads_per_worker: 1\nsynthesis:\n  length_scale: 1.1\n")
    settings = engine_settings(path)
    assert (settings.workers, settings.threads_per_worker) == (3, 1)
    assert settings.synthesis.length_scale == 1.1 and settings.synthesis.noise_scale is None
    assert engine_settings(path, workers=1, threads_per_worker=2).workers == 1
    stock = engine_settings()
    assert (stock.workers, stock.threads_per_worker) == (1, None)
    det = engine_settings(path, deterministic=True).effective_synthesis()
    assert (det.noise_scale, det.noise_w_scale, det.length_scale) == (0.0, 0.0, 1.1)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("workerz: 2\n", "workerz"),
        ("workers: 0\n", "workers"),
        ("workers: two\n", "workers"),
        ("threads_per_worker: -1\n", "threads_per_worker"),
        ("synthesis:\n  noise: 1\n", "synthesis.noise"),
        ("synthesis:\n  length_scale: 0\n", "synthesis.length_scale"),
        ("- a list\n", "mapping"),
    ],
)
def test_bad_deploy_config_names_file_and_key(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(DeployConfigError) as info:
        load_deploy_config(path)
    message = str(info.value)
    assert str(path) in message and key in message and "\n" not in message
