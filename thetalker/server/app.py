"""The HTTP layer of the local server: vllm-omni 0.30.0's speech API over any `Engine`.

`make_app(engine, ...)` builds the aiohttp application; the engine is started and closed in a
`cleanup_ctx`, so under `AppRunner` the port opens only once the voice is loaded (as vllm-omni's
does). A stream's 200 and headers go out as soon as the request is validated, before the first
audio (as 0.30.0's `StreamingResponse`), so an engine failure is a cut body (raw) or a
`speech.audio.error` event (SSE). Each engine piece is written with its own
`await resp.write(...)`, one HTTP chunk per piece, on a socket with TCP_NODELAY.
Errors before the 200 follow 0.30.0: request-model checks (types, enums, ranges) give type
"Bad Request" and param "body.<field>", model-level checks type "BadRequestError" and param
null, a wrong model 404 NotFoundError. Contract: vllm-omni 0.30.0's speech API
(docs/vllm-omni-0.30.md; its own serving code in tests/contract).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import socket
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

from aiohttp import web

import thetalker
from thetalker.server.contract import (
    CONTENT_TYPES,
    ENGINE_KEY,
    LIMITS_KEY,
    METRICS_KEY,
    MODEL_KEY,
    SAMPLES_PER_FRAME,
    SERVED_MODEL_NAME,
    SPEAKER,
    SPEAKERS,
    SSE_CONTENT_TYPE,
    STARTED_AT_KEY,
    VOICES_KEY,
    ApiError,
    SpeechRequest,
    parse_speech_request,
    read_json_body,
)
from thetalker.server.engine import Engine, piper_version
from thetalker.server.formats import flac_bytes, wav_bytes, wav_header
from thetalker.server.guard import (
    ServerLimits,
    api_key_middleware,
    connection_cap,
    shed_load_middleware,
)
from thetalker.server.prom import ServerMetrics
from thetalker.server.voices import (
    MAX_FILE_BYTES,
    MAX_TEXT_FIELD_CHARS,
    VoiceError,
    VoiceStore,
)
from thetalker.server.ws import STREAM_PATH, handle_speech_stream

__all__ = [
    "SERVED_MODEL_NAME",
    "SPEAKER",
    "SPEAKERS",
    "ENGINE_KEY",
    "VOICES_KEY",
    "METRICS_KEY",
    "SpeechRequest",
    "ApiError",
    "parse_speech_request",
    "make_app",
]

log = logging.getLogger("thetalker.server")


def _sse_event(kind: str, payload: dict[str, Any]) -> bytes:
    data = json.dumps({"type": kind, **payload}, separators=(",", ":"))
    return f"event: {kind}\ndata: {data}\n\n".encode()


def _set_nodelay(request: web.Request) -> None:
    # aiohttp already sets it on accept; set it again so the property never depends on that.
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def handle_speech(request: web.Request) -> web.StreamResponse:
    t_arrival = time.perf_counter()
    metrics = request.app[METRICS_KEY]
    engine = request.app[ENGINE_KEY]
    metrics.in_flight += 1
    status = "500"
    try:
        try:
            body = await read_json_body(request)
            speech = parse_speech_request(body, request.app[MODEL_KEY], request.app[VOICES_KEY])
        except ApiError as exc:
            status = str(exc.status)
            log.warning("speech request refused (%d): %s", exc.status, exc.message.splitlines()[0])
            return exc.response()
        try:
            status, response = await _serve_speech(request, engine, metrics, speech, t_arrival)
        except asyncio.CancelledError:
            status = "499"  # the client left (nginx's code for it)
            raise
        return response
    finally:
        metrics.in_flight -= 1
        metrics.requests_by_status[status] += 1


def _usage(text: str, samples: int) -> dict[str, Any]:
    """0.30.0's usage block; Piper's tokens: input characters, output decoder frames."""
    out = -(-samples // SAMPLES_PER_FRAME)
    return {
        "input_tokens": len(text),
        "output_tokens": out,
        "total_tokens": len(text) + out,
        "input_token_details": {"text_tokens": len(text), "audio_tokens": 0},
    }


async def _serve_file(
    engine: Engine, metrics: ServerMetrics, speech: SpeechRequest, t_arrival: float
) -> tuple[str, web.StreamResponse]:
    try:
        async with aclosing(engine.stream(speech.text, speech.speed, chunked=False)) as chunks:
            pcm = b"".join([c async for c in chunks])
    except Exception as exc:
        log.warning("synthesis failed: %s: %s", type(exc).__name__, exc)
        metrics.request_finished(time.perf_counter() - t_arrival, False, "stage_error")
        return "500", ApiError(500, f"synthesis failed: {exc}").response()
    metrics.observe_first_chunk(time.perf_counter() - t_arrival)
    metrics.audio_seconds += len(pcm) / (2 * engine.sample_rate)
    metrics.request_finished(time.perf_counter() - t_arrival, True, "stop")
    fmt = speech.response_format
    if fmt == "wav":
        data = wav_bytes(pcm, engine.sample_rate)
    elif fmt == "flac":
        data = flac_bytes(pcm, engine.sample_rate)
    else:
        data = pcm
    return "200", web.Response(body=data, content_type=CONTENT_TYPES[fmt])


async def _serve_speech(
    request: web.Request,
    engine: Engine,
    metrics: ServerMetrics,
    speech: SpeechRequest,
    t_arrival: float,
) -> tuple[str, web.StreamResponse]:
    """Synthesize and send; returns (status label for metrics, response)."""
    if speech.mode == "file":
        return await _serve_file(engine, metrics, speech, t_arrival)
    write_timeout = request.app[LIMITS_KEY].write_timeout_s
    bytes_per_s = 2 * engine.sample_rate
    sent = 0
    # When each chunk was produced (s from arrival) and its size: the server's continuity.
    produced: list[float] = []
    sizes: list[int] = []
    # The 200 and its headers go out now, before any audio (0.30.0's StreamingResponse).
    response = await _start_stream(request, speech)
    try:
        async with aclosing(engine.stream(speech.text, speech.speed)) as chunks:
            async for chunk in chunks:
                if not chunk:
                    continue
                produced.append(time.perf_counter() - t_arrival)
                sizes.append(len(chunk))
                if sent == 0 and speech.response_format == "wav":
                    # The 44-byte header goes out as its own chunk, just before the first audio.
                    await _write(response, speech, wav_header(engine.sample_rate), write_timeout)
                await _write(response, speech, chunk, write_timeout)
                if sent == 0:
                    metrics.observe_first_chunk(time.perf_counter() - t_arrival)
                sent += len(chunk)
                metrics.audio_seconds += len(chunk) / bytes_per_s
        if speech.mode == "sse":
            usage = _usage(speech.text, sent // 2)
            await _write_raw(
                response, _sse_event("speech.audio.done", {"usage": usage}), write_timeout
            )
        await response.write_eof()
        metrics.stream_completed(produced, sizes, engine.sample_rate)
        metrics.request_finished(time.perf_counter() - t_arrival, True, "stop")
        return "200", response
    except (ConnectionError, TimeoutError) as exc:
        # The client left, or stopped reading for longer than the write timeout: abort (a
        # close would wait, ESTABLISHED, for the client to read what is queued).
        metrics.cancelled += 1
        metrics.stream_aborted("closed")
        metrics.request_finished(time.perf_counter() - t_arrival, False, "client_disconnect")
        if isinstance(exc, TimeoutError) and request.transport is not None:
            log.warning("client stopped reading for %g s: connection aborted", write_timeout)
            request.transport.abort()
        return "499", response
    except asyncio.CancelledError:
        metrics.cancelled += 1
        metrics.stream_aborted("cancelled")
        metrics.request_finished(time.perf_counter() - t_arrival, False, "client_abort")
        raise
    except Exception as exc:
        log.warning("synthesis failed mid-stream: %s: %s", type(exc).__name__, exc)
        metrics.stream_aborted("error")
        metrics.request_finished(time.perf_counter() - t_arrival, False, "stage_error")
        if speech.mode == "sse":
            error: dict[str, Any] = {
                "error": {
                    "message": f"synthesis failed: {exc}",
                    "type": "server_error",
                    "param": None,
                    "code": 500,
                }
            }
            if sent:
                error.update(partial_audio=True, action="discard")
            try:
                await _write_raw(response, _sse_event("speech.audio.error", error), write_timeout)
                await response.write_eof()
            except (ConnectionError, TimeoutError):
                pass
            return "500", response
        # Raw stream: cut the body (the contract's signal for an engine failure); what is
        # queued may still go out, but a client that does not read it is aborted in time.
        if request.transport is not None:
            transport = request.transport
            transport.close()
            asyncio.get_running_loop().call_later(write_timeout, transport.abort)
        return "500", response


async def _start_stream(request: web.Request, speech: SpeechRequest) -> web.StreamResponse:
    _set_nodelay(request)
    if speech.mode == "sse":
        content_type = SSE_CONTENT_TYPE
    else:
        content_type = CONTENT_TYPES[speech.response_format]
    response = web.StreamResponse(
        status=200, headers={"Content-Type": content_type, "Cache-Control": "no-cache"}
    )
    response.enable_chunked_encoding()
    await response.prepare(request)
    return response


async def _write_raw(response: web.StreamResponse, data: bytes, timeout_s: float) -> None:
    async with asyncio.timeout(timeout_s):
        await response.write(data)


async def _write(
    response: web.StreamResponse, speech: SpeechRequest, data: bytes, timeout_s: float
) -> None:
    if speech.mode == "sse":
        audio = base64.b64encode(data).decode("ascii")
        payload = {"audio": audio, "response_format": speech.response_format}
        data = _sse_event("speech.audio.delta", payload)
    await _write_raw(response, data, timeout_s)


async def handle_health(request: web.Request) -> web.Response:
    if request.app[ENGINE_KEY].ready:
        return web.json_response({"status": "healthy"})
    return web.json_response({"status": "unhealthy"}, status=503)


async def handle_models(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    model = {
        "id": request.app[MODEL_KEY],
        "object": "model",
        "created": int(request.app[STARTED_AT_KEY]),
        "owned_by": "thetalker",
        "root": "en_US-joe-medium",
        "sample_rate": engine.sample_rate,
        "speakers": list(SPEAKERS),
    }
    return web.json_response({"object": "list", "data": [model]})


async def handle_version(request: web.Request) -> web.Response:
    return web.json_response(
        {
            "version": thetalker.__version__,
            "thetalker": thetalker.__version__,
            "piper_tts": piper_version(),
        }
    )


async def handle_metrics(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    text = request.app[METRICS_KEY].render(engine.stats(), workers=engine.workers)
    return web.Response(
        text=text,
        content_type="text/plain",
        charset="utf-8",
        headers={"X-Prometheus-Format": "0.0.4"},
    )


async def _read_part(part: Any, limit: int, field: str, what: str) -> bytes:
    """A multipart field's bytes, refusing (400) past `limit` without reading the rest."""
    data = bytearray()
    while chunk := await part.read_chunk(64 * 1024):
        data += chunk
        if len(data) > limit:
            raise VoiceError(f"{field} is larger than {limit} bytes ({what})", field)
    return bytes(data)


