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

from tests.support.http_chunks import read_server_chunks
from thetalker.server.app import ENGINE_KEY, make_app, parse_speech_request
from thetalker.server.engine import FakeEngine
from thetalker.server.formats import (
    AudioFormatError,
    wav_bytes,
    wav_duration_s,
    wav_header,
)
from thetalker.server.pieces import MAX_INPUT_CHARS
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


async def post_speech(client: Any, **body: Any) -> aiohttp.ClientResponse:
    return await client.post("/v1/audio/speech", json={"input": "Hello there.", **body})


# --- request validation -------------------------------------------------------------------

PYDANTIC = "Bad Request"  # 0.30.0's request-model errors: type = the HTTP phrase
ADAPTER = "BadRequestError"  # 0.30.0's model-level refusals, param null

BAD_REQUESTS = [
    ({"input": ""}, 400, ADAPTER, None),
    ({"input": "   "}, 400, ADAPTER, None),
    ({"text": "no input key"}, 400, PYDANTIC, "body.input"),
    ({"input": 5}, 400, PYDANTIC, "body.input"),
    ({"input": "Hi.", "model": "Qwen/Qwen3-TTS"}, 404, "NotFoundError", "model"),
    ({"input": "Hi.", "response_format": "ogg"}, 400, PYDANTIC, "body.response_format"),
    (
        {"input": "Hi.", "response_format": "mp3", **{"stream": True, "stream_format": "audio"}},
        400,
        PYDANTIC,
        "body.response_format",
    ),
    (
        {"input": "Hi.", "stream": True, "response_format": "flac"},
        400,
        PYDANTIC,
        "body.response_format",
    ),
    ({"input": "Hi.", "response_format": "mp3"}, 400, ADAPTER, None),
    ({"input": "Hi.", "stream_format": "chunks"}, 400, PYDANTIC, "body.stream_format"),
    ({"input": "Hi.", "stream": "yes"}, 400, PYDANTIC, "body.stream"),
    ({"input": "Hi.", "speed": 1.5, **STREAM}, 400, ADAPTER, None),
    ({"input": "Hi.", "speed": 9}, 400, PYDANTIC, "body.speed"),
    ({"input": "Hi.", "task_type": "Clone"}, 400, PYDANTIC, "body.task_type"),
    (
        {"input": "Hi.", "task_type": "Base", "ref_audio": "data:audio/wav;base64,AA"},
        400,
        ADAPTER,
        None,
    ),
    ({"input": "Hi.", "task_type": "VoiceDesign", "instructions": "deep"}, 400, ADAPTER, None),
    ({"input": "Hi.", "ref_text": "hello"}, 400, ADAPTER, None),
    ({"input": "Hi.", "instructions": "x" * 501}, 400, ADAPTER, None),
    ({"input": "Hi.", "max_new_tokens": 0}, 400, PYDANTIC, "body.max_new_tokens"),
    ({"input": "Hi.", "max_new_tokens": 5000}, 400, ADAPTER, None),
    ({"input": "Hi.", "seed": "x"}, 400, PYDANTIC, "body.seed"),
    ({"input": "Hi.", "speaker": "ryan"}, 400, ADAPTER, None),
    ({"input": "Hi.", "voice": "vivian"}, 400, ADAPTER, None),
    ({"input": "Hi.", "voice": {"id": "vivian"}}, 400, ADAPTER, None),
    ({"input": "Hi.", "voice": 7}, 400, PYDANTIC, "body.voice"),
    (
        {"input": "Hi.", "initial_codec_chunk_frames": -1},
        400,
        PYDANTIC,
        "body.initial_codec_chunk_frames",
    ),
    ({"input": "Hi.", "sample_rate": 24000}, 400, ADAPTER, None),
    ({"input": "Hi.", "sample_rate": 22050, **STREAM}, 400, ADAPTER, None),
    ({"input": "Hi \x00 there."}, 400, ADAPTER, None),
    ({"input": "x" * (MAX_INPUT_CHARS + 1)}, 400, ADAPTER, None),
]


@pytest.mark.parametrize(("body", "status", "kind", "param"), BAD_REQUESTS)
async def test_bad_request_gets_status_and_error_body(
    client: Any, body: dict, status: int, kind: str, param: str | None
) -> None:
    resp = await client.post("/v1/audio/speech", json=body)
    assert resp.status == status
    error = (await resp.json())["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"], error["code"]) == (kind, param, status)
    assert error["message"]
    if kind == PYDANTIC:
        assert error["message"].startswith("1 validation error:\n  {")


async def test_wrong_model_message_is_0300s(client: Any) -> None:
    error = (await (await post_speech(client, model="X")).json())["error"]
    assert error["message"] == "The model `X` does not exist."


