"""The agent mode: one request is one session on vllm-omni's `/v1/audio/speech/stream`.

The protocol is 0.30.0's (`vllm_omni/entrypoints/openai/serving_speech_stream.py`): the
client sends `session.config` first (the server waits 10 s for it, then 30 s between
messages), then `input.text` pieces, `input.done` (a flush: the utterance ends) and
`session.close`. The server answers per sentence (or clause, or the whole utterance, as
`split_granularity` says) `audio.start`, binary PCM frames and `audio.done`, then
`session.done` for the utterance; `error` when something fails (a refused config closes
the socket; a failed sentence is followed by its `audio.done` with `error: true`).

Text goes out on its own task at the pace of `thetalker.client.pacing` while the receive
loop stamps every frame and every server event on the same `perf_counter` clock as the HTTP
path. As there, the receive path only stamps and appends; the record is built afterwards
(`thetalker.client.ws_record`). Failures are data: a refused handshake, an `error`, a socket
closed before `session.done`, the timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from thetalker.api.speech import normalize_base_url
from thetalker.backends import ServerApi
from thetalker.client.events import BadEvent, load_event, short_text
from thetalker.client.exchange import WsExchange, describe
from thetalker.client.handoff import note_read
from thetalker.client.options import BenchOptions, server_api
from thetalker.client.pacing import load_trace, piece_offsets, text_pieces, words_per_s
from thetalker.client.receive import MAX_RESPONSE_BYTES, MAX_RESPONSE_READS, too_large, too_many
from thetalker.util.no_redirect import RedirectRefused

__all__ = [
    "STREAM_PATH",
    "MAX_FRAME_BYTES",
    "stream_url",
    "session_config",
    "TextPlan",
    "Wire",
    "run_agent_session",
    "run_session",
    "agent_session",
    "connect",
    "receive_frames",
    "send_text",
]

STREAM_PATH = "/v1/audio/speech/stream"
_CLOSE_TIMEOUT_S = 2.0
# The largest frame taken on every agent socket (a unit's whole file at 48 kHz is ~6 MB a
# minute); past it the socket fails (recorded) instead of the client buffering whatever a
# server sends. `connect` applies it, so no socket can leave it out. The same bound as an
# HTTP response's.
MAX_FRAME_BYTES = MAX_RESPONSE_BYTES
# And the most a whole session brings (frames and events): many frames each under the frame
# bound would otherwise fill memory until the timeout. Past it: `too_large`, as over HTTP.
MAX_SESSION_BYTES = MAX_RESPONSE_BYTES
# And the most messages (frames, events, empty ones too) it brings: an empty text frame
# weighs 0 bytes, yet each is held as an event (3.55 M of them in 10 s: 1.8 GB). The same
# figure as an HTTP response's reads; past it: `too_large`, naming the bound.
MAX_SESSION_MESSAGES = MAX_RESPONSE_READS
_INPUT_DONE = json.dumps({"type": "input.done"})
_SESSION_CLOSE = json.dumps({"type": "session.close"})


def stream_url(base_url: str, path: str = STREAM_PATH) -> str:
    """`ws://h:p/v1/audio/speech/stream` (`wss://` for https) from the base URL; `path` is
    the server's socket (its backend's `agent.path`)."""
    url = normalize_base_url(base_url)
    scheme, rest = url.split("://", 1)
    return ("wss" if scheme == "https" else "ws") + "://" + rest + path


def session_config(
    opts: BenchOptions, ref_audio_uri: str | None = None, api: ServerApi | None = None
) -> dict[str, Any]:
    """The first message of a session in the protocol of `api` (default: the one
    `opts.server` names): vllm-omni's `session.config`, Nari's `request.start`."""
    agent = (api or server_api(opts)).agent
    if agent is None:
        raise ValueError(f"server {opts.server} has no agent-mode socket")
    return agent.start(opts, ref_audio_uri)


@dataclass(frozen=True)
class TextPlan:
    """How a run paces its text: words per second, jitter, seed, or a trace's offsets."""

    words_per_s: float
    jitter: float
    seed: int
    trace: tuple[float, ...] | None = None

    @classmethod
    def for_run(cls, opts: BenchOptions) -> TextPlan:
        trace = load_trace(opts.text_trace) if opts.text_trace else None
        wps = words_per_s(opts.text_pace, opts.text_pace_unit)
        return cls(wps, opts.text_pace_jitter, opts.seed, trace)

    def pieces(self, text: str, request_index: int) -> tuple[list[str], list[float]]:
        whole = self.trace is None and self.words_per_s <= 0
        pieces = text_pieces(text, whole)
        offsets = piece_offsets(
            len(pieces), self.words_per_s, self.jitter, self.seed, request_index, self.trace
        )
        return pieces, offsets


