"""Every socket has a deadline for progress, both ways, and load beyond what the server can
hold is shed with a logged 503, not silence: the embedded server (in process, loopback) and
the agent client. Each test asserts states (aborted, closed, refused, logged), never a time.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.ws_scripted_server import WsScript, start_ws_scripted_server
from thetalker.client import BenchOptions, run_benchmark
from thetalker.client import websocket as client_ws
from thetalker.data.prompts import Prompt
from thetalker.data.record_reads import read_records
from thetalker.server.app import make_app
from thetalker.server.engine import FakeEngine
from thetalker.server.guard import ServerLimits

CONFIG = {"type": "session.config", "voice": "joe", "response_format": "pcm", "stream_audio": True}
# About 7 MB of audio from the fake engine: more than loopback's socket buffers hold.
LONG_TEXT = " ".join(f"Sentence number {i} is here." for i in range(150))


async def serve(aiohttp_client: Any, tmp_path: Path, **limits: Any) -> Any:
    engine = FakeEngine(workers=2, chars_s=0.05, first_delay_s=0.0, sentence_delay_s=0.0)
    app = make_app(engine, voices_dir=tmp_path / "voices", limits=ServerLimits(**limits))
    return await aiohttp_client(app)


async def wait_no_connections(client: Any, what: str) -> None:
    """Poll (bounded) until the server holds no connection: the stuck one was let go."""
    for _ in range(300):
        if not client.server.runner.server.connections:
            return
        await asyncio.sleep(0.1)
    pytest.fail(f"the server still holds the connection of {what}")


async def test_an_http_reader_that_stops_reading_is_aborted_and_logged(
    aiohttp_client: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = await serve(aiohttp_client, tmp_path, write_timeout_s=0.5)
    caplog.set_level(logging.WARNING, "thetalker.server")
    body = json.dumps(
        {"input": LONG_TEXT, "voice": "joe", "response_format": "pcm", "stream": True}
    )
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    sock.connect(("127.0.0.1", client.port))
    try:
        request = (
            f"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n{body}"
        )
        sock.sendall(request.encode())
        for _ in range(300):  # accepted and being served
            if client.server.runner.server.connections:
                break
            await asyncio.sleep(0.05)
        await wait_no_connections(client, "a client that stopped reading")  # never reads
        assert "connection aborted" in caplog.text
    finally:
        sock.close()


async def test_a_websocket_client_that_stops_reading_is_aborted_and_logged(
    aiohttp_client: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = await serve(aiohttp_client, tmp_path, write_timeout_s=0.5)
    caplog.set_level(logging.WARNING, "thetalker.server")
    ws = await client.ws_connect("/v1/audio/speech/stream", max_msg_size=0)
    await ws.send_json(CONFIG)
    await ws.send_json({"type": "input.text", "text": LONG_TEXT})
    await ws.send_json({"type": "input.done"})
    try:
        await wait_no_connections(client, "a WebSocket client that stopped reading")
        assert "WebSocket client stopped reading" in caplog.text
    finally:
        ws._response.connection and ws._response.connection.transport.abort()  # noqa: SLF001


async def test_a_trickle_of_text_cannot_keep_an_utterance_open_forever(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client = await serve(aiohttp_client, tmp_path, utterance_timeout_s=1.0)
    ws = await client.ws_connect("/v1/audio/speech/stream")
    await ws.send_json(CONFIG)
    messages: list[dict] = []

    async def trickle() -> None:
        for _ in range(100):  # one character at a time, never input.done
            await ws.send_json({"type": "input.text", "text": "a"})
            await asyncio.sleep(0.1)

    sender = asyncio.create_task(trickle())
    try:
        async with asyncio.timeout(20):  # a bound on the test, not a figure it checks
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    messages.append(msg.json())
    finally:
        sender.cancel()
    assert ws.closed
    assert any(
        "Utterance timeout: no input.done within 1 s" in m.get("message", "") for m in messages
    )


async def test_connections_past_the_cap_get_a_logged_503_and_health_answers(
    aiohttp_client: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = await serve(aiohttp_client, tmp_path, max_connections=3)
    caplog.set_level(logging.WARNING, "thetalker.server")
    held = [await client.ws_connect("/v1/audio/speech/stream") for _ in range(3)]
    for ws in held:
        await ws.send_json(CONFIG)
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.ws_connect("/v1/audio/speech/stream")
    assert refused.value.status == 503
    resp = await client.get("/health")
    assert resp.status == 200
    assert "shedding load: 4 connections open, more than 3" in caplog.text
    for ws in held:
        await ws.close()


async def test_a_burst_past_the_cap_is_served_up_to_the_cap_not_refused_whole(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    # Six connections opened at once against a cap of 3, then a request on each: the first
    # three requests are served, the other three refused. Judged by the count open, every
    # one of them saw six connections and the burst was refused whole.
    client = await serve(aiohttp_client, tmp_path, max_connections=3)
    conns = [await asyncio.open_connection("127.0.0.1", client.port) for _ in range(6)]
    for _ in range(300):  # all six accepted before any request (bounded)
        if len(client.server.runner.server.connections) == 6:
            break
        await asyncio.sleep(0.02)
    statuses = []
    try:
        for _reader, writer in conns:
            writer.write(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
        for reader, _writer in conns:
            line = await asyncio.wait_for(reader.readline(), 30)
            statuses.append(int(line.split()[1]))
    finally:
        for _reader, writer in conns:
            writer.close()
    assert sorted(statuses) == [200, 200, 200, 503, 503, 503]


def _one_agent_request(script: WsScript, tmp_path: Path) -> dict[str, Any]:
    """The record of one request over the agent socket to a server playing `script`."""
    with start_ws_scripted_server(script) as server:
        opts = BenchOptions(
            base_url=server.base_url, protocol="websocket", speaker="ok", sample_rate=24000,
            requests=1, warmup=0, text_pace=200.0, timeout_s=20.0,
        )  # fmt: skip
        run_benchmark(opts, [Prompt("s1", "One sentence.")], tmp_path)
    (rec,) = read_records(tmp_path / "records.jsonl")
    return rec


def test_an_agent_session_past_the_byte_bound_fails_too_large(tmp_path: Path, monkeypatch) -> None:
    # Frames each under the frame bound still add up: a session is bounded as a whole, as an
    # HTTP response is (64 MiB; 100 kB here, the same code).
    monkeypatch.setattr(client_ws, "MAX_SESSION_BYTES", 100_000)
    rec = _one_agent_request(WsScript(frames=10, frame_bytes=48_000), tmp_path)
    assert not rec["ok"] and rec["error"]["type"] == "too_large"
    assert sum(rec["chunk_bytes"]) <= 100_000


def test_the_agent_client_refuses_a_frame_past_its_bound(tmp_path: Path, monkeypatch) -> None:
    # The client bounds a frame (MAX_FRAME_BYTES) instead of buffering whatever comes.
    monkeypatch.setattr(client_ws, "MAX_FRAME_BYTES", 1 << 20)
    rec = _one_agent_request(WsScript(frames=1, frame_bytes=2 << 20), tmp_path)
    assert not rec["ok"] and rec["error"]["type"] == "closed_early"


def test_an_empty_frame_on_the_agent_socket_is_no_audio(tmp_path: Path) -> None:
    # A frame with no bytes is not audio (the HTTP path skips empty pieces too): it sets no
    # first byte and is no chunk. Nari's socket shares the rule (test_nari.py).
    script = WsScript(frames=2, frame_bytes=4800, frame_gap_s=0.2, empty_frames=3)
    rec = _one_agent_request(script, tmp_path)
    assert rec["ok"], rec["error"]
    assert rec["chunk_bytes"] == [4800, 4800]
    # The first audio came a frame gap (0.2 s) after the empty frames, not with them.
    assert rec["ttfa_s"] >= 0.2


# --- one server event Python's JSON cannot take fails its own session, nothing more ----------

_DEEP = "[" * 200_000 + "]" * 200_000
HOSTILE_EVENTS = {
    # read on the receive loop (it may be the session's error): ended the run in an
    # ExceptionGroup, that request unrecorded
    "nested_200k_deep_error": '{"type": "error", "message": ' + _DEEP + "}",
    # read when the record is built: ended the point with "writing records failed"
    "integer_of_5000_digits": '{"type": "audio.progress", "n": ' + "7" * 5000 + "}",
}


@pytest.mark.parametrize("name", list(HOSTILE_EVENTS))
def test_an_agent_event_json_cannot_take_fails_its_session_and_keeps_the_others(
    tmp_path: Path, name: str
) -> None:
    script = WsScript(frames=2, frame_bytes=4800, frame_gap_s=0.01, raw_event=HOSTILE_EVENTS[name])
    prompts = [Prompt("bad", "A hostile sentence."), Prompt("good", "A fine sentence.")]
    with start_ws_scripted_server(script) as server:
        opts = BenchOptions(
            base_url=server.base_url, protocol="websocket", speaker="ok", sample_rate=24000,
            requests=2, warmup=0, concurrency=2, text_pace=200.0, timeout_s=20.0,
        )  # fmt: skip
        run_benchmark(opts, prompts, tmp_path)
    by_id = {r["sample_id"]: r for r in read_records(tmp_path / "records.jsonl")}
    assert set(by_id) == {"bad", "good"}
    assert by_id["good"]["ok"], by_id["good"]["error"]
    bad = by_id["bad"]
    assert not bad["ok"] and bad["error"]["type"] == "bad_event", bad["error"]
    assert len(bad["error"]["message"]) <= 200  # a short reason, not the event


def test_empty_text_frames_past_the_event_bound_fail_too_large(tmp_path: Path, monkeypatch) -> None:
    # Empty text frames weigh 0 bytes against MAX_SESSION_BYTES, yet each is held (3.55 M of
    # them in 10 s: 1.8 GB). A session is bounded by its messages too (100 here, same code).
    monkeypatch.setattr(client_ws, "MAX_SESSION_MESSAGES", 100)
    rec = _one_agent_request(WsScript(frames=2, frame_bytes=4800, empty_events=500), tmp_path)
    assert not rec["ok"] and rec["error"]["type"] == "too_large", rec["error"]
    assert "100 messages" in rec["error"]["message"]
    assert len(rec["server_events"]) <= 100
