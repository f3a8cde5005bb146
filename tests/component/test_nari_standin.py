"""The Nari stand-in answers as Nari's real server does, behaviour by behaviour, as
docs/servers/nari.md reads the real server's source ("Behaviours a stand-in easily gets
wrong"). The checklist mapping each behaviour to these tests is in docs/servers/nari.md and
the stand-in's docstring; the client's side of them is in test_nari.py."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.support.nari_standin import MODEL, PROGRAM, Standin, converse, get
from thetalker.lifecycle.launch import free_port

FRAME = 1920 * 2  # one codec frame of s16le samples
START = {"type": "request.start", "model": MODEL, "voice": "ryan", "language": "english"}


def _append(sequence: int, text: str) -> dict:
    return {"type": "input_text.append", "sequence": sequence, "text": text}


@pytest.fixture(scope="module")
def nari(tmp_path_factory) -> Iterator[Standin]:
    server = Standin(tmp_path_factory.mktemp("nari"), {"STANDIN_WARMUP_S": "0"})
    server.wait_ready()
    yield server
    server.stop()


def _error(kind: str, field: str, msg: str, value: object) -> dict:
    return {"type": kind, "loc": ["body", field], "msg": msg, "input": value}


def test_http_schema_errors_are_pydantics(nari: Standin):
    # A JSON int for a float field validates (strict pydantic still takes it).
    status, _ = nari.speech({"input": "Hi", "temperature": 1, "top_p": 1, "speed": 1})
    assert status == 200
    status, answer = nari.speech({"input": "Hi", "seed": 1.0, "top_p": "1", "stream": 1})
    assert status == 422
    # pydantic's words, the fields in the schema's order.
    assert answer["detail"] == [
        _error("bool_type", "stream", "Input should be a valid boolean", 1),
        _error("int_type", "seed", "Input should be a valid integer", 1.0),
        _error("float_type", "top_p", "Input should be a valid number", "1"),
    ]
    # Range errors are field constraints: a list, every error at once, extras last.
    body = {"seed": -1, "max_new_tokens": 0, "response_format": "mp3", "task_type": "x"}
    status, answer = nari.speech(body)
    assert status == 422
    assert [(e["type"], e["loc"][-1]) for e in answer["detail"]] == [
        ("missing", "input"),
        ("literal_error", "response_format"),
        ("greater_than_equal", "seed"),
        ("greater_than_equal", "max_new_tokens"),
        ("extra_forbidden", "task_type"),
    ]
    assert answer["detail"][1]["msg"] == "Input should be 'pcm' or 'wav'"
    # The schema's own bounds are only these (sampling values are the request's check, below).
    status, answer = nari.speech({"input": "Hi", "top_p": 0, "stream_chunk_schedule": [0, "2"]})
    assert [(e["type"], e["loc"]) for e in answer["detail"]] == [
        ("greater_than_equal", ["body", "stream_chunk_schedule", 0]),
        ("int_type", ["body", "stream_chunk_schedule", 1]),
    ]
    assert answer["detail"][0]["ctx"] == {"ge": 1}
    status, answer = nari.speech(b'{"input": ')
    assert status == 422
    assert answer["detail"] == [
        {
            "type": "json_invalid",
            "loc": ["body", 10],
            "msg": "JSON decode error",
            "input": {},
            "ctx": {"error": "Expecting value"},
        },
    ]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"top_p": 1.5}, "top_p must be in (0, 1]"),
        ({"top_p": 0}, "top_p must be in (0, 1]"),
        ({"temperature": -0.5}, "temperature must be non-negative"),
        ({"subtalker_temperature": -1}, "temperature must be non-negative"),
        ({"subtalker_top_p": 2.0}, "subtalker_top_p must be in (0, 1]"),
        ({"repetition_penalty": 0}, "repetition_penalty must be positive"),
        ({"top_k": -1}, "top_k must be at least 0"),
        (b"NaN", "temperature must be finite"),
    ],
    ids=["top_p-1.5", "top_p-0", "temperature", "subtalker-temperature", "subtalker-top_p",
         "repetition_penalty", "top_k", "temperature-nan"],
)  # fmt: skip
def test_out_of_range_sampling_is_a_422_string_from_the_requests_own_check(
    nari: Standin, body: dict | bytes, message: str
):
    # The schema leaves sampling values unbounded; `contract/request.py`'s SynthesisRequest
    # refuses them with a message (issue 45: the stand-in answered pydantic's list).
    if isinstance(body, bytes):  # JSON's NaN, as FastAPI's decoder takes it
        body = b'{"input": "Hi", "temperature": ' + body + b"}"
        assert nari.speech(body) == (422, {"detail": message})
    else:
        assert nari.speech({"input": "Hi", **body}) == (422, {"detail": message})


def test_http_domain_and_engine_refusals_are_422_strings(nari: Standin):
    refused = {
        "unsupported speaker: 'Nobody'": {"input": "Hi", "voice": "Nobody"},
        "text cannot be empty or whitespace": {"input": "  \n"},
        "instruct and instructions cannot disagree": {
            "input": "Hi",
            "instruct": "a",
            "instructions": "b",
        },
        "Qwen3-TTS speed is fixed at 1.0": {"input": "Hi", "speed": 1.5},
        "unsupported model: 'other/model'": {"input": "Hi", "model": "other/model"},
        # The engine's refusals are 422 too: graphs not captured, a prefill past 640 tokens.
        "Talker prefill capture token capacity exceeded": {"input": "word " * 700},
    }
    for message, body in refused.items():
        assert nari.speech(body) == (422, {"detail": message}), body
    status, answer = nari.speech({"input": "Hi", "stream_chunk_frames": 3})
    assert status == 422 and "not captured" in answer["detail"]
    # The same text with the streaming layout prefills one token: served.
    long_text = {"input": "word " * 700, "non_streaming_mode": False, "response_format": "pcm"}
    assert nari.speech(long_text)[0] == 200
    assert nari.speech({"input": "Hi", "voice": " Ryan ", "language": "English"})[0] == 200


def _chunks(nari: Standin, body: dict) -> list[int]:
    status, audio = nari.speech(
        {"input": "one two three", "stream": True, "response_format": "pcm", **body}
    )
    assert status == 200
    entry = nari.entries()[-1]
    assert entry["body"]["input"] == "one two three" and sum(entry["chunks"]) == len(audio)
    return [n // FRAME for n in entry["chunks"]], audio


def test_the_first_chunk_follows_the_request(nari: Standin):
    # Default request: the bootstrap frame is dropped, the suppressed schedule (ttfa: 2, 4, 8, 12).
    frames, audio = _chunks(nari, {})
    assert frames == [2, 4, 6] and any(audio[:FRAME])
    # Instructions, non-default sampling: the silent bootstrap frame leads, schedule 1, 2, 4, 8.
    for body in (
        {"instructions": "calm"},
        {"temperature": 0.5},
        {"skip_fixed_bootstrap_audio": False},
    ):
        frames, audio = _chunks(nari, body)
        assert frames == [1, 2, 4, 6], body
        assert not any(audio[:FRAME]) and any(audio[FRAME : 2 * FRAME])
    # Chunk controls override the schedule (and keep the bootstrap frame).
    assert _chunks(nari, {"stream_chunk_frames": 4})[0] == [4, 4, 4, 1]
    assert _chunks(nari, {"stream_chunk_schedule": [1, 12]})[0] == [1, 12]
    assert _chunks(nari, {"stream_first_chunk_frames": 2})[0] == [2, 11]


def test_a_reader_too_slow_gets_a_cut_body(tmp_path: Path):
    env = {"STANDIN_WARMUP_S": "0", "STANDIN_CHUNK_DELAY_S": "0"}
    server = Standin(tmp_path, env, "ttfa", "--max-buffered-pcm-bytes", "200000")
    try:
        server.wait_ready()
        body = json.dumps(
            {
                "input": "word " * 3000,
                "stream": True,
                "non_streaming_mode": False,
                "response_format": "pcm",
            }
        ).encode()
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a reader that lags
            sock.connect(("127.0.0.1", server.port))
            sock.sendall(
                b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            deadline = time.monotonic() + 60
            while not any(e.get("backpressure") for e in server.entries()):
                assert time.monotonic() < deadline, "the PCM budget was never exceeded"
                time.sleep(0.05)
            received = bytearray()
            sock.settimeout(30)
            while chunk := sock.recv(1 << 20):
                received += chunk
    finally:
        server.stop()
    assert received.startswith(b"HTTP/1.1 200")
    assert not received.endswith(b"\r\n0\r\n\r\n")  # cut: no terminating chunk, no error text
    (last,) = [e for e in server.entries() if "chunks" in e]
    assert last["cut"] and last["why"] == "backpressure"


def test_the_port_opens_only_after_startup_complete(tmp_path: Path):
    out = tmp_path / "out.txt"
    port = free_port()
    argv = [str(PROGRAM), "--profile", "ttfa", "--host", "127.0.0.1", "--port", str(port)]
    with out.open("wb") as fh:
        env = {**_env(), "STANDIN_WARMUP_S": "2"}
        proc = subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while "Building engine..." not in out.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        # Warming up: the port is not open yet (connection refused, never a 503 "starting").
        if "Startup complete." not in out.read_text():
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
        while True:
            try:
                status, body = get(f"http://127.0.0.1:{port}/ready")
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert "Startup complete." in out.read_text()
        assert status == 200 and body["phase"] == "ready" and body["reason"] == "ready"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    # A warm-up that fails never binds: the process exits, no "Startup complete.".
    env = {**_env(), "STANDIN_WARMUP_S": "0", "STANDIN_STARTUP_FAIL": "1"}
    failed = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    assert failed.returncode == 1 and "Startup complete." not in failed.stdout


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("STANDIN_")}


def _startup_line(stdout: str) -> dict:
    (line,) = [x for x in stdout.splitlines() if "qwen3_tts_execution_config" in x]
    return json.loads(line)


def test_the_startup_line_and_argument_checks(tmp_path: Path):
    env = {"STANDIN_WARMUP_S": "0"}
    server = Standin(tmp_path, env, "balanced")
    server.stop()
    event = _startup_line(server.stdout.read_text())
    assert event["source"] == "packaged-profile"
    config = event["config"]
    assert config["codec"]["chunk_schedule"] == [4, 4, 8, 16, 25]
    assert (
        event["sha256"] == hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    )
    overlay = tmp_path / "engine.yaml"
    overlay.write_text("extends: throughput\nworkspace_mib: 256\n")
    server = Standin(tmp_path, env, "ttfa", "--engine-config", str(overlay))
    server.stop()
    event = _startup_line(server.stdout.read_text())
    assert event["source"] == str(overlay)
    assert event["config"]["profile"] == "throughput" and event["config"]["workspace_mib"] == 256
    # `_validate_arguments`: refused at startup, before anything loads.
    for bad in (
        ["--port", "70000"],
        ["--max-active-requests", "0"],
        ["--max-buffered-pcm-bytes", "-1"],
        ["--startup-timeout-seconds", "nan"],
    ):
        result = subprocess.run([str(PROGRAM), *bad], capture_output=True, text=True, timeout=30)
        assert result.returncode == 2 and "Loading model" not in result.stdout, bad
        assert bad[0] in result.stderr


def test_the_trace_is_written_at_a_graceful_shutdown(tmp_path: Path):
    trace = tmp_path / "trace.json"
    server = Standin(tmp_path, {"STANDIN_WARMUP_S": "0"}, "ttfa", "--trace-output", str(trace))
    try:
        server.wait_ready()
        assert server.speech({"input": "Hi there", "response_format": "pcm"})[0] == 200
    finally:
        server.stop()  # SIGTERM: a graceful shutdown
    written = json.loads(trace.read_text())
    assert written["schema"] == "nari_qwen3_tts_server_diagnostic_v1"
    assert written["service_metrics"]["admitted"] == written["service_metrics"]["completed"] == 1
    sha = _startup_line(server.stdout.read_text())["sha256"]
    assert written["execution_config_sha256"] == sha


def test_socket_handshake_and_paths(nari: Standin):
    # Without the subprotocol: accepted, then closed 1002 naming it.
    got = converse(nari.base_url, [], protocols=())
    assert got.close_code == 1002 and got.close_reason == "required subprotocol: nari.speech.v1"
    # Any other path (vllm-omni's socket) fails the handshake: 404.
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        converse(nari.base_url, [], path="/v1/audio/speech/stream")
    assert refused.value.status == 404


def _refusal(got) -> tuple[str | None, int | None, str | None]:
    return got.error_code(), got.close_code, got.close_reason


def test_socket_cancel_and_errors(nari: Standin):
    url = nari.base_url
    got = converse(url, [START, _append(0, "Hello there "), {"type": "response.cancel"}])
    assert got.events[-1]["type"] == "response.done"
    assert got.events[-1]["stop_reason"] == "cancelled" and got.close_code == 1000
    # vllm-omni's first event is unknown here; out of order, twice, binary: invalid_request.
    assert _refusal(converse(url, [{"type": "session.config"}])) == ("unknown_event", 1008, "error")
    assert _refusal(converse(url, [_append(0, "Hi ")]))[:2] == ("invalid_request", 1008)
    assert _refusal(converse(url, [START, START]))[:2] == ("invalid_request", 1008)
    assert _refusal(converse(url, [START, b"\x00\x01"]))[:2] == ("invalid_request", 1008)
    assert _refusal(converse(url, [{**START, "input": "Hi"}]))[:2] == ("invalid_request", 1008)
    both = {**START, "instruction": "calm", "instructions": "calm"}
    got = converse(url, [both])
    assert (
        got.error_code() == "invalid_request"
        and "set only one of" in got.events[-1]["error"]["message"]
    )
    # Sequence: not an integer >= 0 is a schema error; the wrong integer is invalid_sequence.
    assert (
        _refusal(converse(url, [START, {**_append(0, "Hi "), "sequence": "0"}]))[0]
        == "invalid_request"
    )
    assert _refusal(converse(url, [START, _append(1, "Hi ")]))[:2] == ("invalid_sequence", 1008)
    # Limits: a JSON message over 65,536 bytes; 65,536 characters; 1,024 appends.
    assert _refusal(converse(url, [START, _append(0, "a" * 70000)])) == (
        "invalid_request",
        1009,
        "error",
    )
    big = [START, _append(0, "a " * 20000), _append(1, "b " * 20000)]
    assert _refusal(converse(url, big)) == ("input_too_large", 1009, "error")
    many = [{**START, "max_new_tokens": 32768}, *(_append(i, "a ") for i in range(1025))]
    got = converse(url, many)
    assert _refusal(got) == ("too_many_input_events", 1008, "error")
    assert sum(1 for e in got.events if e["type"] == "input_text.ack") == 1024
    assert _refusal(converse(url, [START, _append(0, "Hi <|im_end|> ")]))[0] == "invalid_text"
    assert (
        _refusal(converse(url, [START, {"type": "input_text.end", "sequence": 0}]))[0]
        == "empty_input"
    )
    # Generation over (max_new_tokens reached) before a text update lands: live_input_closed, 1000.
    capped = [{**START, "max_new_tokens": 6}, _append(0, "one two "), _append(1, "three ")]
    got = converse(url, capped)
    assert _refusal(got) == ("live_input_closed", 1000, "error")
    assert got.events[-1]["error"]["type"] == "generation_error"
    # The whole exchange, in order, ending 1000 `response.done`.
    got = converse(
        url,
        [
            START,
            _append(0, "Hello "),
            _append(1, "world"),
            {"type": "input_text.end", "sequence": 2},
        ],
    )
    assert got.kinds()[:2] == ["session.created", "request.configured"]
    assert got.kinds()[-1] == "response.done" and got.events[-1]["stop_reason"] == "stop"
    assert got.events[-1]["audio_chunks"] == len(got.frames)
    assert (got.close_code, got.close_reason) == (1000, "response.done")


def _ws_frame(text: str) -> bytes:
    """One masked client text frame (RFC 6455)."""
    payload = text.encode()
    n = len(payload)
    head = b"\x81" + (
        bytes([0x80 | n])
        if n < 126
        else (bytes([0x80 | 126]) + n.to_bytes(2, "big"))
        if n < 65536
        else (bytes([0x80 | 127]) + n.to_bytes(8, "big"))
    )
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def _ws_frames(data: bytes) -> list[tuple[int, bytes]]:
    """(opcode, payload) of the server's unmasked frames after the 101 response."""
    at, out = data.index(b"\r\n\r\n") + 4, []
    while at + 2 <= len(data):
        opcode, n = data[at] & 0x0F, data[at + 1] & 0x7F
        at += 2
        if n == 126:
            n, at = int.from_bytes(data[at : at + 2], "big"), at + 2
        elif n == 127:
            n, at = int.from_bytes(data[at : at + 8], "big"), at + 8
        if at + n > len(data):
            break  # not all here yet
        out.append((opcode, data[at : at + n]))
        at += n
    return out


