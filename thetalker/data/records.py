"""The record schema: what one request produced, one JSON line each.

The raw observations (`t_submit_s`, `chunk_arrival_s`, `chunk_bytes`, status, error)
are the core of a record; the per-request figures `thetalker.metrics.request_metrics`
derives from them are written beside them. Everything downstream (summaries, tables,
figures, WER) rebuilds from `records.jsonl` alone. Schema: docs/records.md.

This module declares the record (`Record`, `RequestFigures`, the field lists, the error
types, summary.json's fields) and what a record of it is (`check_record`); reading files
of them is thetalker.data.record_reads, writing them thetalker.data.record_writes.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from thetalker.data.record_checks import fields_problem

__all__ = [
    "SCHEMA_VERSION",
    "RequestFigures",
    "Record",
    "ALL_RECORD_FIELDS",
    "RECORD_FIELDS",
    "OPTIONAL_RECORD_FIELDS",
    "MAX_REQUEST_INDEX",
    "SUMMARY_FIELDS",
    "OPTIONAL_SUMMARY_FIELDS",
    "ERROR_TYPES",
    "error_info",
    "check_record",
]

# /2: read-level fields (read_arrival_s, read_bytes), connect_s, request_sent_s,
# ttfa_from_sent_s; ttfa_s is the first read with audio. /1 records still load.
SCHEMA_VERSION = "thetalker.data.records/2"


@dataclass(frozen=True)
class RequestFigures:
    """What `thetalker.metrics.request_metrics` derives from one request's timeline."""

    ttfa_s: float | None
    leading_silence_s: float | None  # None: no audible onset (inaudible)
    ttfa_audible_s: float | None
    ttfa_audible_naive_s: float | None
    audio_s: float
    max_underrun_s: float
    underrun_events: int
    continuity_ok: bool
    stalls: int
    stall_s: float
    audible: bool | None = None  # an audible onset was found (thetalker.metrics.onset)
    audible_onset_rule: str | None = None  # OnsetSettings.label() of the rule used

    @classmethod
    def from_metrics(cls, figures: Mapping[str, Any]) -> RequestFigures:
        return cls(**{name: figures[name] for name in _FIGURE_NAMES})

    def fields(self) -> dict[str, Any]:
        """The figures by name (scalars: no deep copy, unlike `dataclasses.asdict`, which was
        a fifth of building a record in the writer beside the receive loop)."""
        return {name: getattr(self, name) for name in _FIGURE_NAMES}


_FIGURE_NAMES = tuple(f.name for f in dataclasses.fields(RequestFigures))


@dataclass(frozen=True, kw_only=True)
class Record:
    """One line of records.jsonl, its fields in the order they are written (docs/records.md).
    Fields with a default were added after the first schema: readers must not require them."""

    request_index: int  # sending order within the run
    sample_id: str
    text: str
    text_chars: int
    warmup: bool
    ok: bool
    error: dict[str, Any] | None  # error_info(...) when ok is false
    http_status: int | None = None
    t_submit_s: float  # from the run's clock origin
    schedule_lag_s: float | None = None  # open loop only
    t_connect_s: float | None
    connection_reused: bool = False
    connect_s: float | None = None  # from t_submit_s until a connection was held
    request_sent_s: float | None = None  # from t_submit_s until the body's first byte went
    ttfa_from_sent_s: float | None = None  # ttfa_s - request_sent_s
    ttfa_s: float | None
    leading_silence_s: float | None  # None: inaudible (older records: 0 for that)
    ttfa_audible_s: float | None
    ttfa_audible_naive_s: float | None
    audible: bool | None = None  # added with the absolute onset rule; absent in older records
    audible_onset_rule: str | None = None
    wall_s: float
    chunk_arrival_s: list[float]
    chunk_bytes: list[int]
    # Every read that carried audio (HTTP audio streams; None where a message is the unit).
    read_arrival_s: list[float] | None = None
    read_bytes: list[int] | None = None
    audio_s: float
    sample_rate: int
    max_underrun_s: float
    underrun_events: int
    continuity_ok: bool
    stalls: int
    stall_s: float
    audio_path: str | None = None
    # The agent mode (`protocol` "websocket": text sent in pieces, docs/records.md); times
    # from `t_submit_s`, as `chunk_arrival_s`. None in whole-text (HTTP) records.
    protocol: str = "http"
    split_granularity: str | None = None
    t_open_s: float | None = None
    text_piece_s: list[float] | None = None
    text_pieces: list[str] | None = None
    t_input_done_s: float | None = None
    server_events: list[dict[str, Any]] | None = None
    ttfa_first_text_s: float | None = None
    ttfa_input_done_s: float | None = None
    sentence_lag_s: list[float | None] | None = None
    sentence_heard_lag_s: list[float | None] | None = None
    text_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the line (the lists are the record's own, not copies)."""
        return {name: getattr(self, name) for name in ALL_RECORD_FIELDS}


# Every field a record carries, in the order written.
ALL_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(Record))
# Required in every line of records.jsonl (read_records checks them).
RECORD_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(Record)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)
# Written by the client, optional for readers.
OPTIONAL_RECORD_FIELDS = tuple(f for f in ALL_RECORD_FIELDS if f not in RECORD_FIELDS)