async def _read_voice_form(request: web.Request) -> tuple[dict[str, str], bytes | None, Any, Any]:
    fields: dict[str, str] = {}
    audio: bytes | None = None
    filename = content_type = None
    if request.content_type.startswith("multipart/"):
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            name = getattr(part, "name", None)
            if name == "audio_sample":
                audio = await _read_part(part, MAX_FILE_BYTES, "audio_sample", "10 MiB")
                filename = part.filename
                content_type = part.headers.get("Content-Type")
            elif name:
                # Text fields are small: 4 bytes a character at most.
                limit = 4 * MAX_TEXT_FIELD_CHARS
                raw = await _read_part(part, limit, name, f"{MAX_TEXT_FIELD_CHARS} characters")
                fields[name] = raw.decode("utf-8", "replace")
    elif request.content_type == "application/x-www-form-urlencoded":
        # A form without a file (a speaker_embedding voice) may come url-encoded.
        form = await request.post()
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
    else:
        raise VoiceError("body must be multipart/form-data")
    return fields, audio, filename, content_type


async def handle_voice_upload(request: web.Request) -> web.Response:
    store = request.app[VOICES_KEY]
    try:
        async with asyncio.timeout(request.app[LIMITS_KEY].body_timeout_s):
            fields, audio, filename, content_type = await _read_voice_form(request)
        name = fields.get("name")
        if name is not None and name.strip().casefold() in SPEAKERS:
            raise VoiceError(
                f"Voice name '{name.strip()}' is reserved by a built-in speaker", "name"
            )
        voice = store.add(
            name,
            fields.get("consent"),
            audio=audio,
            filename=filename,
            content_type=content_type,
            speaker_embedding=fields.get("speaker_embedding"),
            ref_text=fields.get("ref_text"),
            speaker_description=fields.get("speaker_description"),
        )
    except TimeoutError:
        return ApiError(408, "voice upload not received in time").response()
    except VoiceError as exc:
        return ApiError(exc.status, str(exc), exc.param).response()
    except ValueError as exc:  # a malformed multipart body
        return ApiError(400, f"malformed form: {exc}").response()
    return web.json_response({"success": True, "voice": voice})


