"""A scripted, fault-injecting stand-in for a streaming speech server.

One server for every test of the project: it speaks the parts of the speech API the client
uses (`POST /v1/audio/speech`, `/v1/audio/voices`, `/health`, `/v1/models`) and, per
request, follows a `Script`: chunks of set sizes sent at set times, each its own HTTP chunk,
or one of the failures a real server shows (an HTTP error with a JSON body, 200 with JSON,
a body cut mid-way, a connection dropped before the response, an SSE stream ending in an
error event). Sockets get TCP_NODELAY, as uvicorn and aiohttp set it, so a small chunk is
not held back by Nagle's algorithm. Each chunk's real send time (`time.perf_counter()`,
system-wide, comparable with a client's in another process) is logged, and so is the time
just before each audio write (`RequestLog.write_starts`, with `write_bytes`): no byte of a
write can reach a client earlier, so a client's stamp of it is never smaller (a causal fact
a test can assert under any load, unlike a tolerance around the schedule).

Deterministic reads (`Script.wait_for_read`): before each audio write after the first, the
server waits until a client in this same process has read everything sent so far: the
server's send queue is empty (all of it acknowledged, so in the client's receive queue) and
the client's socket (found among /proc/self/fd: the socket whose name is this connection's
peer) has 0 unread bytes (FIONREAD). Then it waits the delay or part gap and writes. Each
write then reaches the client's receive loop as a read of its own (the loop hands the data
to the reading coroutine before it reads the socket again), so `read_bytes` is the write
sizes whatever the machine's load. A client in another process is not found: the stream
fails (RuntimeError) rather than silently losing the guarantee.

Which script a request follows: the first word of its `input` when that names a script
added with `add_script` (e.g. input "cut hello"), else the server's default script.

    with start_scripted_server(default=Script(chunks=((0.0, 4800), (0.2, 4800)))) as srv:
        srv.add_script("boom", Script(mode="http_error", status=500))
        ... srv.base_url ... srv.requests[0].send_times

Run alone (benchmarks): `python -m tests.support.scripted_server --port 0 --chunks 0:4800,0.1:4800`
prints `PORT <n>`; `GET /_log` returns the send log as JSON, `DELETE /_log` clears it, `GET /_stats`
gives the speech requests being handled and the most at once (`active`, `max_active`).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import fcntl
import json
import math
import os
import socket
import stat
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from aiohttp import web

__all__ = [
    "MODES",
    "Script",
    "RequestLog",
    "ScriptedServer",
    "start_scripted_server",
    "pcm_for",
    "make_app",
    "main",
]

MODES = (
    "ok",  # send the chunks, end the body
    "http_error",  # `status` with {"error": {"message", ...}} before any audio
    "json_200",  # 200 with a JSON body (content type application/json)
    "cut",  # send `cut_after` chunks, then close the connection mid-body
    "reset",  # close the connection without any response
    "sse",  # text/event-stream: one speech.audio.delta per chunk, then speech.audio.done
    "sse_error",  # deltas for `cut_after` chunks, then a speech.audio.error event
    "empty",  # 200 audio content type, no bytes
    "sse_raw",  # deltas for `cut_after` chunks, then `raw_event` as one event, then the rest
)


@dataclass(frozen=True)
class Script:
    """What the server does with one request.

    chunks: (delay_s, nbytes) pairs; delay_s is counted from the previous chunk's
        scheduled time (the first from when the response headers went out), scheduled on
        absolute times so delays do not drift. Odd sizes are sent as they are.
    leading_silence_s: audio seconds of zeros before a tone at `tone_hz` (the payload is
        one continuous signal cut into the chunks).
    sample_rate: the rate written into WAV headers; None = the server's rate.
    parts: sizes of the first writes of every chunk (the rest of the chunk is the last
        write): the chunk stays one HTTP chunk but goes out in several socket writes,
        `part_gap_s` apart, as a large chunk reaches a client over a real network. Each
        write's send time is logged (`RequestLog.part_times`). Empty: one write per chunk.
    wait_for_read: before every audio write but the first, wait until the client (in this
        process) has read everything sent so far, then the delay or part gap: the client's
        reads are then exactly the writes (`RequestLog.write_bytes`).
    """

    chunks: tuple[tuple[float, int], ...] = ((0.0, 4800),)
    mode: str = "ok"
    status: int = 500
    message: str = "scripted failure"
    cut_after: int = 1
    leading_silence_s: float = 0.0
    tone_hz: float = 440.0
    sample_rate: int | None = None
    response_delay_s: float = 0.0  # before the response headers
    parts: tuple[int, ...] = ()
    part_gap_s: float = 0.0
    # Before each audio write after the first: wait until the (in-process) client has read
    # all that was sent (module docstring), so each write is one client read.
    wait_for_read: bool = False
    # A hand-made payload (s16le) in place of the silence and tone, cut into the chunks (past
    # its end: zeros), for a test that needs a stream of set levels (an onset's threshold).
    pcm: bytes | None = None
    # mode "sse_raw": the event's text as sent (`data: <raw_event>`), e.g. a hostile one a
    # JSON parser cannot take (nested 200,000 deep, an integer of 5,000 digits); mode
    # "http_error": the error body as sent, when given.
    raw_event: str = ""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"Script.mode: {self.mode!r} is not one of {', '.join(MODES)}")

    @property
    def total_bytes(self) -> int:
        return sum(n for _, n in self.chunks)


@dataclass
class RequestLog:
    """One request as the server saw it; times are `time.perf_counter()` values."""

    body: dict[str, Any]
    script_name: str
    t_received: float
    send_times: list[float] = field(default_factory=list)  # after each chunk's write
    sizes: list[int] = field(default_factory=list)  # audio bytes (decoded, for SSE)
    part_times: list[list[float]] = field(default_factory=list)  # per chunk, after each write
    # Per audio write (a chunk, a part of one, an SSE event): the time just before it and
    # its audio bytes. Nothing of a write can arrive before its start.
    write_starts: list[float] = field(default_factory=list)
    write_bytes: list[int] = field(default_factory=list)
    finished: bool = False

    def write_started(self, nbytes: int) -> None:
        self.write_starts.append(time.perf_counter())
        self.write_bytes.append(nbytes)

    def as_dict(self) -> dict[str, Any]:
        return {
            "input": self.body.get("input"),
            "script": self.script_name,
            "t_received": self.t_received,
            "send_times": self.send_times,
            "sizes": self.sizes,
            "part_times": self.part_times,
            "write_starts": self.write_starts,
            "write_bytes": self.write_bytes,
            "finished": self.finished,
        }


def pcm_for(script: Script, sample_rate: int, nbytes: int | None = None) -> bytes:
    """The payload a script sends: `leading_silence_s` of zeros, then a tone (s16le); or its
    hand-made `pcm`, padded with zeros to the chunks' bytes."""
    nbytes = script.total_bytes if nbytes is None else nbytes
    if script.pcm is not None:
        return script.pcm[:nbytes].ljust(nbytes, b"\x00")
    n_samples = (nbytes + 1) // 2
    t = np.arange(n_samples) / sample_rate
    tone = (8000 * np.sin(2 * math.pi * script.tone_hz * t)).astype("<i2")
    tone[: int(round(script.leading_silence_s * sample_rate))] = 0
    return tone.tobytes()[:nbytes]


