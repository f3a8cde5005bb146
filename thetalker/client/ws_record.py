"""One record from one WebSocket session (the agent mode): failure type, figures, audio.

The same `Record` as the HTTP path, so every summary, table and comparison reads it: its
`chunk_arrival_s` are the binary frames (seconds from opening the socket), `ttfa_s` is the
first frame from the socket's opening, continuity and stalls are those of a player starting
at the first frame. Beside them the agent's own timeline and figures
(`thetalker.metrics.agent_figures`). The sample rate is the run's (the probe's or the one
given), never `audio.start`'s `sample_rate`, which 0.30.0 states as 24000 for every model.
"""

from __future__ import annotations

from typing import Any

from thetalker import metrics
from thetalker.backends import AgentProtocol
from thetalker.client.context import RunContext, exchange_fields, figures_of, saved_audio
from thetalker.client.events import BadEvent, load_event, shallow, short_text
from thetalker.client.exchange import WsExchange
from thetalker.data.records import Record

__all__ = ["build_ws_record", "parse_events", "missing_output", "sentence_units"]

# Event keys worth keeping in a record (a long `sentence_text` is kept: it maps the lag).
_EVENT_KEYS = (
    "type",
    "utterance_index",
    "sentence_index",
    "sentence_text",
    "total_bytes",
    "total_sentences",
    "error",
    "message",
    "partial_audio",
    "sample_rate",  # what audio.start states (0.30.0: 24000 for every model), never used
    # Nari's nari.speech.v1 (error events carry their `error` object above):
    "request_id",
    "sequence",
    "event",
    "stop_reason",
    "audio_chunks",
)


def parse_events(ex: WsExchange, t0: float) -> tuple[list[dict[str, Any]], str | None]:
    """The server's events: their kept keys (each value at most `MAX_KEPT_DEPTH` deep),
    `t_s` from `t0`, and `frames_before`; and why the first event that cannot be read
    (`BadEvent`: not JSON, too deep, a number too long) could not, else None. Such an
    event is kept as its reason."""
    out = []
    bad: str | None = None
    for t, raw, frames_before in ex.events:
        try:  # a server's NaN or Infinity becomes null: records are standard JSON
            value = load_event(raw)
        except BadEvent as exc:
            bad = bad or str(exc)
            value = {"type": None, "message": str(exc)}
        if not isinstance(value, dict):
            value = {"type": None, "message": raw[:300]}
        event = {k: shallow(value[k]) for k in _EVENT_KEYS if k in value}
        event["t_s"] = t - t0
        event["frames_before"] = frames_before
        out.append(event)
    return out, bad


def _squeeze(text: str) -> str:
    return "".join(text.split())


def missing_output(events: list[dict[str, Any]], text: str) -> str | None:
    """What the session asked for and did not get, or None when everything arrived: every
    `audio.start` has its `audio.done`; as many sentences as `session.done` states; and,
    when the server names its sentences, they cover the text sent (whitespace aside)."""
    starts = [e for e in events if e.get("type") == "audio.start"]
    dones = [e for e in events if e.get("type") == "audio.done"]
    if len(dones) < len(starts):
        return f"{len(starts)} sentence(s) started, {len(dones)} finished"
    stated = [e.get("total_sentences") for e in events if e.get("type") == "session.done"]
    total = stated[-1] if stated else None
    if isinstance(total, int) and not isinstance(total, bool) and total != len(starts):
        return f"session.done states {total} sentence(s), {len(starts)} arrived"
    named = [str(e.get("sentence_text") or "") for e in starts]
    if starts and all(named):
        heard, sent = _squeeze("".join(named)), _squeeze(text)
        if heard != sent:
            return (
                f"the {len(starts)} sentence(s) the server spoke cover {len(heard)} of the "
                f"{len(sent)} characters sent"
            )
    return None


def sentence_units(
    events: list[dict[str, Any]], text: str, unit_start: str = "audio.start"
) -> list[tuple[int, str]]:
    """(first frame index, text) of each unit the server announced with `unit_start`
    (vllm-omni's `audio.start`, Nari's one `response.started`); a server that names no
    unit's text gets the whole prompt as one unit."""
    units = [
        (int(e["frames_before"]), str(e.get("sentence_text") or ""))
        for e in events
        if e.get("type") == unit_start
    ]
    if units and not any(u for _, u in units):
        return [(units[0][0], text)]
    return units