async def _sleep_until(due: float) -> None:
    while (wait := due - time.perf_counter()) > 0:
        await asyncio.sleep(wait)


def _vllm_piece(_sequence: int, piece: str) -> str:
    return json.dumps({"type": "input.text", "text": piece})


def _vllm_done(_sequence: int) -> str:
    return _INPUT_DONE


async def send_text(
    ws: aiohttp.ClientWebSocketResponse,
    pieces: Sequence[str],
    offsets: Sequence[float],
    ex: WsExchange,
    piece_message: Callable[[int, str], str] = _vllm_piece,
    done_message: Callable[[int], str] = _vllm_done,
) -> None:
    """The text at its pace, then the end of input (vllm-omni's `input.text` and
    `input.done` unless told; `(sequence, piece)` numbers them from 0); stops quietly when
    the socket goes."""
    times, sent = ex.text_times, ex.text_pieces
    start: float | None = None  # the first piece's stamp: the offsets count from it
    try:
        for piece, offset in zip(pieces, offsets, strict=True):
            if start is not None:
                await _sleep_until(start + offset)
            t = time.perf_counter()
            if start is None:
                start = t - offset
            times.append(t)
            sent.append(piece)
            await ws.send_str(piece_message(len(sent) - 1, piece))
        ex.t_input_done = time.perf_counter()
        await ws.send_str(done_message(len(sent)))
    except (ConnectionError, aiohttp.ClientError, RuntimeError):
        return  # the server closed the socket: the receive loop records how


async def receive_frames(
    ws: aiohttp.ClientWebSocketResponse,
    ex: WsExchange,
    done: str = "session.done",
    on_done: Callable[[WsExchange, str], None] | None = None,
) -> None:
    """Stamp every frame and event until `done` (the protocol's last event; `on_done` reads
    it) or the socket closes. Nari's socket (thetalker.client.nari_socket) uses it too."""
    times, frames, events = ex.times, ex.pieces, ex.events
    binary, text = aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT
    marker = f'"{done}"'
    room = MAX_SESSION_BYTES  # bytes the session may still bring
    messages_left = MAX_SESSION_MESSAGES  # and messages
    while True:
        msg = await ws.receive()
        t = time.perf_counter()
        note_read(t)  # the record hand-off waits for a quiet moment
        if msg.type in (binary, text):
            room -= len(msg.data)
            if room < 0:
                ex.failure = ("too_large", too_large(MAX_SESSION_BYTES))
                return  # the socket closes with the session
            if not messages_left:
                why = too_many(MAX_SESSION_MESSAGES, "messages", "session")
                ex.failure = ("too_large", why)
                return
            messages_left -= 1
        if msg.type == binary:
            if msg.data:  # a frame with no bytes is no audio (as an empty HTTP piece)
                times.append(t)
                frames.append(msg.data)
        elif msg.type == text:
            events.append((t, msg.data, len(frames)))
            if marker in msg.data or '"error"' in msg.data:
                try:
                    kind = _event_type(msg.data)
                except BadEvent as exc:  # it fails its session, never the run
                    ex.failure = ("bad_event", str(exc))
                    return
                if kind == done:
                    ex.session_done = True
                    ex.t_end = t  # the session's end; closing the socket is not timed
                    if on_done is not None:
                        on_done(ex, msg.data)
                    return
                if kind == "error" and ex.failure is None:
                    ex.failure = ("ws_error", _event_message(msg.data))
        else:  # CLOSE, CLOSING, CLOSED, ERROR: the socket is gone before `done`
            ex.close_code = ws.close_code
            if ex.failure is None:
                ex.failure = ("closed_early", _closed_message(ws, msg, done))
            return


def _event_type(raw: str) -> str | None:
    """An event's `type`; BadEvent for one JSON cannot take (it fails the session)."""
    value = load_event(raw)
    return value.get("type") if isinstance(value, dict) else None


def _event_message(raw: str) -> str:
    """An `error` event's message: vllm-omni's top-level `message`, or Nari's
    `error.message` (with its `code`)."""
    try:
        value = load_event(raw)
    except BadEvent:
        return raw[:300]
    if not isinstance(value, dict):
        return raw[:300]
    nested = value.get("error")
    if "message" not in value and isinstance(nested, dict) and "message" in nested:
        code = f"{short_text(nested['code'])}: " if nested.get("code") else ""
        return (code + short_text(nested["message"]))[:300]
    return short_text(value.get("message", raw))