async def handle_voice_list(request: web.Request) -> web.Response:
    store = request.app[VOICES_KEY]
    names = sorted({*SPEAKERS, *(n.casefold() for n in store.names())})
    return web.json_response({"voices": names, "uploaded_voices": store.infos()})


async def handle_voice_delete(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    try:
        voice = request.app[VOICES_KEY].delete(name)
    except VoiceError as exc:
        return ApiError(exc.status, str(exc), exc.param).response()
    return web.json_response(
        {"success": True, "message": f"Voice '{voice['name']}' deleted successfully"}
    )


def make_app(
    engine: Engine,
    voices_dir: str | Path | None = None,
    served_model_name: str = SERVED_MODEL_NAME,
    api_key: str | None = None,
    limits: ServerLimits | None = None,
) -> web.Application:
    """The server's application; `voices_dir=None` uses a fresh temporary folder; with
    `api_key`, `/v1/*` needs `Authorization: Bearer <api_key>`."""
    limits = limits or ServerLimits()
    middlewares = [shed_load_middleware(connection_cap(limits))]
    middlewares += [api_key_middleware(api_key)] if api_key else []
    app = web.Application(middlewares=middlewares)
    app[ENGINE_KEY] = engine
    app[METRICS_KEY] = ServerMetrics()
    scheduler = getattr(engine, "scheduler", None)
    if scheduler is not None:  # its queue wait and generation time go to /metrics
        scheduler.observer = app[METRICS_KEY]
    app[MODEL_KEY] = served_model_name
    app[STARTED_AT_KEY] = time.time()
    app[LIMITS_KEY] = limits
    tmp: tempfile.TemporaryDirectory[str] | None = None
    if voices_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="thetalker-voices-")
        voices_dir = tmp.name
    app[VOICES_KEY] = VoiceStore(Path(voices_dir))

    async def engine_lifetime(_app: web.Application) -> AsyncIterator[None]:
        await engine.start()
        try:
            yield
        finally:
            await engine.close()
            if tmp is not None:
                tmp.cleanup()

    app.cleanup_ctx.append(engine_lifetime)
    app.router.add_post("/v1/audio/speech", handle_speech)
    app.router.add_get(STREAM_PATH, handle_speech_stream)  # 0.30.0's text-in WebSocket
    app.router.add_get("/health", handle_health)
    app.router.add_get("/v1/models", handle_models)
    app.router.add_get("/version", handle_version)
    app.router.add_get("/metrics", handle_metrics)
    app.router.add_post("/v1/audio/voices", handle_voice_upload)
    app.router.add_get("/v1/audio/voices", handle_voice_list)
    app.router.add_delete("/v1/audio/voices/{name}", handle_voice_delete)
    return app
