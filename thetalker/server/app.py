"""The HTTP layer of the local server: vllm-omni's speech API over any `Engine`.

`make_app(engine, ...)` builds the aiohttp application; the engine is started and closed in a
`cleanup_ctx`, so under `AppRunner` the port opens only once the voice is loaded (as vllm-omni's
does). Streaming writes each engine chunk with its own `await resp.write(...)`, one HTTP chunk
per sentence, on a socket with TCP_NODELAY. Contract: docs/speech-api.md (shared docs).
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

import thetalker
from thetalker.server.engine import Engine, piper_version
from thetalker.server.formats import flac_available, flac_bytes, wav_bytes, wav_header
from thetalker.server.prom import ServerMetrics
from thetalker.server.voices import MAX_FILE_BYTES, VoiceError, VoiceStore

__all__ = [
    "SERVED_MODEL_NAME",
    "SPEAKER",
    "ENGINE_KEY",
    "VOICES_KEY",
    "METRICS_KEY",
    "SpeechRequest",
    "ApiError",
    "parse_speech_request",
    "make_app",
]

log = logging.getLogger("thetalker.server")

SERVED_MODEL_NAME = "piper-joe"
SPEAKER = "joe"
TASK_TYPES = ("CustomVoice", "VoiceDesign", "Base")
RESPONSE_FORMATS = ("wav", "pcm", "flac", "mp3", "opus")
STREAM_FORMATS = ("audio", "sse")
CONTENT_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", "flac": "audio/flac"}
MAX_INSTRUCTIONS_CHARS = 500

ENGINE_KEY = web.AppKey("engine", Engine)
VOICES_KEY = web.AppKey("voices", VoiceStore)
METRICS_KEY = web.AppKey("metrics", ServerMetrics)
MODEL_KEY = web.AppKey("served_model_name", str)
STARTED_AT_KEY = web.AppKey("started_at", float)


class ApiError(Exception):
    """An error answered before any audio, as `{"error": {message, type, param, code}}`."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def response(self) -> web.Response:
        kind = {400: "BadRequestError", 404: "NotFoundError"}.get(
            self.status, "InternalServerError"
        )
        body = {"message": self.message, "type": kind, "param": self.param, "code": self.status}
        return web.json_response({"error": body}, status=self.status)


@dataclass(frozen=True)
class SpeechRequest:
    """A validated `POST /v1/audio/speech` body; `mode` is "file", "audio" or "sse"."""

    text: str
    response_format: str
    mode: str
    speed: float


def _optional_int(body: dict[str, Any], key: str, low: int | None, high: int | None) -> None:
    value = body.get(key)
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise ApiError(400, f"'{key}' must be an integer", key)
    if (low is not None and value < low) or (high is not None and value > high):
        raise ApiError(400, f"'{key}' must be between {low} and {high}, got {value}", key)


