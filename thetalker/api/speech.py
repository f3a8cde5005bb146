"""The speech API as this project speaks it: URLs, the contract's constants, voices, errors.

One place for what the client, the server lifecycle (`thetalker.lifecycle.launch`) and the console
scripts share about `/v1/audio/speech` and `/v1/audio/voices` (docs/vllm-omni-0.30.md,
and vllm-omni 0.30.0's own serving code): the base URL form, the task types and formats, the
limits, voice registration, listing and deletion over HTTP, and the one parser of error
bodies. Errors here name the request and the server's words, never a command-line flag.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

from thetalker.api.auth import auth_headers
from thetalker.data.wavio import REFERENCE_CLIP_S, parse_wav_header
from thetalker.util.no_redirect import redirect_answer
from thetalker.util.redact import redact_url

__all__ = [
    "TASK_TYPES",
    "STREAM_FORMATS",
    "RESPONSE_FORMATS",
    "MAX_INSTRUCTIONS_CHARS",
    "REFERENCE_CLIP_S",
    "SPEECH_PATH",
    "VOICES_PATH",
    "VOICES_LIST_HINT",
    "DEFAULT_CONSENT",
    "SpeechApiError",
    "normalize_base_url",
    "speech_url",
    "voices_url",
    "error_message",
    "register_voice",
    "register_voice_blocking",
    "list_voices",
    "delete_voice",
]

TASK_TYPES = ("CustomVoice", "Base", "VoiceDesign")
STREAM_FORMATS = ("audio", "sse")
RESPONSE_FORMATS = ("pcm", "wav")  # the only two the API streams
MAX_INSTRUCTIONS_CHARS = 500  # vllm-omni's default --tts-max-instructions-length
SPEECH_PATH = "/v1/audio/speech"
VOICES_PATH = "/v1/audio/voices"
# Where a server says which speakers and uploaded voices it has.
VOICES_LIST_HINT = f"the server lists its voices at GET {VOICES_PATH}"
# vllm-omni requires a consent field; what it holds is the operator's statement.
DEFAULT_CONSENT = "thetalker: the speaker consented to this reference recording"
_SHOWN_CHARS = 300  # of a text error body


class SpeechApiError(RuntimeError):
    """The server refused a request or could not be reached; the message says which request,
    the HTTP status and the server's error text. `status` is None when no answer came."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def normalize_base_url(url: str) -> str:
    """`http://h:p` from `http://h:p/`, `http://h:p/v1` or `http://h:p/v1/`."""
    url = url.rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url


def speech_url(base_url: str) -> str:
    return normalize_base_url(base_url) + SPEECH_PATH


def voices_url(base_url: str, name: str | None = None) -> str:
    """The voices collection, or one voice: its name is one path segment, URL-encoded (so
    `a?b` is the voice `a?b`, not the voice `a` with a query)."""
    url = normalize_base_url(base_url) + VOICES_PATH
    return url if name is None else f"{url}/{quote(name, safe='')}"


def _is_binary(content_type: str, body: bytes) -> bool:
    if content_type.startswith("audio/") or content_type == "application/octet-stream":
        return True
    if b"\0" in body:
        return True
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def error_message(
    body: bytes, status: int | None, content_type: str | None = None, limit: int | None = None
) -> str:
    """What an error body says: the `message` of `{"error": {...}}` (OpenAI and vllm-omni),
    an `{"error": "..."}` string, FastAPI's `detail`, else the start of the text. A body that
    is not text (audio, binary) is described by its type and size, never pasted. `limit`:
    how many bytes were read at most, so a body that filled it is "at least" that size."""
    if not body:
        return f"HTTP {status} with an empty body"
    ctype = (content_type or "").split(";")[0].strip().lower()
    if _is_binary(ctype, body):
        size = f"at least {len(body)}" if limit is not None and len(body) >= limit else len(body)
        return f"{ctype or 'binary'} body of {size} bytes"
    text = body.decode("utf-8").strip()
    # RecursionError: a server's body nested past the parser's depth (or too deep to print)
    # is shown as its text, never ends the record writer.
    with contextlib.suppress(ValueError, RecursionError):
        data = json.loads(text)
        if isinstance(data, dict):
            err = data.get("error", data)
            if isinstance(err, dict) and err.get("message"):
                return str(err["message"])
            if isinstance(err, str):
                return err
            if data.get("detail"):
                return _detail_text(data["detail"])
    return text[:_SHOWN_CHARS] or f"HTTP {status} with an empty body"