def _wav_header(sample_rate: int, data_bytes: int | None) -> bytes:
    # Kept local so the test server does not depend on the module under test.
    import struct

    size = 0xFFFFFFFF if data_bytes is None else data_bytes
    riff = 0xFFFFFFFF if data_bytes is None else 36 + data_bytes
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF", riff, b"WAVE", b"fmt ", 16, 1, 1,
        sample_rate, sample_rate * 2, 2, 16, b"data", size,
    )  # fmt: skip


def _error_body(message: str, status: int) -> dict[str, Any]:
    return {"error": {"message": message, "type": "ScriptedError", "param": None, "code": status}}


class ScriptedServer:
    """The scripts, the logs and the aiohttp app that follows them."""

    def __init__(
        self,
        default: Script | None = None,
        sample_rate: int = 24000,
        model: str = "scripted-model",
        script_for: Callable[[dict[str, Any]], Script | None] | None = None,
    ) -> None:
        self.default = default or Script()
        self.sample_rate = sample_rate
        self.model = model
        self.scripts: dict[str, Script] = {}
        self.script_for = script_for
        self.requests: list[RequestLog] = []
        self.voices: dict[str, dict[str, Any]] = {}
        # Speech requests being handled now, and the most at once: what the client had on
        # the wire, as the server saw it.
        self.active = 0
        self.max_active = 0
        self.base_url = ""
        self.port = 0

    def add_script(self, name: str, script: Script) -> None:
        self.scripts[name] = script

    def pick(self, body: dict[str, Any]) -> tuple[str, Script]:
        if self.script_for is not None:
            chosen = self.script_for(body)
            if chosen is not None:
                return "script_for", chosen
        words = str(body.get("input", "")).split(maxsplit=1)
        if words and words[0] in self.scripts:
            return words[0], self.scripts[words[0]]
        return "default", self.default

    def logs_for(self, text: str) -> list[RequestLog]:
        return [r for r in self.requests if r.body.get("input") == text]

    # -- handlers -------------------------------------------------------------------

    async def speech(self, request: web.Request) -> web.StreamResponse:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            return await self._speech(request)
        finally:
            self.active -= 1

    async def _speech(self, request: web.Request) -> web.StreamResponse:
        t_received = time.perf_counter()
        try:
            body = await request.json()
        except ValueError:
            return web.json_response(_error_body("body is not JSON", 400), status=400)
        if not str(body.get("input", "")).strip():
            return web.json_response(_error_body("input is empty", 400), status=400)
        name, script = self.pick(body)
        log = RequestLog(body, name, t_received)
        self.requests.append(log)
        if script.response_delay_s:
            await asyncio.sleep(script.response_delay_s)
        rate = script.sample_rate or self.sample_rate
        if script.mode == "reset":
            _close(request)
            return web.Response()  # never sent: the transport is gone
        if script.mode == "http_error" and script.raw_event:  # a hand-made error body
            return web.Response(
                text=script.raw_event, status=script.status, content_type="application/json"
            )
        if script.mode == "http_error":
            return web.json_response(
                _error_body(script.message, script.status), status=script.status
            )
        if script.mode == "json_200":
            return web.json_response({"message": script.message})
        streaming = body.get("stream") is True or body.get("stream_format") in ("audio", "sse")
        fmt = body.get("response_format", "wav")
        if not streaming:
            pcm = pcm_for(script, rate)
            if fmt == "wav":
                return web.Response(
                    body=_wav_header(rate, len(pcm)) + pcm, content_type="audio/wav"
                )
            return web.Response(body=pcm, content_type="audio/pcm")
        sse = body.get("stream_format") == "sse" or (
            body.get("stream") is True and "stream_format" not in body
        )
        stream = (
            self._stream_sse
            if sse or script.mode in ("sse", "sse_error", "sse_raw")
            else self._stream_audio
        )
        try:
            return await stream(request, script, log, rate, fmt)
        except ConnectionResetError:  # the client went away (its timeout, a test's cut)
            return web.Response()

    async def _prepare(self, request: web.Request, content_type: str) -> web.StreamResponse:
        resp = web.StreamResponse(status=200)
        resp.content_type = content_type
        resp.enable_chunked_encoding()
        _nodelay(request)
        await resp.prepare(request)
        return resp

    async def _stream_audio(
        self, request: web.Request, script: Script, log: RequestLog, rate: int, fmt: str
    ) -> web.StreamResponse:
        resp = await self._prepare(request, "audio/wav" if fmt == "wav" else "audio/pcm")
        if script.mode == "empty":
            await resp.write_eof()
            log.finished = True
            return resp
        if fmt == "wav":
            await resp.write(_wav_header(rate, None))  # its own chunk, as vllm-omni does
        pcm = pcm_for(script, rate)
        pos = 0
        start = time.perf_counter()
        due = start
        for i, (delay_s, nbytes) in enumerate(script.chunks):
            if script.mode == "cut" and i >= script.cut_after:
                _close(request)
                return resp
            if script.wait_for_read and log.write_bytes:
                await _until_read(request)
            due += delay_s
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            if nbytes > 0 and script.parts:
                await _write_in_parts(request, pcm[pos : pos + nbytes], script, log)
            elif nbytes > 0:
                log.write_started(nbytes)
                await resp.write(pcm[pos : pos + nbytes])
                log.send_times.append(time.perf_counter())
                log.sizes.append(nbytes)
            pos += nbytes
        await resp.write_eof()
        log.finished = True
        return resp

    async def _stream_sse(
        self, request: web.Request, script: Script, log: RequestLog, rate: int, fmt: str
    ) -> web.StreamResponse:
        resp = await self._prepare(request, "text/event-stream")
        pcm = pcm_for(script, rate)
        pos = 0
        due = time.perf_counter()
        for i, (delay_s, nbytes) in enumerate(script.chunks):
            if script.mode == "sse_error" and i >= script.cut_after:
                event = {"type": "speech.audio.error", "error": _error_body(script.message, 500)}
                await resp.write(f"data: {json.dumps(event)}\n\n".encode())
                await resp.write_eof()
                return resp
            if script.mode == "sse_raw" and i == script.cut_after:
                await resp.write(f"data: {script.raw_event}\n\n".encode())
            due += delay_s
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            audio = pcm[pos : pos + nbytes]
            pos += nbytes
            event = {
                "type": "speech.audio.delta",
                "audio": base64.b64encode(audio).decode("ascii"),
                "response_format": fmt,
            }
            log.write_started(nbytes)
            await resp.write(f"data: {json.dumps(event)}\n\n".encode())
            log.send_times.append(time.perf_counter())
            log.sizes.append(nbytes)
        done = {"type": "speech.audio.done", "usage": {"audio_bytes": pos}}
        await resp.write(f"data: {json.dumps(done)}\n\n".encode())
        await resp.write_eof()
        log.finished = True
        return resp

    async def add_voice(self, request: web.Request) -> web.Response:
        form = await request.post()
        name, consent = form.get("name"), form.get("consent")
        sample = form.get("audio_sample")
        if not name or not consent or not isinstance(sample, web.FileField):
            message = "name, consent and audio_sample are required"
            return web.json_response(_error_body(message, 400), status=400)
        data = sample.file.read()
        voice = {
            "name": str(name),
            "consent": str(consent),
            "created_at": int(time.time()),
            "mime_type": sample.content_type,
            "file_size": len(data),
        }
        if form.get("ref_text"):
            voice["ref_text"] = str(form["ref_text"])
        self.voices[str(name).lower()] = voice
        return web.json_response({"success": True, "voice": voice})

    async def list_voices(self, request: web.Request) -> web.Response:
        names = ["scripted", *(v["name"] for v in self.voices.values())]
        return web.json_response({"voices": names, "uploaded_voices": list(self.voices.values())})

    async def delete_voice(self, request: web.Request) -> web.Response:
        name = request.match_info["name"].lower()
        if name not in self.voices:
            return web.json_response(_error_body(f"voice {name!r} not found", 404), status=404)
        del self.voices[name]
        return web.json_response({"success": True, "name": name})

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "healthy"})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model}]})

    async def get_log(self, request: web.Request) -> web.Response:
        return web.json_response([r.as_dict() for r in self.requests])

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response({"active": self.active, "max_active": self.max_active})

    async def clear_log(self, request: web.Request) -> web.Response:
        self.requests.clear()
        return web.json_response({"cleared": True})