def _optional_str(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise ApiError(400, f"'{key}' must be a string", key)
    return value


def parse_speech_request(
    body: Any, served_model_name: str, uploaded_voices: VoiceStore | None = None
) -> SpeechRequest:
    """Validate a request body against the contract; raises ApiError (400/404) on bad input."""
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    text = body.get("input")
    if not isinstance(text, str) or not text.strip():
        raise ApiError(400, "'input' is required and must be a non-empty string", "input")
    model = _optional_str(body, "model")
    if model is not None and model != served_model_name:
        raise ApiError(
            404,
            f"The model '{model}' does not exist; this server serves '{served_model_name}'",
            "model",
        )
    response_format = _optional_str(body, "response_format") or "wav"
    if response_format not in RESPONSE_FORMATS:
        raise ApiError(
            400,
            f"'response_format' must be one of {', '.join(RESPONSE_FORMATS)}; "
            f"got '{response_format}'",
            "response_format",
        )
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be a boolean", "stream")
    stream_format = _optional_str(body, "stream_format")
    if stream_format is not None and stream_format not in STREAM_FORMATS:
        raise ApiError(
            400,
            f"'stream_format' must be 'audio' or 'sse'; got '{stream_format}'",
            "stream_format",
        )
    # `stream: true` alone means SSE (vllm-omni since mid-2026); raw audio needs stream_format.
    if stream_format == "sse" or (stream is True and stream_format is None):
        mode = "sse"
    elif stream_format == "audio" and stream is not False:
        mode = "audio"
    else:
        mode = "file"
    if mode != "file" and response_format not in ("pcm", "wav"):
        raise ApiError(
            400,
            f"streaming supports response_format 'pcm' or 'wav', not '{response_format}'",
            "response_format",
        )
    if mode == "file" and response_format in ("mp3", "opus"):
        raise ApiError(
            400,
            f"response_format '{response_format}' is not available on this server; "
            "use wav, pcm or flac",
            "response_format",
        )
    if mode == "file" and response_format == "flac" and not flac_available():
        raise ApiError(
            400,
            "response_format 'flac' needs the soundfile package, which is not installed",
            "response_format",
        )
    speed = body.get("speed", 1.0)
    if speed is None:
        speed = 1.0
    if not isinstance(speed, int | float) or isinstance(speed, bool) or not 0.25 <= speed <= 4.0:
        raise ApiError(400, f"'speed' must be a number from 0.25 to 4.0; got {speed!r}", "speed")
    if mode != "file" and speed != 1.0:
        raise ApiError(400, "'speed' must be 1.0 when streaming", "speed")
    task_type = _optional_str(body, "task_type") or "CustomVoice"
    if task_type not in TASK_TYPES:
        raise ApiError(
            400,
            f"'task_type' must be one of {', '.join(TASK_TYPES)}; got '{task_type}'",
            "task_type",
        )
    if task_type == "Base":
        raise ApiError(
            400,
            "task_type 'Base' is not supported: this voice (Piper en_US-joe-medium) "
            "cannot clone voices; use task_type 'CustomVoice' with speaker 'joe'",
            "task_type",
        )
    if task_type == "VoiceDesign":
        raise ApiError(
            400,
            "task_type 'VoiceDesign' is not supported: this voice (Piper en_US-joe-medium) "
            "cannot design voices; use task_type 'CustomVoice' with speaker 'joe'",
            "task_type",
        )
    if body.get("ref_text") is not None:
        raise ApiError(400, "'ref_text' is only accepted with task_type 'Base'", "ref_text")
    instructions = _optional_str(body, "instructions")
    if instructions is not None and len(instructions) > MAX_INSTRUCTIONS_CHARS:
        raise ApiError(
            400,
            f"'instructions' is longer than {MAX_INSTRUCTIONS_CHARS} characters",
            "instructions",
        )
    _optional_str(body, "language")
    _optional_int(body, "max_new_tokens", 1, 4096)
    _optional_int(body, "seed", None, None)
    _optional_int(body, "initial_codec_chunk_frames", 1, None)
    voice_param = "voice" if body.get("voice") is not None else "speaker"
    voice = _optional_str(body, voice_param) or SPEAKER
    if voice.casefold() != SPEAKER:
        if uploaded_voices is not None and voice in uploaded_voices:
            raise ApiError(
                400,
                f"voice '{voice}' is an uploaded voice: this voice (Piper en_US-joe-medium) "
                f"cannot clone voices; valid speakers: {SPEAKER}",
                voice_param,
            )
        raise ApiError(400, f"unknown speaker '{voice}'; valid speakers: {SPEAKER}", voice_param)
    return SpeechRequest(text=text, response_format=response_format, mode=mode, speed=float(speed))


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
            try:
                body = await request.json(loads=json.loads)
            except (ValueError, UnicodeDecodeError):
                raise ApiError(400, "request body is not valid JSON") from None
            speech = parse_speech_request(body, request.app[MODEL_KEY], request.app[VOICES_KEY])
        except ApiError as exc:
            status = str(exc.status)
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


async def _serve_speech(
    request: web.Request,
    engine: Engine,
    metrics: ServerMetrics,
    speech: SpeechRequest,
    t_arrival: float,
) -> tuple[str, web.StreamResponse]:
    """Synthesize and send; returns (status label for metrics, response)."""
    bytes_per_s = 2 * engine.sample_rate
    response: web.StreamResponse | None = None
    sent = 0
    try:
        async with aclosing(engine.stream(speech.text, speech.speed)) as chunks:
            if speech.mode == "file":
                pcm = b"".join([c async for c in chunks])
                metrics.observe_first_chunk(time.perf_counter() - t_arrival)
                metrics.audio_seconds += len(pcm) / bytes_per_s
                fmt = speech.response_format
                if fmt == "wav":
                    data = wav_bytes(pcm, engine.sample_rate)
                elif fmt == "flac":
                    data = flac_bytes(pcm, engine.sample_rate)
                else:
                    data = pcm
                return "200", web.Response(body=data, content_type=CONTENT_TYPES[fmt])
            # Headers go out with the first audio, so an engine failure before it is a JSON 500.
            iterator = aiter(chunks)
            chunk = await anext(iterator, None)
            response = await _start_stream(request, speech, engine.sample_rate)
            while chunk is not None:
                if chunk:
                    await _write_chunk(response, speech, chunk)
                    if sent == 0:
                        metrics.observe_first_chunk(time.perf_counter() - t_arrival)
                    sent += len(chunk)
                    metrics.audio_seconds += len(chunk) / bytes_per_s
                chunk = await anext(iterator, None)
            if speech.mode == "sse":
                usage = {"input_characters": len(speech.text), "audio_seconds": sent / bytes_per_s}
                await response.write(_sse_event("speech.audio.done", {"usage": usage}))
            await response.write_eof()
            return "200", response
    except (ConnectionResetError, ConnectionError):
        metrics.cancelled += 1
        return "499", response or web.Response(status=499)
    except asyncio.CancelledError:
        metrics.cancelled += 1
        raise
    except Exception as exc:
        log.exception("synthesis failed")
        if response is None:
            return "500", ApiError(500, f"synthesis failed: {exc}").response()
        if speech.mode == "sse":
            error = {
                "message": f"synthesis failed: {exc}",
                "type": "InternalServerError",
                "param": None,
                "code": 500,
            }
            try:
                await response.write(_sse_event("speech.audio.error", {"error": error}))
                await response.write_eof()
            except ConnectionError:
                pass
            return "500", response
        # Raw stream: cut the body (the contract's signal for a mid-stream error).
        if request.transport is not None:
            request.transport.close()
        return "500", response


async def _start_stream(
    request: web.Request, speech: SpeechRequest, sample_rate: int
) -> web.StreamResponse:
    _set_nodelay(request)
    if speech.mode == "sse":
        content_type = "text/event-stream"
    else:
        content_type = CONTENT_TYPES[speech.response_format]
    response = web.StreamResponse(
        status=200, headers={"Content-Type": content_type, "Cache-Control": "no-cache"}
    )
    response.enable_chunked_encoding()
    await response.prepare(request)
    if speech.response_format == "wav":
        # The 44-byte header goes out as its own chunk, before any audio.
        await _write_chunk(response, speech, wav_header(sample_rate))
    return response


async def _write_chunk(response: web.StreamResponse, speech: SpeechRequest, data: bytes) -> None:
    if speech.mode == "sse":
        audio = base64.b64encode(data).decode("ascii")
        payload = {"audio": audio, "response_format": speech.response_format}
        data = _sse_event("speech.audio.delta", payload)
    await response.write(data)


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
        "speakers": [SPEAKER],
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
    text = request.app[METRICS_KEY].render(
        workers_busy=engine.busy, workers=engine.workers, waiting=engine.waiting
    )
    return web.Response(
        text=text,
        content_type="text/plain",
        charset="utf-8",
        headers={"X-Prometheus-Format": "0.0.4"},
    )


async def _read_part(part: Any, limit: int) -> bytes:
    """A multipart field's bytes, refusing (400) past `limit` without reading the rest."""
    data = bytearray()
    while chunk := await part.read_chunk(64 * 1024):
        data += chunk
        if len(data) > limit:
            raise VoiceError(f"audio_sample is larger than {limit} bytes (10 MiB)", "audio_sample")
    return bytes(data)


async def handle_voice_upload(request: web.Request) -> web.Response:
    store = request.app[VOICES_KEY]
    fields: dict[str, str] = {}
    audio: bytes | None = None
    filename = content_type = None
    try:
        if request.content_type.startswith("multipart/"):
            reader = await request.multipart()
            while (part := await reader.next()) is not None:
                name = getattr(part, "name", None)
                if name == "audio_sample":
                    audio = await _read_part(part, MAX_FILE_BYTES)
                    filename = part.filename
                    content_type = part.headers.get("Content-Type")
                elif name:
                    raw = await _read_part(part, MAX_FILE_BYTES)
                    fields[name] = raw.decode("utf-8", "replace")
        elif request.content_type == "application/x-www-form-urlencoded":
            # A form without a file (a speaker_embedding voice) may come url-encoded.
            form = await request.post()
            fields = {k: v for k, v in form.items() if isinstance(v, str)}
        else:
            raise VoiceError("body must be multipart/form-data")
        voice = store.add(
            fields.get("name"),
            fields.get("consent"),
            audio=audio,
            filename=filename,
            content_type=content_type,
            speaker_embedding=fields.get("speaker_embedding"),
            ref_text=fields.get("ref_text"),
            speaker_description=fields.get("speaker_description"),
        )
    except VoiceError as exc:
        return ApiError(exc.status, str(exc), exc.param).response()
    return web.json_response({"success": True, "voice": voice})


async def handle_voice_list(request: web.Request) -> web.Response:
    store = request.app[VOICES_KEY]
    return web.json_response(
        {"voices": [SPEAKER, *store.names()], "uploaded_voices": store.infos()}
    )


async def handle_voice_delete(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    try:
        voice = request.app[VOICES_KEY].delete(name)
    except VoiceError as exc:
        return ApiError(exc.status, str(exc), exc.param).response()
    return web.json_response({"success": True, "name": voice["name"], "voice": voice})


def make_app(
    engine: Engine,
    voices_dir: str | Path | None = None,
    served_model_name: str = SERVED_MODEL_NAME,
) -> web.Application:
    """The server's application; `voices_dir=None` uses a fresh temporary folder."""
    app = web.Application()
    app[ENGINE_KEY] = engine
    app[METRICS_KEY] = ServerMetrics()
    app[MODEL_KEY] = served_model_name
    app[STARTED_AT_KEY] = time.time()
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
    app.router.add_get("/health", handle_health)
    app.router.add_get("/v1/models", handle_models)
    app.router.add_get("/version", handle_version)
    app.router.add_get("/metrics", handle_metrics)
    app.router.add_post("/v1/audio/voices", handle_voice_upload)
    app.router.add_get("/v1/audio/voices", handle_voice_list)
    app.router.add_delete("/v1/audio/voices/{name}", handle_voice_delete)
    return app
