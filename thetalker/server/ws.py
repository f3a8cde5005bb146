"""`/v1/audio/speech/stream`: 0.30.0's WebSocket of text in, audio out, over the engine.

The messages are vllm-omni 0.30.0's (`serving_speech_stream.py`): `session.config` first
(within 10 s; it may be sent again between utterances), then `input.text` pieces,
`input.done` (a flush: the utterance ends, the connection stays) and `session.close`. Per
unit of the text (`split_granularity`: the whole utterance, sentences or clauses, see
`thetalker.server.units`) the server sends `audio.start` (`sentence_text`, `format`, and with
`stream_audio` the nominal `sample_rate` 24000 that 0.30.0 states whatever the model's rate:
a client must not trust it), the audio as binary frames (with `stream_audio`, one frame per
engine piece, PCM; else the unit's whole file in `response_format`) and `audio.done`
(`total_bytes`, `error`); `session.done` after each `input.done`. Errors are `error`
messages: a refused config (and no config within the timeout) ends the connection; a unit
that fails to synthesize gets `error` ("Generation failed for utterance U, sentence S: ...",
`partial_audio` when some of it went out) and its `audio.done` with `error: true`, and the
session goes on. 30 s without a message while nothing is being synthesized ends it; so does
an utterance not ended by `input.done` within `ServerLimits.utterance_timeout_s` (a trickle of
text keeps a session active, not alive forever), and a client that leaves a send unread for
`write_timeout_s` is aborted (logged).

Unlike 0.30.0, which synthesizes a unit inside its receive loop, text is read while audio is
made: each unit goes to the engine's scheduler as soon as the splitter completes it, and the
units of a session are synthesized one after another (one scheduler stream each), in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from aiohttp import WSMsgType, web

from thetalker.server.contract import (
    ENGINE_KEY,
    LIMITS_KEY,
    MODEL_KEY,
    VOICES_KEY,
    ApiError,
    parse_speech_request,
)
from thetalker.server.formats import wav_bytes
from thetalker.server.pieces import MAX_INPUT_CHARS
from thetalker.server.units import GRANULARITIES, UnitSplitter

__all__ = ["STREAM_PATH", "SessionConfig", "parse_session_config", "handle_speech_stream"]

log = logging.getLogger("thetalker.server")

STREAM_PATH = "/v1/audio/speech/stream"
CONFIG_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 30.0
NOMINAL_SAMPLE_RATE = 24000  # what 0.30.0's audio.start states for every model
MAX_CONFIG_MESSAGE = 4 * 1024 * 1024
MAX_TEXT_MESSAGE = 128 * 1024
_RESPONSE_FORMATS = ("wav", "pcm", "flac", "mp3", "opus")
_TASK_TYPES = ("CustomVoice", "VoiceDesign", "Base")
# session.config keys passed on to each unit's speech request (0.30.0 builds one per unit).
_REQUEST_KEYS = ("model", "task_type", "language", "instructions", "max_new_tokens", "seed")
_REQUEST_KEYS += ("initial_codec_chunk_frames", "ref_audio", "ref_text")


class ConfigError(ValueError):
    """A session.config that cannot be used (0.30.0: "Invalid session config: ...")."""


@dataclass(frozen=True)
class SessionConfig:
    """A validated session.config: the speech request of each unit, and how units are cut."""

    body: dict[str, Any]  # a /v1/audio/speech body without `input`
    response_format: str
    stream_audio: bool
    split_granularity: str


def parse_session_config(msg: dict[str, Any]) -> SessionConfig:
    """0.30.0's `StreamingSpeechSessionConfig` rules; raises ConfigError naming the field."""

    def bad(field: str, why: str) -> ConfigError:
        return ConfigError(f"Invalid session config: {field}: {why}")

    fmt = msg.get("response_format", "wav")
    if fmt not in _RESPONSE_FORMATS:
        raise bad("response_format", f"must be one of {', '.join(_RESPONSE_FORMATS)}")
    task = msg.get("task_type")
    if task is not None and task not in _TASK_TYPES:
        raise bad("task_type", f"must be one of {', '.join(_TASK_TYPES)}")
    split = msg.get("split_granularity", "none")
    if split not in GRANULARITIES:
        raise bad("split_granularity", f"must be one of {', '.join(GRANULARITIES)}")
    stream_audio = msg.get("stream_audio", False)
    if not isinstance(stream_audio, bool):
        raise bad("stream_audio", "must be a boolean")
    speed = msg.get("speed", 1.0)
    if speed is not None and (
        isinstance(speed, bool) or not isinstance(speed, int | float) or not 0.25 <= speed <= 4.0
    ):
        raise bad("speed", "must be a number between 0.25 and 4.0")
    if stream_audio and fmt != "pcm":
        raise bad("stream_audio", f"requires response_format='pcm', got '{fmt}'")
    if stream_audio and speed not in (None, 1.0):
        raise bad("speed", "WebSocket stream_audio=true currently requires speed=1.0")
    for key in ("voice", "speaker", "model", "language", "instructions", "ref_text"):
        if msg.get(key) is not None and not isinstance(msg[key], str):
            raise bad(key, "must be a string")
    body = {k: msg[k] for k in _REQUEST_KEYS if msg.get(k) is not None}
    voice = msg.get("voice", msg.get("speaker"))
    if voice is not None:
        body["voice"] = voice
    body["response_format"] = fmt
    body["speed"] = 1.0 if speed is None else speed
    if stream_audio:
        body["stream_format"] = "audio"
    return SessionConfig(body, fmt, stream_audio, split)


