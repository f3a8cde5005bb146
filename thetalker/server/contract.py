"""The local server's request contract: names, limits, the app's state keys, the error type
and the parser of a speech request body (vllm-omni 0.30.0's request model and its checks).

Shared by the HTTP handlers (`app`) and the WebSocket handler (`ws`), which import it; it
imports neither. Contract: vllm-omni 0.30.0's speech API (docs/vllm-omni-0.30.md; its own
serving code in tests/contract).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from thetalker.server.engine import Engine
from thetalker.server.formats import flac_available
from thetalker.server.guard import ServerLimits
from thetalker.server.pieces import MAX_INPUT_CHARS
from thetalker.server.prom import ServerMetrics
from thetalker.server.voices import VoiceStore

__all__ = [
    "SERVED_MODEL_NAME",
    "SPEAKER",
    "SPEAKERS",
    "TASK_TYPES",
    "RESPONSE_FORMATS",
    "STREAM_FORMATS",
    "CONTENT_TYPES",
    "SSE_CONTENT_TYPE",
    "MAX_INSTRUCTIONS_CHARS",
    "SAMPLES_PER_FRAME",
    "ENGINE_KEY",
    "VOICES_KEY",
    "METRICS_KEY",
    "MODEL_KEY",
    "STARTED_AT_KEY",
    "LIMITS_KEY",
    "ApiError",
    "invalid",
    "refused",
    "SpeechRequest",
    "parse_speech_request",
    "read_json_body",
]

SERVED_MODEL_NAME = "piper-joe"
SPEAKER = "joe"
SPEAKERS = (SPEAKER,)  # the built-in speakers
TASK_TYPES = ("CustomVoice", "VoiceDesign", "Base")
RESPONSE_FORMATS = ("wav", "pcm", "flac", "mp3", "opus")
STREAM_FORMATS = ("audio", "sse")
CONTENT_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", "flac": "audio/flac"}
SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"
MAX_INSTRUCTIONS_CHARS = 500
# Piper's VITS decoder makes 256 samples per frame: "output tokens" of the usage block.
SAMPLES_PER_FRAME = 256

ENGINE_KEY = web.AppKey("engine", Engine)
VOICES_KEY = web.AppKey("voices", VoiceStore)
METRICS_KEY = web.AppKey("metrics", ServerMetrics)
MODEL_KEY = web.AppKey("served_model_name", str)
STARTED_AT_KEY = web.AppKey("started_at", float)
LIMITS_KEY = web.AppKey("limits", ServerLimits)


class ApiError(Exception):
    """An error answered before any audio, as `{"error": {message, type, param, code}}`.

    `kind` is the body's `type`; by default the one 0.30.0 gives for the status.
    """

    def __init__(
        self, status: int, message: str, param: str | None = None, kind: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind or {400: "BadRequestError", 404: "NotFoundError"}.get(
            status, "InternalServerError"
        )

    def response(self) -> web.Response:
        body = {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.status,
        }
        return web.json_response({"error": body}, status=self.status)


def invalid(field: str, message: str, value: Any = None, kind: str = "value_error") -> ApiError:
    """A request-model (pydantic-level) error as vLLM's handler renders it."""
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    detail = (
        f"{{'type': '{kind}', 'loc': ('body', '{field}'), 'msg': '{message}', 'input': {shown}}}"
    )
    return ApiError(400, f"1 validation error:\n  {detail}", f"body.{field}", "Bad Request")


def refused(message: str) -> ApiError:
    """A model-level (adapter) refusal: type BadRequestError, param null."""
    return ApiError(400, message)


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
        raise invalid(key, "Input should be a valid integer", value, "int_type")
    if low is not None and value < low:
        raise invalid(key, f"Input should be greater than or equal to {low}", value)
    if high is not None and value > high:
        raise invalid(key, f"Input should be less than or equal to {high}", value)


