"""`tests/standins/vllm-omni` answers HTTP as 0.30.0 does: the same requests to the stand-in
and to 0.30.0's real layer, status and body shape compared (vllm-omni-030.md rows 8-14)."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from tests.contract.conftest import REPO, clear_uploaded_voices
from tests.contract.helpers import REF_TEXT
from tests.support.http_chunks import read_server_chunks
from thetalker.client.body import build_request_body
from thetalker.client.options import BenchOptions
from thetalker.data.wavio import write_wav
from thetalker.lifecycle.deploy import resolve

STANDIN = REPO / "tests" / "standins" / "vllm-omni"
QWEN = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def standin_factory(tmp_path_factory) -> Iterator[Callable[[str], int]]:
    """Start the stand-in serving one deploy (by name); its port. All stop with the module."""
    procs: list[subprocess.Popen] = []

    def start(deploy: str) -> int:
        entry = resolve(deploy)
        port = free_port()
        voices = tmp_path_factory.mktemp("standin-speakers")
        env = {**os.environ, "SPEAKER_SAMPLES_DIR": str(voices)}
        cmd = [sys.executable, str(STANDIN), "serve", entry.model_id, "--omni"]
        cmd += ["--trust-remote-code", "--host", "127.0.0.1", "--port", str(port)]
        cmd += ["--deploy-config", str(entry.path)]
        procs.append(
            subprocess.Popen(
                cmd,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return port
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"the stand-in for {deploy} did not listen in 60 s")

    yield start
    for proc in procs:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def pair(server_factory, standin_factory):
    """(stand-in port, real-layer port), both serving the Qwen3 CustomVoice deploy."""
    real = server_factory(QWEN, resolve("qwen3tts17b").path)
    clear_uploaded_voices(real.base_url)  # a session-wide server: start from no uploads
    return standin_factory("qwen3tts17b"), real.port


def call(port: int, method: str, path: str, body: bytes | None = None, ctype: str | None = None):
    """(status, content type, chunks): one HTTP exchange; a cut body ends the chunk list."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": ctype} if ctype else {}
    conn.request(method, path, body=body, headers=headers)
    resp = conn.getresponse()
    data, cut = b"", False
    try:
        data = resp.read()
    except http.client.IncompleteRead as exc:
        data, cut = exc.partial, True
    conn.close()
    return resp.status, resp.getheader("Content-Type", ""), data, cut


def speech(port: int, body: dict):
    return call(port, "POST", "/v1/audio/speech", json.dumps(body).encode(), "application/json")


def shape(data: bytes) -> dict:
    """What a client reads from a JSON error: its keys, type, param and code."""
    body = json.loads(data)
    error = body.get("error")
    if not isinstance(error, dict):
        return {"keys": sorted(body)}
    return {k: error[k] for k in ("type", "param", "code")} | {"keys": sorted(error)}


def sse_events(data: bytes) -> list[tuple[str, dict]]:
    events = []
    for block in data.decode().split("\n\n"):
        if block.strip():
            lines = dict(line.split(": ", 1) for line in block.splitlines())
            events.append((lines["event"], json.loads(lines["data"])))
    return events


BASE = {"input": "Hello there, a sentence.", "speaker": "ryan", "response_format": "pcm"}


@pytest.mark.parametrize(
    ("label", "body"),
    [
        ("unknown voice", {**BASE, "speaker": "joe", "stream": True, "stream_format": "audio"}),
        ("wrong model", {**BASE, "model": "nope", "stream": True, "stream_format": "audio"}),
        ("empty input", {**BASE, "input": "  ", "stream": True, "stream_format": "audio"}),
        ("bad format", {**BASE, "response_format": "ogg"}),
        ("mp3 streamed", {**BASE, "response_format": "mp3", "stream": True}),
        ("bad stream format", {**BASE, "stream_format": "chunks"}),
    ],
)
def test_refusals_have_0_30s_status_type_and_param(pair, label, body):
    standin, real = pair
    s_status, _, s_data, _ = speech(standin, body)
    r_status, _, r_data, _ = speech(real, body)
    assert s_status == r_status, label
    assert shape(s_data) == shape(r_data), label