def _error_text(event: dict[str, Any]) -> str:
    """An error event's message: top-level (vllm-omni) or `error.message` (Nari)."""
    nested = event.get("error")
    if "message" not in event and isinstance(nested, dict):
        code = f"{short_text(nested['code'])}: " if nested.get("code") else ""
        return code + short_text(nested.get("message", ""))
    return short_text(event.get("message", ""))


def _failure(
    ex: WsExchange, events: list[dict[str, Any]], pcm_len: int, agent: AgentProtocol
) -> tuple[str, str] | None:
    failure = ex.failure
    if failure is not None and failure[0] in ("ws_error", "closed_early"):
        answers = [e for e in events if e.get("type") not in agent.greetings]
        refused = (
            not ex.session_done
            and bool(answers)
            and answers[0].get("type") == "error"
            and not any(e.get("type") == agent.unit_start for e in events)
        )
        if refused:
            return ("session_refused", _error_text(answers[0]))
    if failure is None:
        if not pcm_len:
            return ("empty", "the session carried no audio")
        if pcm_len % 2:
            return ("odd_bytes", f"{pcm_len} audio bytes: a half sample at the end")
        short = missing_output(events, ex.prompt.text)
        if short is not None:
            return ("session_incomplete", f"session.done before all the text was spoken: {short}")
        if ex.t_input_done is None:  # whatever the server says: it cannot have spoken it all
            sent = len("".join(ex.text_pieces))
            return (
                "session_incomplete",
                f"{agent.done} came before all the text was sent ({sent} of "
                f"{len(ex.prompt.text)} characters, the end of input not yet)",
            )
    return failure


def build_ws_record(ctx: RunContext, ex: WsExchange) -> Record:
    """Type the session's failure, derive its figures, save its audio."""
    opts, rate = ctx.opts, ctx.sample_rate
    t_send = ex.t_send if ex.t_send is not None else ctx.t_origin
    events, bad_event = parse_events(ex, t_send)
    pcm = b"".join(ex.pieces)
    sizes = [len(p) for p in ex.pieces]
    protocol = ctx.api.agent
    assert protocol is not None  # validate_options: the websocket protocol needs a socket
    failure = _failure(ex, events, len(pcm), protocol)
    if bad_event is not None and (failure is None or failure[0] == "ws_error"):
        failure = ("bad_event", bad_event)  # an event the client cannot read fails it
    if failure is not None and failure[0] in ("ws_error", "session_refused"):
        # The server's words may say more than the socket's event does (Nari's service_failed).
        failure = (ctx.api.errors.event_failure_type(failure[0], failure[1]), failure[1])
    arrivals = [t - t_send for t in ex.times]
    usable = pcm[: len(pcm) - len(pcm) % 2]
    ok = failure is None
    figures = figures_of(arrivals, sizes, usable, rate, opts.threshold_s, ok, onset=opts.onset)
    text_s = [t - t_send for t in ex.text_times]
    done_s = ex.t_input_done - t_send if ex.t_input_done is not None else None
    agent = metrics.agent_figures(
        text_s,
        ex.text_pieces,
        done_s,
        arrivals,
        sizes,
        sentence_units(events, ex.prompt.text, protocol.unit_start),
        rate,
    )
    audio_path = saved_audio(ctx, ex, ok, usable, rate)
    opened = (ex.t_open - t_send) if ex.t_open is not None else None
    return Record(
        # The socket is the connection; session.config goes out as the handshake ends.
        **exchange_fields(
            ctx, ex, failure, ex.status, t_send, opened, arrivals, sizes, figures, audio_path
        ),
        t_connect_s=(ex.t_open - t_send) if ex.t_open is not None else None,
        connection_reused=False,
        connect_s=opened,
        protocol="websocket",
        # A server that streams the text into one request has one unit: the utterance.
        split_granularity=opts.split_granularity if protocol.splits_text else "none",
        t_open_s=(ex.t_open - t_send) if ex.t_open is not None else None,
        text_piece_s=text_s,
        text_pieces=list(ex.text_pieces),
        t_input_done_s=done_s,
        server_events=events,
        ttfa_first_text_s=agent["ttfa_first_text_s"],
        ttfa_input_done_s=agent["ttfa_input_done_s"],
        sentence_lag_s=agent["sentence_lag_s"],
        sentence_heard_lag_s=agent["sentence_heard_lag_s"],
        text_s=agent["text_s"],
    )