def _optional_str(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise invalid(key, "Input should be a valid string", value, "string_type")
    return value


def _enum(body: dict[str, Any], key: str, allowed: tuple[str, ...]) -> str | None:
    value = _optional_str(body, key)
    if value is not None and value not in allowed:
        names = ", ".join(f"'{a}'" for a in allowed)
        raise invalid(key, f"Input should be {names}", value, "literal_error")
    return value


def _voice_name(body: dict[str, Any]) -> tuple[str, str]:
    """(the voice asked for, the field it came in): `voice` (a name or {"id": name}) wins."""
    field = "voice" if body.get("voice") is not None else "speaker"
    value = body.get(field)
    if value is None:
        return SPEAKER, field
    if isinstance(value, dict):
        value = value.get("id")
    if not isinstance(value, str):
        raise invalid(field, 'Input should be a string or {"id": <name>}', value, "string_type")
    return value, field


def _check_text(text: str) -> None:
    if not text.strip():
        raise refused("Input text cannot be empty")
    if len(text) > MAX_INPUT_CHARS:
        raise refused(
            f"Input text is {len(text)} characters long; this server takes at most "
            f"{MAX_INPUT_CHARS} (MAX_INPUT_CHARS)"
        )
    if "\x00" in text:
        raise refused("Input text must not contain NUL characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise refused("Input text is not valid Unicode (lone surrogate)") from None


def parse_speech_request(
    body: Any, served_model_name: str, uploaded_voices: VoiceStore | None = None
) -> SpeechRequest:
    """Validate a request body against the contract; raises ApiError (400/404) on bad input."""
    if not isinstance(body, dict):
        raise invalid(
            "body", "Input should be a valid dictionary", type(body).__name__, "dict_type"
        )
    if "input" not in body:
        raise invalid("input", "Field required", None, "missing")
    text = body.get("input")
    if not isinstance(text, str):
        raise invalid("input", "Input should be a valid string", text, "string_type")
    response_format = _enum(body, "response_format", RESPONSE_FORMATS) or "wav"
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise invalid("stream", "Input should be a valid boolean", stream, "bool_type")
    stream_format = _enum(body, "stream_format", STREAM_FORMATS)
    # 0.30.0: stream_format "audio" streams raw whatever `stream` says; "sse", or `stream: true`
    # alone, is SSE.
    if stream_format == "audio":
        mode = "audio"
    elif stream_format == "sse" or stream is True:
        mode = "sse"
    else:
        mode = "file"
    if mode != "file" and response_format not in ("pcm", "wav"):
        raise invalid(
            "response_format",
            f"Value error, streaming supports only 'pcm' or 'wav', not '{response_format}'",
            response_format,
        )
    task_type = _enum(body, "task_type", TASK_TYPES) or "CustomVoice"
    speed = body.get("speed", 1.0)
    if speed is None:
        speed = 1.0
    if not isinstance(speed, int | float) or isinstance(speed, bool):
        raise invalid("speed", "Input should be a valid number", speed, "float_type")
    if not 0.25 <= speed <= 4.0:
        raise invalid("speed", "Input should be between 0.25 and 4.0", speed)
    _optional_str(body, "language")
    _optional_str(body, "ref_text")
    instructions = _optional_str(body, "instructions")
    _optional_int(body, "max_new_tokens", 1, None)
    _optional_int(body, "seed", None, None)
    _optional_int(body, "initial_codec_chunk_frames", 0, None)
    _optional_int(body, "sample_rate", None, None)
    voice, voice_field = _voice_name(body)
    model = _optional_str(body, "model")

    # Model-level checks, after the request model (0.30.0's adapters).
    if model is not None and model != served_model_name:
        raise ApiError(404, f"The model `{model}` does not exist.", "model")
    _check_text(text)
    if mode != "file" and speed != 1.0:
        raise refused("speed is not supported while streaming; use speed 1.0")
    if body.get("max_new_tokens") is not None and body["max_new_tokens"] > 4096:
        raise refused("max_new_tokens must be at most 4096")
    if body.get("sample_rate") is not None:
        raise refused("sample_rate is not supported")
    if mode == "file" and response_format in ("mp3", "opus"):
        raise refused(
            f"response_format '{response_format}' is not available on this server; "
            "use wav, pcm or flac"
        )
    if mode == "file" and response_format == "flac" and not flac_available():
        raise refused("response_format 'flac' needs the soundfile package, which is not installed")
    if task_type in ("Base", "VoiceDesign"):
        what = "clone voices" if task_type == "Base" else "design voices"
        raise refused(
            f"task_type '{task_type}' is not supported: this voice (Piper en_US-joe-medium) "
            f"cannot {what}; use task_type 'CustomVoice' with speaker '{SPEAKER}'"
        )
    if body.get("ref_text") is not None:
        raise refused("'ref_text' is only for task_type 'Base'")
    if instructions is not None and len(instructions) > MAX_INSTRUCTIONS_CHARS:
        raise refused(f"instructions is longer than {MAX_INSTRUCTIONS_CHARS} characters")
    if voice.casefold() not in SPEAKERS:
        if uploaded_voices is not None and voice in uploaded_voices:
            raise refused(
                f"voice '{voice}' is an uploaded voice: this voice (Piper en_US-joe-medium) "
                f"cannot clone voices; valid speakers: {', '.join(SPEAKERS)}"
            )
        raise refused(f"Invalid voice '{voice}'. Supported: {', '.join(SPEAKERS)}")
    del voice_field
    return SpeechRequest(text=text, response_format=response_format, mode=mode, speed=float(speed))


async def read_json_body(request: web.Request) -> Any:
    """The JSON body, within the body timeout; ApiError 400/408 for what is not JSON."""
    if request.content_type != "application/json":
        raise invalid(
            "body",
            f"Content-Type must be application/json, got '{request.content_type}'",
            None,
            "model_attributes_type",
        )
    limits = request.app[LIMITS_KEY]
    try:
        async with asyncio.timeout(limits.body_timeout_s):
            raw = await request.read()
    except TimeoutError:
        raise ApiError(
            408, f"request body not received within {limits.body_timeout_s:g} s"
        ) from None
    except web.HTTPException:
        raise
    except Exception as exc:  # a bad Content-Encoding, a broken chunked body
        raise invalid("body", f"body cannot be read: {type(exc).__name__}", None) from None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise invalid("body", "JSON decode error", None, "json_invalid") from None
    except RecursionError:
        raise invalid("body", "JSON nested too deeply", None, "json_invalid") from None