async def _write_in_parts(
    request: web.Request, data: bytes, script: Script, log: RequestLog
) -> None:
    """One HTTP chunk of `data` written to the socket in `script.parts` pieces (then the
    rest), `part_gap_s` apart. The response's headers went out at `prepare` and nothing of
    it is buffered, so the chunk's framing is written here by hand."""
    transport = request.transport
    assert transport is not None
    cuts, pos = [], 0
    for size in script.parts:
        if pos + size >= len(data):
            break
        cuts.append(data[pos : pos + size])
        pos += size
    cuts.append(data[pos:])
    times: list[float] = []
    for i, part in enumerate(cuts):
        if i and script.wait_for_read:
            await _until_read(request)
        if i:
            await asyncio.sleep(script.part_gap_s)
        head = f"{len(data):x}\r\n".encode() if i == 0 else b""
        tail = b"\r\n" if i == len(cuts) - 1 else b""
        log.write_started(len(part))
        transport.write(head + part + tail)
        times.append(time.perf_counter())
    log.part_times.append(times)
    log.send_times.append(times[-1])
    log.sizes.append(len(data))


READ_WAIT_LIMIT_S = 120.0  # a client that never reads: the stream fails, the test with it
_POLL_S = 0.001
OUTQ = termios.TIOCOUTQ  # on a TCP socket: SIOCOUTQ, bytes sent and not yet acknowledged


