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

import functools
import json
import math
from collections.abc import Sequence

from thetalker.client.events import BadEvent, load_event
from thetalker.client.exchange import WsExchange
from thetalker.client.websocket import Wire, run_agent_session

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


# One utterance: `request.start`, the text at its pace (regrouped under the append cap),
# every frame until `response.done`; a timeout keeps a failure recorded before it.
run_nari_session = functools.partial(
    run_agent_session,
    Wire(
        done="response.done",
        subprotocols=(SUBPROTOCOL,),
        timeout_wins=False,
        piece_message=_append,
        done_message=_end,
        on_done=_stop_reason,
        regroup=batch_pieces,
        close_message=None,  # the server closes after `response.done`
    ),
)