async def test_over_long_input_names_the_limit(client: Any) -> None:
    resp = await post_speech(client, input="word " * (MAX_INPUT_CHARS // 5 + 1))
    assert resp.status == 400
    assert str(MAX_INPUT_CHARS) in (await resp.json())["error"]["message"]


async def test_sample_rate_is_not_supported(client: Any) -> None:
    error = (await (await post_speech(client, sample_rate=8000)).json())["error"]
    assert error["message"] == "sample_rate is not supported"


@pytest.mark.parametrize(
    ("data", "headers"),
    [
        (json.dumps({"input": "Hi \ud800 there."}).encode(), {}),  # a lone surrogate
        (b"[" * 100_000 + b"]" * 100_000, {}),  # nested 100,000 deep
        (b"{not json", {}),
        (b"not gzip at all", {"Content-Encoding": "gzip"}),
        (b"{}", {"Content-Encoding": "br-nonsense"}),
        (json.dumps({"input": "Hi."}).encode(), {"Content-Type": "text/plain"}),
    ],
)
async def test_malformed_bodies_are_400_not_500(client: Any, data: bytes, headers: dict) -> None:
    # The server may close a connection whose body it could not read: not this test's point.
    headers = {"Content-Type": "application/json", "Connection": "close", **headers}
    resp = await client.post("/v1/audio/speech", data=data, headers=headers)
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == 400
    assert (await client.get("/health")).status == 200


async def test_voice_object_and_chunk_frames_zero_are_accepted(client: Any) -> None:
    for body in ({"voice": {"id": "JOE"}}, {"initial_codec_chunk_frames": 0}):
        resp = await post_speech(client, response_format="pcm", **body)
        assert resp.status == 200, await resp.text()


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
    assert (await resp.json())["error"]["type"] == "Bad Request"
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
    assert mode(stream=False, stream_format="audio") == "audio"  # 0.30.0: raw whatever stream says
    assert mode(stream_format="audio") == "audio"


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
    assert resp.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    events = parse_sse((await resp.read()).decode())
    kinds = [e["type"] for e in events]
    assert kinds == ["speech.audio.delta", "speech.audio.delta", "speech.audio.done"]
    audio = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert audio == raw
    usage = events[-1]["usage"]
    assert set(usage) == {"input_tokens", "output_tokens", "total_tokens", "input_token_details"}
    assert usage["input_tokens"] == len(text)
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"] > len(text)
    assert set(usage["input_token_details"]) == {"text_tokens", "audio_tokens"}


def parse_sse(text: str) -> list[dict]:
    events = []
    for block in text.strip().split("\n\n"):
        data = [line[6:] for line in block.splitlines() if line.startswith("data: ")]
        events.append(json.loads("".join(data)))
    return events


async def test_engine_failure_before_audio_is_200_then_cut_or_sse_error(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    # 0.30.0 sends the 200 before the first audio: a failure then cuts the body (raw) or
    # ends with speech.audio.error (SSE), never a JSON 500.
    app = make_app(FakeEngine(fail_after=0), voices_dir=tmp_path)
    client = await aiohttp_client(app)
    resp = await post_speech(client, **STREAM)
    assert resp.status == 200 and resp.headers["Content-Type"] == "audio/pcm"
    with pytest.raises(aiohttp.ClientPayloadError):
        await resp.read()
    resp = await post_speech(client, stream=True, response_format="pcm")
    assert resp.status == 200
    events = parse_sse((await resp.read()).decode())
    assert [e["type"] for e in events] == ["speech.audio.error"]
    assert events[0]["error"] == {
        "message": events[0]["error"]["message"],
        "type": "server_error",
        "param": None,
        "code": 500,
    }
    assert "partial_audio" not in events[0]  # nothing was sent to discard
    # Not streamed: the whole file or an error body.
    resp = await post_speech(client, response_format="pcm")
    assert resp.status == 500


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
    assert [e["type"] for e in events] == ["speech.audio.delta", "speech.audio.error"]
    last = events[-1]
    assert last["error"]["type"] == "server_error" and last["error"]["code"] == 500
    assert (last["partial_audio"], last["action"]) == (True, "discard")


async def test_stream_false_with_stream_format_audio_streams(client: Any) -> None:
    resp = await post_speech(
        client, input="One. Two.", stream=False, stream_format="audio", response_format="pcm"
    )
    assert resp.headers.get("Transfer-Encoding") == "chunked"
    assert len(await read_server_chunks(resp)) == 2


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
    assert listed["voices"] == ["alice", "joe"]  # 0.30.0: sorted, lowercase, built-ins too
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
    assert await resp.json() == {"success": True, "message": "Voice 'ALICE' deleted successfully"}
    resp = await client.delete("/v1/audio/voices/alice")
    assert resp.status == 404
    error = (await resp.json())["error"]
    assert (error["message"], error["type"]) == ("Voice 'alice' not found", "NotFoundError")
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
    (dict(name="JOE", audio=tone_wav(2.0), consent="y"), "name"),  # a built-in speaker
    (dict(name="a", audio=tone_wav(2.0), consent="y", ref_text="x" * 20_000), "ref_text"),
    (dict(name="a", audio=tone_wav(2.0), consent="y", speaker_description="x" * 20_000), None),
]


@pytest.mark.parametrize(("kwargs", "param"), BAD_VOICES)
async def test_bad_voice_upload_is_400(client: Any, kwargs: dict, param: str) -> None:
    resp = await client.post("/v1/audio/voices", data=voice_form(**kwargs))
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error["code"] == 400
    if param is not None:
        assert error["param"] == param


async def test_built_in_speaker_name_is_reserved(client: Any) -> None:
    resp = await client.post("/v1/audio/voices", data=voice_form("Joe", tone_wav(2.0), consent="y"))
    assert "reserved by a built-in speaker" in (await resp.json())["error"]["message"]


def test_uploading_a_keeps_the_files_of_a_sample_x(tmp_path: Path) -> None:
    store = VoiceStore(tmp_path)
    store.add("a.sample.x", "y", audio=tone_wav(1.0))
    before = sorted(p.name for p in tmp_path.iterdir())
    store.add("a", "y", audio=tone_wav(1.0))
    store.add("a", "y", audio=tone_wav(1.5))  # a re-upload replaces only a's own sample
    after = sorted(p.name for p in tmp_path.iterdir())
    assert set(before) <= set(after)
    assert sorted(VoiceStore(tmp_path).names()) == ["a", "a.sample.x"]


def test_a_foreign_meta_file_cannot_make_delete_remove_a_file_outside(tmp_path: Path) -> None:
    # The rule: names map to files inside the folder, never through a stored path.
    folder, outside = tmp_path / "voices", tmp_path / "precious.txt"
    folder.mkdir()
    outside.write_text("keep me")
    meta = {"name": "evil", "consent": "y", "_file": "../precious.txt"}
    (folder / "evil.meta.json").write_text(json.dumps(meta))
    # A meta file under another key's name claims no voice.
    (folder / "x.meta.json").write_text(json.dumps({**meta, "name": "bob", "_file": "x"}))
    store = VoiceStore(folder)
    assert store.names() == ["evil"]
    store.delete("evil")
    assert outside.read_text() == "keep me"
    store.add("evil", "y", audio=tone_wav(1.0))  # an upload over it: the same
    assert outside.read_text() == "keep me"


def test_a_planted_symlink_is_replaced_not_written_through(tmp_path: Path) -> None:
    folder, target = tmp_path / "voices", tmp_path / "target.txt"
    folder.mkdir()
    target.write_text("keep me")
    (folder / "a.sample.wav").symlink_to(target)
    (folder / "a.meta.json").symlink_to(target)
    store = VoiceStore(folder)
    assert store.names() == []  # a symlinked meta file is not read
    store.add("a", "y", audio=tone_wav(1.0))
    assert target.read_text() == "keep me"
    assert not (folder / "a.sample.wav").is_symlink() and not (folder / "a.meta.json").is_symlink()
    assert VoiceStore(folder).names() == ["a"]


def test_voice_storage_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import thetalker.server.voices as voices

    clip = tone_wav(1.0)
    monkeypatch.setattr(voices, "MAX_TOTAL_BYTES", 2 * len(clip) + 10)
    store = VoiceStore(tmp_path)
    store.add("a", "y", audio=clip)
    store.add("b", "y", audio=clip)
    store.add("b", "y", audio=clip)  # an overwrite frees what it replaces
    with pytest.raises(VoiceError, match="storage is full"):
        store.add("c", "y", audio=clip)
    store.delete("a")
    store.add("c", "y", audio=clip)


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


async def test_stream_headers_go_out_before_the_first_audio(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    import time

    engine = FakeEngine(chars_s=0.01, first_delay_s=0.5)
    client = await aiohttp_client(make_app(engine, voices_dir=tmp_path))
    t0 = time.perf_counter()
    resp = await post_speech(client, **STREAM)  # returns once the status line and headers are in
    t_headers = time.perf_counter() - t0
    assert resp.status == 200
    await resp.content.readany()
    t_audio = time.perf_counter() - t0
    assert t_headers < t_audio / 2  # the 200 did not wait for the engine's first piece
