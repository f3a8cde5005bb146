"""The agent mode on Nari's `nari.speech.v1` socket: the text streams into one request.

One connection carries one utterance (nari.md, "WebSocket"): the server greets with
`session.created`; the client sends `request.start` (answered `request.configured`), then
the text as `input_text.append` messages numbered from 0, then `input_text.end` whose
`sequence` is the number of appends. The server acks each (`input_text.ack`), announces
`response.started` when text is first admitted, streams binary PCM frames from then, and
ends with `response.done` (`stop_reason`, `audio_chunks`) and close 1000. An `error` event
(`{"error": {"type", "code", "message"}}`) precedes its close.

Same `WsExchange` and the same stamping as vllm-omni's session (thetalker.client.websocket):
the text goes out at its pace on its own task, without waiting for acks (the pace is what
is measured; the server does not require the wait), and the record is built afterwards by
thetalker.client.ws_record.

The server closes a connection past 1,024 appends (`too_many_input_events`, 1008): a text
of more pieces goes as groups of consecutive pieces (`batch_pieces`), each sent when its
last piece is due, so no word goes early and the cap holds.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp

from thetalker.client.events import BadEvent, load_event
from thetalker.client.exchange import WsExchange
from thetalker.client.websocket import (
    agent_session,
    connect,
    receive_frames,
    send_text,
)

__all__ = ["SUBPROTOCOL", "MAX_APPENDS", "batch_pieces", "run_nari_session"]

SUBPROTOCOL = "nari.speech.v1"
# Nari's per-request cap on `input_text.append` events (`.../config.py`, nari.md "Limits").
MAX_APPENDS = 1024


def batch_pieces(
    pieces: Sequence[str], offsets: Sequence[float], cap: int = MAX_APPENDS
) -> tuple[list[str], list[float]]:
    """At most `cap` appends: past it, every `k = ceil(n / cap)` consecutive pieces go as
    one, at the offset of the last of them (when an LLM would have given it)."""
    n = len(pieces)
    if n <= cap:
        return list(pieces), list(offsets)
    k = math.ceil(n / cap)
    groups = range(0, n, k)
    return (
        ["".join(pieces[i : i + k]) for i in groups],
        [offsets[min(i + k, n) - 1] for i in groups],
    )


def _append(sequence: int, piece: str) -> str:
    # UTF-8 as is: escaped, a non-ASCII text would take up to 6 bytes a character of the
    # server's 65,536-byte message limit.
    return json.dumps(
        {"type": "input_text.append", "sequence": sequence, "text": piece}, ensure_ascii=False
    )


def _end(sequence: int) -> str:
    return json.dumps({"type": "input_text.end", "sequence": sequence})


def _stop_reason(ex: WsExchange, raw: str) -> None:
    """A `response.done` whose `stop_reason` is not `stop` (e.g. `cancelled`) failed."""
    try:
        value = load_event(raw)
    except BadEvent as exc:  # read once already (receive_frames): never expected here
        ex.failure = ex.failure or ("bad_event", str(exc))
        return
    reason = value.get("stop_reason") if isinstance(value, dict) else None
    if reason not in (None, "stop") and ex.failure is None:
        ex.failure = ("ws_error", f"response.done with stop_reason {reason!r}")


async def run_nari_session(
    session: aiohttp.ClientSession,
    url: str,
    start: dict[str, Any],
    pieces: Sequence[str],
    offsets: Sequence[float],
    timeout_s: float,
    ex: WsExchange,
    on_open: Callable[[], None] | None = None,
) -> None:
    """One utterance: `request.start`, the text at its pace, every frame until
    `response.done`; never raises except CancelledError. `on_open` is called when the
    handshake is done (the sender counts the session in flight from there)."""
    ex.t_send = time.perf_counter()
    start_text = json.dumps(start)
    pieces, offsets = batch_pieces(pieces, offsets)
    async with (
        agent_session(ex, timeout_s, "response.done", timeout_wins=False) as running,
        connect(session, url, (SUBPROTOCOL,)) as ws,
    ):
        ex.t_open = time.perf_counter()
        ex.status = 101
        if on_open is not None:
            on_open()
        await ws.send_str(start_text)
        running.sender = asyncio.create_task(send_text(ws, pieces, offsets, ex, _append, _end))
        await receive_frames(ws, ex, "response.done", _stop_reason)