def _queued(fd: int, request_code: int) -> int:
    """FIONREAD (unread bytes) or TIOCOUTQ (sent bytes not yet acknowledged) of a socket."""
    buf = fcntl.ioctl(fd, request_code, b"\0\0\0\0")
    return int.from_bytes(buf, sys.byteorder, signed=True)


def _peer_socket(own: socket.socket) -> socket.socket:
    """The other end of `own`, a socket of this process: a duplicate of the descriptor
    whose name is `own`'s peer and whose peer is `own` (the caller closes it)."""
    here, there = own.getsockname(), own.getpeername()
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError, ValueError):
            fd = int(name)
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            sock = socket.socket(fileno=os.dup(fd))
            try:
                named = sock.type == socket.SOCK_STREAM and sock.getsockname() == there
                if named and sock.getpeername() == here:
                    return sock
            except OSError:
                pass
            sock.close()
    raise RuntimeError(f"wait_for_read: no socket of this process is the client at {there}")


async def _until_read(request: web.Request) -> None:
    """Wait until the client has read everything this connection sent: nothing left in
    the transport's buffer nor unacknowledged in the send queue (so all of it is in the
    client's receive queue), then nothing unread there (so the client has it)."""
    transport = request.transport
    own = transport.get_extra_info("socket") if transport is not None else None
    if transport is None or own is None:
        raise RuntimeError("wait_for_read: the connection has no socket")
    peer = _peer_socket(own)
    try:
        deadline = time.monotonic() + READ_WAIT_LIMIT_S
        while time.monotonic() < deadline:
            # In this order: all of it in the client's queue, then none of it left there.
            acked = transport.get_write_buffer_size() == 0 and not _queued(own.fileno(), OUTQ)
            if acked and not _queued(peer.fileno(), termios.FIONREAD):
                return
            await asyncio.sleep(_POLL_S)
        raise RuntimeError(f"wait_for_read: the client read nothing in {READ_WAIT_LIMIT_S} s")
    finally:
        peer.close()