def _lagging_socket_session(server: Standin, words: int) -> list[tuple[int, bytes]]:
    """A client that sends a whole utterance and reads nothing until the stand-in logged a
    socket error; then everything it was sent."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", server.port))
        sock.sendall(
            b"GET /v1/audio/speech/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: nari.speech.v1\r\n\r\n"
        )
        for event in ({**START, "max_new_tokens": 32768}, _append(0, "word " * words),
                      {"type": "input_text.end", "sequence": 1}):  # fmt: skip
            sock.sendall(_ws_frame(json.dumps(event)))
        deadline = time.monotonic() + 60
        while not any("socket_error" in e for e in server.entries()):
            assert time.monotonic() < deadline, "no socket error was logged"
            time.sleep(0.05)
        received = bytearray()
        sock.settimeout(30)
        while chunk := sock.recv(1 << 20):  # up to the close frame (no close reply sent)
            received += chunk
            maybe_closed = b"\x88" in received[-64:]  # a close frame's first byte, cheap
            if maybe_closed and any(op == 8 for op, _ in _ws_frames(bytes(received))):
                break
    return _ws_frames(bytes(received))


def test_a_socket_reader_too_slow_gets_backpressure_1011(tmp_path: Path):
    # Unread PCM past the budget, and (a budget too large to matter) the 32-frame send
    # queue full for 5 s: an `error` event `backpressure`, then close 1011.
    for budget in ("200000", str(1 << 30)):
        env = {"STANDIN_WARMUP_S": "0", "STANDIN_CHUNK_DELAY_S": "0"}
        server = Standin(tmp_path, env, "ttfa", "--max-buffered-pcm-bytes", budget)
        try:
            server.wait_ready()
            frames = _lagging_socket_session(server, 3000)
        finally:
            server.stop()
        errors = [json.loads(p) for op, p in frames if op == 1 and b'"error"' in p]
        assert [e["error"]["code"] for e in errors] == ["backpressure"], budget
        (close,) = [p for op, p in frames if op == 8]
        assert int.from_bytes(close[:2], "big") == 1011 and close[2:] == b"error"