# Each declared field's type, read from the dataclass itself: a field added to `Record` is
# checked on read with no other edit (fields a reader does not know are left alone).
_FIELD_TYPES: dict[str, Any] = typing.get_type_hints(Record)
# The largest request index a reader takes: beyond it a record is refused, so no reader
# holds anything sized by an index read from a file (a client sends far fewer requests).
MAX_REQUEST_INDEX = 10**7


def check_record(record: Any) -> str | None:
    """Why a parsed line is not a record of the declared schema (None when it is): an
    object with every required field, each declared field of its declared type, the
    request index in 0..MAX_REQUEST_INDEX. Undeclared fields pass (a newer writer's)."""
    if not isinstance(record, dict):
        return "a record must be a JSON object"
    problem = fields_problem(record, _FIELD_TYPES, RECORD_FIELDS, "record")
    if problem is not None:
        return problem
    index = record["request_index"]
    if not 0 <= index <= MAX_REQUEST_INDEX:
        return f"field request_index: {index} outside 0..{MAX_REQUEST_INDEX}"
    return None


# Required in summary.json (one load point): thetalker.metrics.summarize_point's core.
SUMMARY_FIELDS = (
    "concurrency",
    "n_scored",
    "n_ok",
    "error_rate",
    "window_s",
    "rtfx",
    "continuity_pct",
    "continuity_pct_ok_only",
    "chars_per_s",
    "ttfa_s",
    "ttfa_audible_s",
    "wall_s",
)
# Also written into summary.json: the rest of summarize_point's figures, then how the run
# went (docs/records.md, "Summary fields").
OPTIONAL_SUMMARY_FIELDS = (
    "n_failed",
    "audio_s",
    "stalls_total",
    "rtfx_per_request",
    "n_inaudible",
    "audible_pct",
    "audible_onset_rule",
    "stall_gate_pct",
    "no_stall_pct",
    "largest_stall_s_max",
    "start_buffer_s",
    "n_dropped",
    "audible_onset",
    "schema_version",
    "complete",
    "sample_rate",
    "sample_rate_source",
    "request_rate",
    "max_in_flight",
    "n_warmup",
    "errors_by_type",
    "schedule_lag_s",
    "event_loop",
    "aiohttp_version",
    "options",
    "agent",
    "sessions_in_flight",
    "usable_audio_s",
    "time_to_usable_audio_s",
    "n_short_of_usable_audio",
    "ttfa_audible_p99_over_p50",
    "ttfa_audible_iqr_s",
    "n_rejected",
    "rejected_wall_s",
)

# Error types a record may carry in `error.type`.
ERROR_TYPES = (
    "http_status",  # 4xx/5xx before any audio (or a 3xx: never followed); message from the body
    "truncated",  # body cut short (connection closed or payload error mid-stream)
    "connection",  # refused, reset before a response
    "content_type",  # 200 with a non-audio body (e.g. JSON)
    "odd_bytes",  # a half sample left at the end of the stream
    "timeout",  # the per-request timeout expired
    "too_large",  # past 64 MiB or 100,000 reads (thetalker.client.receive.MAX_RESPONSE_*)
    "sse_error",  # an SSE error event (`speech.audio.error`; sglang-omni's `error`)
    "bad_event",  # a server event the client cannot read (not JSON, too deep, a number too long)
    "empty",  # 200 with no audio at all
    "cancelled",  # the run stopped (Ctrl-C, server died) before this request finished
    "dropped",  # open loop: the arrival found max_in_flight requests in flight, never sent
    # The agent mode (WebSocket):
    "session_refused",  # the server's first answer was `error` and it closed (a bad config)
    "ws_error",  # an `error` event during the session (e.g. a sentence failed)
    "closed_early",  # the socket closed before `session.done`
    # Refusals before audio, typed where the server kind says what they mean (thetalker.backends;
    # vllm-omni and the local server keep `http_status`):
    "rejected",  # the request itself was refused (Nari's 422: a field or value it forbids)
    "overloaded",  # too busy (Nari's 429 capacity, 503 PCM budget; sglang-omni's full queue)
    "not_ready",  # the server is not ready to serve (Nari's 503 "service is not ready")
    "server_failed",  # the server failed or stopped after it was ready (Nari's service_failed)
    "session_incomplete",  # `session.done` came before all the text sent was spoken
)


def error_info(kind: str, message: str, status: int | None = None) -> dict[str, Any]:
    """A failed request's `error` field: `kind` one of ERROR_TYPES, the server's status."""
    return {"type": kind, "message": message, "status": status}
