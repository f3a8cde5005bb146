"""The local server's `/v1/audio/speech/stream` (0.30.0's WebSocket): in-process over
`FakeEngine` for the protocol, and the real Piper server driven by the agent-mode client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.server_fixtures import LocalServer
from tests.support.server_fixtures import local_server as local_server  # the fixture
from thetalker.client import BenchOptions, run_benchmark
from thetalker.data.prompts import Prompt
from thetalker.data.record_reads import read_records
from thetalker.server.app import make_app
from thetalker.server.engine import FakeEngine
from thetalker.server.units import UnitSplitter
from thetalker.server.ws import parse_session_config

CONFIG = {"type": "session.config", "voice": "joe", "response_format": "pcm", "stream_audio": True}


@pytest.fixture
async def client(aiohttp_client: Any, tmp_path: Path) -> Any:
    app = make_app(FakeEngine(workers=1, chars_s=0.01), voices_dir=tmp_path / "voices")
    return await aiohttp_client(app)


async def converse(
    ws: aiohttp.ClientWebSocketResponse, *messages: dict, until: str = "session.done"
) -> list[Any]:
    """Send the messages, then read until an `until` event or the socket closes."""
    for m in messages:
        await ws.send_json(m)
    out: list[Any] = []
    async for msg in ws:
        if msg.type == aiohttp.WSMsgType.BINARY:
            out.append(len(msg.data))
        else:
            out.append(json.loads(msg.data))
            if out[-1]["type"] == until:
                break
    return out


def types(out: list[Any]) -> list[str]:
    return [m["type"] if isinstance(m, dict) else "bytes" for m in out]


async def test_sentences_are_answered_as_they_complete(client: Any) -> None:
    async with client.ws_connect("/v1/audio/speech/stream") as ws:
        config = {**CONFIG, "split_granularity": "sentence"}
        text = {"type": "input.text", "text": "Hello there. And"}
        # The first sentence is answered before the text goes on.
        first = await converse(ws, config, text, until="audio.done")
        assert first[0]["sentence_text"] == "Hello there." and first[-1]["sentence_index"] == 0
        out = await converse(
            ws, {"type": "input.text", "text": " more words"}, {"type": "input.done"}
        )
    out = first + out
    starts = [m for m in out if isinstance(m, dict) and m["type"] == "audio.start"]
    assert [s["sentence_text"] for s in starts] == ["Hello there.", "And more words"]
    assert all(s["sample_rate"] == 24000 and s["format"] == "pcm" for s in starts)
    assert types(out)[-1] == "session.done"
    assert out[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 2}
    dones = [m for m in out if isinstance(m, dict) and m["type"] == "audio.done"]
    sizes = [m for m in out if isinstance(m, int)]
    assert sum(d["total_bytes"] for d in dones) == sum(sizes) > 0
    assert not any(d["error"] for d in dones)


async def test_none_waits_for_input_done_and_the_connection_stays(client: Any) -> None:
    async with client.ws_connect("/v1/audio/speech/stream") as ws:
        out = await converse(
            ws,
            CONFIG,
            {"type": "input.text", "text": "One. Two, three."},
            {"type": "input.done"},
        )
        assert types(out)[0] == "audio.start" and out[0]["sentence_text"] == "One. Two, three."
        again = await converse(ws, {"type": "input.text", "text": "Four."}, {"type": "input.done"})
        assert again[-1]["utterance_index"] == 1
        await ws.send_json({"type": "session.close"})
        msg = await ws.receive()
        assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)


async def test_whole_file_per_unit_without_stream_audio(client: Any) -> None:
    async with client.ws_connect("/v1/audio/speech/stream") as ws:
        config = {"type": "session.config", "voice": "joe"}  # 0.30.0's default: wav
        out = await converse(
            ws, config, {"type": "input.text", "text": "Hi."}, {"type": "input.done"}
        )
    assert types(out) == ["audio.start", "bytes", "audio.done", "session.done"]
    assert "sample_rate" not in out[0] and out[0]["format"] == "wav"
    assert out[2]["total_bytes"] == out[1]


@pytest.mark.parametrize(
    "config, message",
    [
        ({"stream_audio": True, "response_format": "wav"}, "requires response_format='pcm'"),
        ({"split_granularity": "word"}, "split_granularity"),
        ({"model": "nope"}, "The model `nope` does not exist."),
        ({"speed": 9}, "speed"),
    ],
)
async def test_a_refused_config_ends_the_connection(
    client: Any, config: dict, message: str
) -> None:
    async with client.ws_connect("/v1/audio/speech/stream") as ws:
        await ws.send_json({"type": "session.config", **config})
        msg = await ws.receive()
        error = json.loads(msg.data)
        assert error["type"] == "error" and message in error["message"]
        assert error["message"].startswith(("Invalid session config", "The model"))
        assert (await ws.receive()).type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)


async def test_text_before_config_is_refused(client: Any) -> None:
    async with client.ws_connect("/v1/audio/speech/stream") as ws:
        await ws.send_json({"type": "input.text", "text": "hi"})
        error = json.loads((await ws.receive()).data)
        assert error == {"type": "error", "message": "Expected session.config, got: input.text"}


async def test_a_bad_voice_fails_its_unit_and_the_session_goes_on(client: Any) -> None:
    async with client.ws_connect("/v1/audio/speech/stream") as ws:
        out = await converse(
            ws,
            {**CONFIG, "voice": "nobody"},
            {"type": "input.text", "text": "Hi."},
            {"type": "unknown.kind"},
            {"type": "input.done"},
        )
    assert types(out) == ["error", "audio.start", "error", "audio.done", "session.done"]
    assert out[0]["message"] == "Unknown message type: unknown.kind"
    assert out[2]["message"].startswith(
        "Generation failed for utterance 0, sentence 0: Invalid voice"
    )
    assert out[3]["error"] is True and out[3]["total_bytes"] == 0


async def test_an_engine_failure_mid_unit_is_partial_audio(aiohttp_client: Any, tmp_path: Path):
    engine = FakeEngine(workers=1, chars_s=0.01, fail_after=1)
    client = await aiohttp_client(make_app(engine, voices_dir=tmp_path / "v"))
    async with client.ws_connect("/v1/audio/speech/stream") as ws:
        out = await converse(
            ws, CONFIG, {"type": "input.text", "text": "One. Two."}, {"type": "input.done"}
        )
    assert types(out) == ["audio.start", "bytes", "error", "audio.done", "session.done"]
    assert out[2]["partial_audio"] is True and out[2]["action"] == "discard"
    assert out[3]["error"] is True and out[3]["total_bytes"] == out[1]


def test_units_follow_0300s_splitter_rules() -> None:
    s = UnitSplitter("sentence")
    got = []
    for piece in ["Dr.", " Who", " paid", " 3.50.", " Then", " left!", " Wait..."]:
        got += s.feed(piece)
    assert got == ["Dr. Who paid 3.50.", "Then left!"]
    assert s.flush() == ["Wait..."]
    assert UnitSplitter("clause").feed("a, b; c") == ["a,", "b;"]
    assert UnitSplitter("none").feed("A. B. ") == []


def test_session_config_becomes_a_speech_body() -> None:
    config = parse_session_config({**CONFIG, "speaker": "x", "model": "m", "seed": 3})
    assert config.body == {
        "model": "m",
        "seed": 3,
        "voice": "joe",
        "response_format": "pcm",
        "speed": 1.0,
        "stream_format": "audio",
    }
    assert config.split_granularity == "none" and config.stream_audio


def test_the_agent_client_against_real_piper(local_server: LocalServer, tmp_path: Path) -> None:
    prompts = [
        Prompt("a", "The quick brown fox jumps. Over the lazy dog, twice."),
        Prompt("b", "A voice agent speaks while it thinks. It should not pause."),
    ]
    opts = BenchOptions(
        base_url=local_server.base_url,
        protocol="websocket",
        speaker="joe",
        requests=2,
        warmup=1,
        text_pace=40.0,
        text_pace_unit="tokens",
        concurrency=2,
        save_audio_dir=str(tmp_path / "audio"),
    )
    summary = run_benchmark(opts, prompts, tmp_path)
    records = [r for r in read_records(tmp_path / "records.jsonl") if not r["warmup"]]
    assert summary["n_ok"] == 2, [r["error"] for r in records]
    # The rate is the probe's (Piper's 22050), not audio.start's nominal 24000.
    assert summary["sample_rate"] == 22050
    for r in records:
        starts = [e for e in r["server_events"] if e["type"] == "audio.start"]
        assert len(starts) == 2 and len(r["sentence_lag_s"]) == 2
        assert " ".join(s["sentence_text"] for s in starts) == r["text"]
        assert r["audio_s"] > 1.0 and r["ttfa_first_text_s"] > 0
        assert (tmp_path / r["audio_path"]).is_file()