def _detail_text(detail: Any) -> str:
    """FastAPI's `detail`: a string, or a validation error's list of `{loc, msg}`, said as
    `body.task_type: Extra inputs are not permitted` (the field named, joined by `; `)."""
    if isinstance(detail, list) and detail and all(isinstance(d, dict) for d in detail):
        parts = []
        for item in detail:
            loc = ".".join(str(p) for p in item.get("loc") or ())
            msg = str(item.get("msg", ""))
            parts.append(f"{loc}: {msg}" if loc else msg)
        return "; ".join(parts)
    return str(detail)


async def _json_reply(resp: aiohttp.ClientResponse, what: str) -> Any:
    """The JSON of a 2xx answer, else SpeechApiError with the error body's message."""
    note = redirect_answer(resp)  # never followed: the request carries the API key
    if note is not None:
        raise SpeechApiError(f"{what}: {note} ({resp.method} {resp.url})", resp.status)
    body = await resp.read()
    try:
        data = json.loads(body) if body else {}
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
        data = None
    if resp.status >= 400 or data is None:
        message = error_message(body, resp.status, resp.content_type)
        tried = f"{resp.method} {resp.url}"  # a 404 says little without the URL it answered
        raise SpeechApiError(f"{what}: HTTP {resp.status}: {message} ({tried})", resp.status)
    if isinstance(data, dict) and data.get("success") is False:
        raise SpeechApiError(f"{what}: refused: {error_message(body, resp.status)}", resp.status)
    return data


@contextlib.asynccontextmanager
async def _reaching(url: str, what: str) -> AsyncIterator[None]:
    """Connection failures and timeouts as SpeechApiError naming the URL."""
    try:
        yield
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        text = str(exc).strip() or type(exc).__name__
        raise SpeechApiError(f"{what}: cannot reach {redact_url(url)}: {text}") from None


async def register_voice(
    session: aiohttp.ClientSession,
    base_url: str,
    name: str,
    audio_path: str | Path,
    ref_text: str | None = None,
    consent: str = DEFAULT_CONSENT,
) -> dict[str, Any]:
    """Upload `audio_path` (a WAV; WavError naming it otherwise) as voice `name`
    (re-upload overwrites); returns the server's voice description."""
    audio_path = Path(audio_path)
    data = audio_path.read_bytes()
    parse_wav_header(data, source=str(audio_path))
    form = aiohttp.FormData()
    form.add_field("name", name)
    form.add_field("consent", consent)
    form.add_field("audio_sample", data, filename=audio_path.name, content_type="audio/wav")
    if ref_text:
        form.add_field("ref_text", ref_text)
    url, what = voices_url(base_url), f"register voice {name!r}"
    async with _reaching(url, what), session.post(url, data=form, allow_redirects=False) as resp:
        reply = await _json_reply(resp, what)
    return reply.get("voice", reply) if isinstance(reply, dict) else {"reply": reply}


def register_voice_blocking(
    base_url: str,
    name: str,
    audio_path: str | Path,
    ref_text: str | None = None,
    consent: str = DEFAULT_CONSENT,
    timeout_s: float = 120.0,
) -> dict[str, Any]:
    """`register_voice` for synchronous code, on a session of its own (run on a thread of
    its own, so it works whether or not the caller's thread has an event loop running)."""

    async def upload() -> dict[str, Any]:
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        # A server started with an API key: the key from its variable (thetalker.api.auth).
        async with aiohttp.ClientSession(timeout=timeout, headers=auth_headers()) as session:
            return await register_voice(session, base_url, name, audio_path, ref_text, consent)

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="voice") as pool:
        return pool.submit(asyncio.run, upload()).result()


async def list_voices(session: aiohttp.ClientSession, base_url: str) -> dict[str, Any]:
    url = voices_url(base_url)
    async with _reaching(url, "list voices"), session.get(url, allow_redirects=False) as resp:
        return await _json_reply(resp, "list voices")


async def delete_voice(session: aiohttp.ClientSession, base_url: str, name: str) -> dict[str, Any]:
    url, what = voices_url(base_url, name), f"delete voice {name!r}"
    async with _reaching(url, what), session.delete(url, allow_redirects=False) as resp:
        return await _json_reply(resp, what)