def test_a_non_json_content_type_is_a_400(pair):
    standin, real = pair
    answers = [call(p, "POST", "/v1/audio/speech", b"input=hi", "text/plain") for p in pair]
    assert answers[0][0] == answers[1][0] == 400
    assert shape(answers[0][2]) == shape(answers[1][2])


@pytest.mark.parametrize(
    ("stream", "stream_format", "ctype"),
    [
        (True, "audio", "audio/pcm"),
        (False, "audio", "audio/pcm"),  # stream_format audio streams whatever stream says
        (True, None, "text/event-stream"),  # stream alone means SSE
        (False, "sse", "text/event-stream"),
        (False, None, "audio/pcm"),  # one whole file
    ],
)
def test_stream_choice_and_content_type(pair, stream, stream_format, ctype):
    body = {**BASE, "stream": stream}
    if stream_format:
        body["stream_format"] = stream_format
    for port in pair:
        status, got, data, cut = speech(port, body)
        assert status == 200 and got.startswith(ctype) and not cut, (port, got)
    s_type, r_type = speech(pair[0], body)[1], speech(pair[1], body)[1]
    assert s_type == r_type


def test_sse_events_and_usage_have_0_30s_shape(pair):
    body = {**BASE, "stream": True, "stream_format": "sse", "response_format": "wav"}
    s_events, r_events = (sse_events(speech(p, body)[2]) for p in pair)
    assert [e for e, _ in s_events][-1] == [e for e, _ in r_events][-1] == "speech.audio.done"
    assert {e for e, _ in s_events} == {e for e, _ in r_events}
    # With wav, the first delta carries only the 44-byte header.
    for events in (s_events, r_events):
        assert len(base64.b64decode(events[0][1]["audio"])) == 44
        assert sorted(events[0][1]) == ["audio", "response_format", "type"]
    assert sorted(s_events[-1][1]["usage"]) == sorted(r_events[-1][1]["usage"])
    s_details = s_events[-1][1]["usage"]["input_token_details"]
    assert sorted(s_details) == sorted(r_events[-1][1]["usage"]["input_token_details"])


@pytest.mark.parametrize("after", [0, 1])
def test_an_engine_failure_after_the_200(pair, after):
    text = f"This one fails. [fail-after={after}]"
    raw = {**BASE, "input": text, "stream": True, "stream_format": "audio"}
    for port in pair:
        status, _, _, cut = speech(port, raw)
        assert status == 200 and cut, "a raw body is cut, never a JSON 500"
    sse = {**raw, "stream_format": "sse"}
    answers = [sse_events(speech(p, sse)[2]) for p in pair]
    for events in answers:
        name, payload = events[-1]
        assert name == "speech.audio.error"
        assert payload["error"]["type"] == "server_error" and payload["error"]["code"] == 500
    assert sorted(answers[0][-1][1]["error"]) == sorted(answers[1][-1][1]["error"])


def test_voices_bodies_match(pair, tmp_path):
    clip = tmp_path / "ref.wav"
    t = np.arange(24000 * 2) / 24000
    write_wav(clip, (0.3 * np.sin(2 * np.pi * 200 * t) * 32767).astype("<i2").tobytes(), 24000)

    def upload(port: int, name: str):
        boundary = uuid.uuid4().hex
        parts = [
            f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
            for k, v in (("name", name), ("consent", "yes"), ("ref_text", "hello"))
        ]
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="audio_sample"; '
            f'filename="ref.wav"\r\nContent-Type: audio/wav\r\n\r\n'.encode()
            + clip.read_bytes()
            + b"\r\n"
        )
        parts.append(f"--{boundary}--\r\n".encode())
        ctype = f"multipart/form-data; boundary={boundary}"
        return call(port, "POST", "/v1/audio/voices", b"".join(parts), ctype)

    made = [upload(p, "  Guest ") for p in pair]
    assert made[0][0] == made[1][0] == 200
    s_voice, r_voice = (json.loads(m[2])["voice"] for m in made)
    assert sorted(s_voice) == sorted(r_voice) and s_voice["name"] == r_voice["name"] == "Guest"
    listed = [json.loads(call(p, "GET", "/v1/audio/voices")[2]) for p in pair]
    assert listed[0]["voices"] == listed[1]["voices"]
    assert sorted(listed[0]["uploaded_voices"][0]) == sorted(listed[1]["uploaded_voices"][0])
    reserved = [upload(p, "Ryan") for p in pair]
    assert reserved[0][0] == reserved[1][0] == 400
    assert json.loads(reserved[0][2]) == json.loads(reserved[1][2])
    for _ in range(2):  # deleted, then not found
        gone = [call(p, "DELETE", "/v1/audio/voices/Guest") for p in pair]
        assert gone[0][0] == gone[1][0]
        assert json.loads(gone[0][2]) == json.loads(gone[1][2])