def _nodelay(request: web.Request) -> None:
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _close(request: web.Request) -> None:
    if request.transport is not None:
        request.transport.close()


def make_app(server: ScriptedServer) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/audio/speech", server.speech)
    app.router.add_post("/v1/audio/voices", server.add_voice)
    app.router.add_get("/v1/audio/voices", server.list_voices)
    app.router.add_delete("/v1/audio/voices/{name}", server.delete_voice)
    app.router.add_get("/health", server.health)
    app.router.add_get("/v1/models", server.models)
    app.router.add_get("/_log", server.get_log)
    app.router.add_delete("/_log", server.clear_log)
    app.router.add_get("/_stats", server.stats)
    return app


async def _start(server: ScriptedServer, port: int) -> web.AppRunner:
    runner = web.AppRunner(
        make_app(server), access_log=None, handle_signals=False, shutdown_timeout=0.2
    )
    # shutdown_timeout: stopping must not wait for a scripted stall to play out.
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    server.port = runner.addresses[0][1]
    server.base_url = f"http://127.0.0.1:{server.port}"
    return runner


@contextlib.contextmanager
def start_scripted_server(
    default: Script | None = None, sample_rate: int = 24000, **kwargs: Any
) -> Iterator[ScriptedServer]:
    """Serve on 127.0.0.1, a free port, in a thread with its own event loop; stopped on exit
    (also when the body raises)."""
    server = ScriptedServer(default, sample_rate, **kwargs)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict[str, Any] = {}

    def serve() -> None:
        asyncio.set_event_loop(loop)
        try:
            box["runner"] = loop.run_until_complete(_start(server, 0))
        except BaseException as exc:  # surfaced in the caller's thread
            box["error"] = exc
            started.set()
            return
        started.set()
        loop.run_forever()
        loop.run_until_complete(box["runner"].cleanup())
        loop.close()

    thread = threading.Thread(target=serve, name="scripted-server", daemon=True)
    thread.start()
    started.wait(30)
    if "error" in box:
        raise RuntimeError(f"scripted server did not start: {box['error']}")
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)


def _parse_chunks(text: str) -> tuple[tuple[float, int], ...]:
    try:
        pairs = [item.split(":") for item in text.split(",") if item]
        return tuple((float(d), int(n)) for d, n in pairs)
    except ValueError:
        raise SystemExit(f"--chunks: expected DELAY:BYTES,... got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--sample-rate", type=int, default=24000)
    parser.add_argument("--chunks", default="0:4800", help="default script: DELAY:BYTES,...")
    parser.add_argument("--mode", default="ok", choices=MODES)
    parser.add_argument("--uvloop", action="store_true", help="serve on uvloop")
    args = parser.parse_args(argv)
    server = ScriptedServer(Script(chunks=_parse_chunks(args.chunks), mode=args.mode))
    server.sample_rate = args.sample_rate

    async def serve() -> None:
        runner = await _start(server, args.port)
        print(f"PORT {server.port}", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    if args.uvloop:
        import uvloop

        runner_cls: Any = uvloop
        with contextlib.suppress(KeyboardInterrupt):
            runner_cls.run(serve())
    else:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
