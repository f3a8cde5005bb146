"""What one request observed, as the receive paths fill it and the record builders read it:
`Exchange` (an HTTP request), `WsExchange` (an agent-mode session), and the small helpers
both paths share (`describe` for an exception in one line, `is_stream_type`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from thetalker.data.prompts import Prompt

__all__ = [
    "ERROR_BODY_LIMIT",
    "Exchange",
    "WsExchange",
    "describe",
    "is_stream_type",
    "seen_failed",
]

# What is read of a body that is not the stream asked for (its error message, at most).
ERROR_BODY_LIMIT = 64 * 1024


@dataclass
class Exchange:
    """Raw observations of one request, filled on the receive path and processed later."""

    request_index: int
    prompt: Prompt
    warmup: bool
    scheduled: float | None = None  # open loop: perf_counter time it was due
    t_send: float | None = None
    t_end: float | None = None
    status: int | None = None
    content_type: str | None = None
    times: list[float] = field(default_factory=list)  # perf_counter at each non-empty piece
    pieces: list[bytes] = field(default_factory=list)
    ends: list[bool] = field(default_factory=list)  # piece ends a server chunk
    error_body: bytes = b""
    failure: tuple[str, str] | None = None  # (error type, message) seen on the receive path
    rate_header: str | None = None  # the response's sample-rate header, where the server has one
    trace: dict[str, Any] = field(default_factory=dict)  # `StampedBody`'s, the connector's
    on_wire: bool = False  # counted in flight by its sender (thetalker.client.sender)


def is_stream_type(content_type: str | None, sse: bool) -> bool:
    """Whether a response's type is the stream asked for: `text/event-stream` for SSE, else
    audio (or raw octets)."""
    content_type = (content_type or "").lower()
    if sse:
        return content_type == "text/event-stream"
    return content_type.startswith("audio/") or content_type == "application/octet-stream"


def describe(exc: BaseException) -> str:
    """An exception in one line: its type, and its message when it has one."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass
class WsExchange:
    """Raw observations of one session, filled on the receive path and processed later."""

    request_index: int
    prompt: Prompt
    warmup: bool
    scheduled: float | None = None  # open loop: perf_counter time it was due
    protocol: str = "websocket"
    t_send: float | None = None  # the connection was asked for
    t_open: float | None = None  # the handshake finished
    t_end: float | None = None
    status: int | None = None  # 101 once upgraded, else the handshake's HTTP status
    text_times: list[float] = field(default_factory=list)  # perf_counter at each input.text
    text_pieces: list[str] = field(default_factory=list)
    t_input_done: float | None = None
    times: list[float] = field(default_factory=list)  # perf_counter at each binary frame
    pieces: list[bytes] = field(default_factory=list)
    # (time, raw JSON text, frames received before it): frames after an audio.start are its
    events: list[tuple[float, str, int]] = field(default_factory=list)
    session_done: bool = False
    close_code: int | None = None
    failure: tuple[str, str] | None = None  # (error type, message) seen on the receive path
    on_wire: bool = False  # counted in flight by its sender (from the handshake's end)


def seen_failed(ex: Exchange | WsExchange, sse: bool) -> bool:
    """Whether a finished request has failed as far as the receive path can tell, without
    decoding anything (the progress lines during a point; the record may find more, e.g. a
    half sample at the end). A dropped arrival is no failure (the point's `n_failed`)."""
    if ex.failure is not None:
        return ex.failure[0] != "dropped"
    if not ex.pieces:
        return True  # no audio: `empty`, or an error body (which is not kept as a piece)
    if isinstance(ex, WsExchange):
        return False
    return (ex.status or 0) >= 400 or not is_stream_type(ex.content_type, sse)