def test_the_stand_in_is_executable():
    assert os.access(STANDIN, os.X_OK) and Path(STANDIN).read_text().startswith("#!")


# --- the routes every launch and every run uses --------------------------------------------


def test_health_and_models_answer_as_0_30_0_does(pair):
    """/health (the launcher polls it) and /v1/models (the client's model check)."""
    standin, real = pair
    s_status, _, _, _ = call(standin, "GET", "/health")
    r_status, _, _, _ = call(real, "GET", "/health")
    assert s_status == r_status == 200
    s_models, r_models = (json.loads(call(p, "GET", "/v1/models")[2]) for p in pair)
    assert s_models["object"] == r_models["object"] == "list"
    assert [m["id"] for m in s_models["data"]] == [m["id"] for m in r_models["data"]] == [QWEN]
    # Nothing the stand-in says is missing from the real answer.
    assert set(s_models["data"][0]) <= set(r_models["data"][0])
    unknown = [call(p, "GET", "/v1/nothing-here") for p in pair]
    assert unknown[0][0] == unknown[1][0] == 404


# --- each served model's chunk plan, with the body the client sends for it -------------------

LONG_TEXT = (
    "This sentence is long enough for every model to send its first chunk, then at least one "
    "chunk of its steady size, and then whatever is left over at the very end of it all, so "
    "the plan shows."
)


def _clip_uri(tmp: Path) -> tuple[Path, str]:
    clip = tmp / "ref.wav"
    t = np.arange(24000 * 2) / 24000
    write_wav(clip, (0.3 * np.sin(2 * np.pi * 200 * t) * 32767).astype("<i2").tobytes(), 24000)
    return clip, "data:audio/wav;base64," + base64.b64encode(clip.read_bytes()).decode()


def _body(deploy: str, clip: Path, uri: str) -> dict:
    """The body `thetalker-bench` sends for this deploy's voice mode (raw PCM stream)."""
    entry = resolve(deploy)
    if entry.voice_mode == "speaker":
        opts = BenchOptions(task_type=entry.task_type, speaker=entry.speaker)
        return build_request_body(opts, LONG_TEXT)
    if entry.voice_mode == "inline":
        opts = BenchOptions(task_type="Base", ref_audio=str(clip), ref_text=REF_TEXT, speaker=None)
        return build_request_body(opts, LONG_TEXT, uri)
    opts = BenchOptions(task_type="Base", voice="ref", speaker=None)  # registered first
    return build_request_body(opts, LONG_TEXT)


def _register(port: int, clip: Path) -> int:
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in (("name", "ref"), ("consent", "yes"), ("ref_text", REF_TEXT))
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="audio_sample"; '
        f'filename="ref.wav"\r\nContent-Type: audio/wav\r\n\r\n'.encode()
        + clip.read_bytes()
        + b"\r\n"
    )
    parts.append(f"--{boundary}--\r\n".encode())
    ctype = f"multipart/form-data; boundary={boundary}"
    return call(port, "POST", "/v1/audio/voices", b"".join(parts), ctype)[0]