def _closed_message(
    ws: aiohttp.ClientWebSocketResponse, msg: aiohttp.WSMessage, done: str = "session.done"
) -> str:
    """Why the socket is gone before `done` (the protocol's last event)."""
    code = ws.close_code
    if msg.type == aiohttp.WSMsgType.ERROR:
        return f"the socket failed before {done}: {describe(msg.data)}"
    return f"the server closed the socket before {done} (close code {code})"


def connect(session: aiohttp.ClientSession, url: str, protocols: Sequence[str] = ()) -> Any:
    """The socket of one agent session (pings answered, a bounded close, a message at most
    `MAX_FRAME_BYTES`)."""
    return session.ws_connect(
        url,
        protocols=tuple(protocols),
        max_msg_size=MAX_FRAME_BYTES,
        autoping=True,
        timeout=aiohttp.ClientWSTimeout(ws_close=_CLOSE_TIMEOUT_S),
    )


@dataclass
class _Running:
    sender: asyncio.Task[None] | None = None  # the text's task, stopped when the session ends


@contextlib.asynccontextmanager
async def agent_session(
    ex: WsExchange, timeout_s: float, done: str, timeout_wins: bool
) -> AsyncIterator[_Running]:
    """One agent session's bounds, for every socket: at most `timeout_s`, its failures
    recorded (a refused handshake, no `done` in time, a lost connection), the end stamped
    and the text's task stopped; never raises except CancelledError. `timeout_wins`: a
    timeout replaces a failure recorded before it."""
    running = _Running()
    try:
        async with asyncio.timeout(timeout_s):
            yield running
    except RedirectRefused as exc:  # the session's trace: a redirect is never followed
        ex.status = exc.status
        ex.failure = ("http_status", f"the WebSocket handshake was refused: {exc.note}")
    except aiohttp.WSServerHandshakeError as exc:
        ex.status = exc.status
        ex.failure = ("http_status", f"the WebSocket handshake was refused: HTTP {exc.status}")
    except TimeoutError:
        timeout = ("timeout", f"no {done} within {timeout_s:g} s")
        ex.failure = timeout if timeout_wins else (ex.failure or timeout)
    except (aiohttp.ClientError, OSError) as exc:
        kind = "connection" if ex.t_open is None else "closed_early"
        ex.failure = ex.failure or (kind, describe(exc))
    finally:
        if ex.t_end is None:
            ex.t_end = time.perf_counter()
        sender = running.sender
        if sender is not None and not sender.done():
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender


@dataclass(frozen=True)
class Wire:
    """Where the agent sockets differ; the session's steps are the same on every one
    (`run_agent_session`). The defaults are vllm-omni's `/v1/audio/speech/stream`."""

    done: str = "session.done"  # the protocol's last event
    subprotocols: tuple[str, ...] = ()
    # A timeout replaces a failure recorded before it (vllm-omni); False: the first stays.
    timeout_wins: bool = True
    piece_message: Callable[[int, str], str] = _vllm_piece
    done_message: Callable[[int], str] = _vllm_done
    on_done: Callable[[WsExchange, str], None] | None = None  # reads the `done` event
    # The pieces regrouped before they go (Nari's cap on appends); None: as they are.
    regroup: Callable[[Sequence[str], Sequence[float]], tuple[list[str], list[float]]] | None = None
    close_message: str | None = _SESSION_CLOSE  # sent after `done`; None: the server closes


async def run_agent_session(
    wire: Wire,
    session: aiohttp.ClientSession,
    url: str,
    start: dict[str, Any],
    pieces: Sequence[str],
    offsets: Sequence[float],
    timeout_s: float,
    ex: WsExchange,
    on_open: Callable[[], None] | None = None,
) -> None:
    """One session on `wire`: the `start` message, the text at its pace, every frame until
    `done`; never raises except CancelledError. `on_open` is called when the handshake is
    done (the sender counts the session in flight from there)."""
    ex.t_send = time.perf_counter()
    start_text = json.dumps(start)
    if wire.regroup is not None:
        pieces, offsets = wire.regroup(pieces, offsets)
    async with (
        agent_session(ex, timeout_s, wire.done, wire.timeout_wins) as running,
        connect(session, url, wire.subprotocols) as ws,
    ):
        ex.t_open = time.perf_counter()
        ex.status = 101
        if on_open is not None:
            on_open()
        await ws.send_str(start_text)
        sender = send_text(ws, pieces, offsets, ex, wire.piece_message, wire.done_message)
        running.sender = asyncio.create_task(sender)
        await receive_frames(ws, ex, wire.done, wire.on_done)
        if ex.session_done and wire.close_message is not None:
            with contextlib.suppress(ConnectionError, aiohttp.ClientError):
                await ws.send_str(wire.close_message)


# vllm-omni's session: `session.config`, then `input.text`/`input.done`, `session.close`.
run_session = functools.partial(run_agent_session, Wire())