class _Session:
    """One connection: a reader (this handler's loop) and a synthesizer task, in order."""

    def __init__(self, request: web.Request, ws: web.WebSocketResponse) -> None:
        self.app = request.app
        self.ws = ws
        self.engine = request.app[ENGINE_KEY]
        self.config: SessionConfig | None = None
        self.splitter = UnitSplitter("none")
        self.queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.busy = False
        self.utterance_open = False
        self.utterance_chars = 0
        self.utterance_deadline: float | None = None  # loop time its input.done is due by
        self.limits = request.app[LIMITS_KEY]
        self.transport = request.transport

    async def send_json(self, payload: dict[str, Any]) -> None:
        await self._send(self.ws.send_json(payload))

    async def send_bytes(self, data: bytes) -> None:
        await self._send(self.ws.send_bytes(data))

    async def _send(self, sending: Any) -> None:
        """A send with a deadline: a client that stops reading is aborted (a close would wait
        on it), logged, and the session ends."""
        timeout_s = self.limits.write_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                await sending
        except TimeoutError:
            log.warning("WebSocket client stopped reading for %g s: connection aborted", timeout_s)
            if self.transport is not None:
                self.transport.abort()
            raise ConnectionResetError("the client stopped reading") from None

    async def error(self, message: str, partial_audio: bool = False) -> None:
        payload: dict[str, Any] = {"type": "error", "message": message}
        if partial_audio:
            payload.update(partial_audio=True, action="discard")
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.send_json(payload)

    # --- the synthesizer --------------------------------------------------------------

    async def synthesize(self) -> None:
        utterance = sentence = 0
        while True:
            kind, value = await self.queue.get()
            self.busy = True
            try:
                if kind == "unit":
                    config, text = value
                    await self.speak(config, text, utterance, sentence)
                    sentence += 1
                else:  # an input.done
                    done = {"type": "session.done", "utterance_index": utterance}
                    done["total_sentences"] = sentence
                    await self.send_json(done)
                    utterance, sentence = utterance + 1, 0
            finally:
                self.busy = not self.queue.empty()

    async def speak(self, config: SessionConfig, text: str, utterance: int, sentence: int) -> None:
        start: dict[str, Any] = {
            "type": "audio.start",
            "utterance_index": utterance,
            "sentence_index": sentence,
            "sentence_text": text,
            "format": config.response_format,
        }
        if config.stream_audio:
            start["sample_rate"] = NOMINAL_SAMPLE_RATE
        await self.send_json(start)
        sent = 0
        failed = False
        try:
            speech = parse_speech_request(
                {**config.body, "input": text}, self.app[MODEL_KEY], self.app[VOICES_KEY]
            )
            stream = self.engine.stream(speech.text, speech.speed, chunked=config.stream_audio)
            async with aclosing(stream) as pieces:
                if config.stream_audio:
                    async for pcm in pieces:
                        if pcm:
                            await self.send_bytes(pcm)
                            sent += len(pcm)
                else:
                    pcm = b"".join([p async for p in pieces])
                    data = _whole_file(pcm, config.response_format, self.engine.sample_rate)
                    await self.send_bytes(data)
                    sent = len(data)
        except (ConnectionError, asyncio.CancelledError):
            raise
        except Exception as exc:  # the unit failed; 0.30.0 says so and goes on
            failed = True
            message = exc.message.splitlines()[0] if isinstance(exc, ApiError) else str(exc)
            log.warning("stream unit %d/%d failed: %s", utterance, sentence, message)
            await self.error(
                f"Generation failed for utterance {utterance}, sentence {sentence}: {message}",
                partial_audio=sent > 0,
            )
        finally:
            done = {"type": "audio.done", "utterance_index": utterance, "sentence_index": sentence}
            done.update(total_bytes=sent, error=failed)
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.send_json(done)

    # --- the reader -------------------------------------------------------------------

    async def read(self) -> None:
        """Messages until session.close, a fatal error, the timeout or the socket's end."""
        loop = asyncio.get_running_loop()
        while True:
            timeout = CONFIG_TIMEOUT_S if self.config is None else IDLE_TIMEOUT_S
            due = self.utterance_deadline if self.utterance_open else None
            if due is not None:
                timeout = min(timeout, max(0.0, due - loop.time()))
            try:
                msg = await self.ws.receive(timeout=timeout)
            except TimeoutError:
                if due is not None and loop.time() >= due:
                    limit = self.limits.utterance_timeout_s
                    log.warning(
                        "WebSocket utterance open for %g s without input.done: closed", limit
                    )
                    await self.error(f"Utterance timeout: no input.done within {limit:g} s")
                    return
                if self.config is not None and (self.busy or not self.queue.empty()):
                    continue  # audio is being made: not idle
                if self.config is None:
                    await self.error("Timeout waiting for session.config")
                else:
                    await self.error("Idle timeout: no message received")
                return
            if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED):
                return
            if msg.type == WSMsgType.ERROR:
                return
            if msg.type != WSMsgType.TEXT:
                await self.error("WebSocket messages must be JSON text")
                if self.config is None:
                    return
                continue
            if not await self.handle(msg.data):
                return

    async def handle(self, raw: str) -> bool:
        """One client message; False ends the connection."""
        try:
            msg = json.loads(raw)
        except json.JSONDecodeError:
            await self.error("Invalid JSON message")
            return self.config is not None
        if not isinstance(msg, dict):
            await self.error("WebSocket messages must be JSON objects")
            return self.config is not None
        kind = msg.get("type")
        limit = MAX_CONFIG_MESSAGE if kind == "session.config" else MAX_TEXT_MESSAGE
        if len(raw) > limit:
            await self.error(f"{kind or 'input.text'} message too large")
            return self.config is not None
        if kind == "session.config":
            if self.utterance_open:
                await self.error(
                    "session.config cannot be applied while an utterance is in progress; "
                    "send input.done first"
                )
                return True
            try:
                config = parse_session_config(msg)
                model = config.body.get("model")
                if model is not None and model != self.app[MODEL_KEY]:
                    raise ConfigError(f"The model `{model}` does not exist.")
            except ConfigError as exc:
                await self.error(str(exc))
                return self.config is not None  # the first config refused: the end
            self.config = config
            self.splitter = UnitSplitter(config.split_granularity)
            return True
        if self.config is None:
            await self.error(f"Expected session.config, got: {kind}")
            return False
        if kind == "input.text":
            text = msg.get("text", "")
            if not isinstance(text, str):
                await self.error("input.text requires a string value")
                return True
            self.utterance_chars += len(text)
            if self.utterance_chars > MAX_INPUT_CHARS:
                await self.error(f"the utterance is longer than {MAX_INPUT_CHARS} characters")
                return False
            if text and not self.utterance_open:
                self.utterance_open = True
                due = asyncio.get_running_loop().time() + self.limits.utterance_timeout_s
                self.utterance_deadline = due
            self.enqueue(self.splitter.feed(text))
        elif kind == "input.done":
            self.enqueue(self.splitter.flush())
            self.queue.put_nowait(("done", None))
            self.utterance_open = False
            self.utterance_chars = 0
        elif kind == "session.close":
            return False
        else:
            await self.error(f"Unknown message type: {kind}")
        return True

    def enqueue(self, units: list[str]) -> None:
        for unit in units:
            self.busy = True
            self.queue.put_nowait(("unit", (self.config, unit)))

    async def drain(self, synthesizer: asyncio.Task[None]) -> None:
        """Wait for what was asked before session.close (0.30.0 answers it all first)."""
        while (self.busy or not self.queue.empty()) and not synthesizer.done():
            await asyncio.sleep(0.01)


def _whole_file(pcm: bytes, fmt: str, sample_rate: int) -> bytes:
    if fmt == "wav":
        return wav_bytes(pcm, sample_rate)
    if fmt == "pcm":
        return pcm
    if fmt == "flac":
        from thetalker.server.formats import flac_bytes

        return flac_bytes(pcm, sample_rate)
    raise ValueError(f"response_format '{fmt}' is not available on this server; use wav or pcm")


async def handle_speech_stream(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(max_msg_size=MAX_CONFIG_MESSAGE, autoping=True)
    await ws.prepare(request)
    session = _Session(request, ws)
    synthesizer = asyncio.create_task(session.synthesize())
    try:
        await session.read()
        if not ws.closed and not synthesizer.done():
            await session.drain(synthesizer)
    except (ConnectionError, RuntimeError):
        pass  # the client left
    finally:
        synthesizer.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await synthesizer
        with contextlib.suppress(ConnectionError, RuntimeError):
            await ws.close()
    return ws