async def _chunks(port: int, body: dict) -> tuple[int, str, list[int]]:
    """(status, content type, bytes of each HTTP chunk) of one speech request."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"http://127.0.0.1:{port}/v1/audio/speech", json=body) as resp,
    ):
        return resp.status, resp.content_type, [len(c) for c in await read_server_chunks(resp)]


def plan_shape(sizes: list[int]) -> tuple[int, ...]:
    """What a chunk plan looks like whatever the utterance's length: one body, or the first
    chunk and the steady size after it (the last chunk holds what is left)."""
    return (sizes[0],) if len(sizes) == 1 else (sizes[0], *sorted(set(sizes[1:-1])))


@pytest.mark.parametrize("deploy", ["qwen3tts17b", "qwen3tts06b", "voxcpm2", "moss", "omnivoice"])
def test_each_models_chunk_plan_matches_0_30_0(server_factory, standin_factory, deploy, tmp_path):
    entry = resolve(deploy)
    real = server_factory(entry.model_id, entry.path)
    standin = standin_factory(deploy)
    clip, uri = _clip_uri(tmp_path)
    if entry.voice_mode == "registered":
        clear_uploaded_voices(real.base_url)
        assert _register(standin, clip) == _register(real.port, clip) == 200
    body = _body(deploy, clip, uri)
    try:
        s_status, s_type, s_sizes = asyncio.run(_chunks(standin, body))
        r_status, r_type, r_sizes = asyncio.run(_chunks(real.port, body))
    finally:
        if entry.voice_mode == "registered":
            clear_uploaded_voices(real.base_url)
    assert s_status == r_status == 200, (s_status, r_status)
    assert s_type == r_type
    if len(r_sizes) == 1:  # one body (its length is the utterance's): one body here too
        assert len(s_sizes) == 1, s_sizes
    else:
        assert plan_shape(s_sizes) == plan_shape(r_sizes), (s_sizes, r_sizes)


# --- the WebSocket route of the agent mode ---------------------------------------------------

WS_PIECES = (
    "Hello there. ",
    "This is a second sentence, with a clause",
    " in it. And a third one that fails [fail-after=1].",
)


async def _ws_session(port: int) -> list[tuple]:
    """One agent-mode session as thetalker's client runs it; what came back, in order: JSON
    messages as (type, sorted keys, their identifying fields), audio as ("audio", bytes)."""
    url = f"http://127.0.0.1:{port}/v1/audio/speech/stream"
    config = {"type": "session.config", "model": QWEN, "voice": "ryan", "language": "English"}
    config.update(response_format="pcm", stream_audio=True, split_granularity="sentence")
    got: list[tuple] = []
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
        await ws.send_json(config)
        for piece in WS_PIECES:
            await ws.send_json({"type": "input.text", "text": piece})
        await ws.send_json({"type": "input.done"})
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.BINARY:
                got.append(("audio", len(msg.data)))
                continue
            data = json.loads(msg.data)
            fields = {k: data[k] for k in ("utterance_index", "sentence_index") if k in data}
            fields |= {k: data[k] for k in ("sentence_text", "format", "sample_rate", "error")
                       if k in data}  # fmt: skip
            if data["type"] == "error":
                fields["message"] = data["message"].split(":", 1)[0]  # the engine's words differ
                fields["partial_audio"] = data.get("partial_audio")
            identity = (data["type"], tuple(sorted(data)), tuple(sorted(fields.items())))
            got.append((*identity, data.get("total_bytes")))
            if data["type"] == "session.done":
                break
        await ws.send_json({"type": "session.close"})
        closing = await ws.receive()
        got.append(("closed", closing.type == aiohttp.WSMsgType.CLOSE))
    return got


def _without_audio_sizes(got: list[tuple]) -> list[tuple]:
    """The messages with each run of audio frames as one ("audio",): the number and sizes
    of frames follow the utterance's length, which each engine sets its own way."""
    out: list[tuple] = []
    for item in got:
        if item[0] == "audio":
            if not out or out[-1] != ("audio",):
                out.append(("audio",))
        else:
            out.append(item[:3])
    return out


def test_websocket_session_matches_0_30_0(pair):
    standin, real = pair
    s_got, r_got = (asyncio.run(_ws_session(p)) for p in pair)
    assert _without_audio_sizes(s_got) == _without_audio_sizes(r_got)
    # And in each, every audio.done counts the bytes of the frames before it.
    for got in (s_got, r_got):
        frames = 0
        for item in got:
            if item[0] == "audio":
                frames += item[1]
            elif item[0] == "audio.done":
                assert item[3] == frames > 0, got
                frames = 0
    assert ("closed", True) in s_got
