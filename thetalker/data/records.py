"""The record schema: what one request produced, one JSON line each.

The raw observations (`t_submit_s`, `chunk_arrival_s`, `chunk_bytes`, status, error)
are the core of a record; the per-request figures `thetalker.metrics.request_metrics`
derives from them are written beside them. Everything downstream (summaries, tables,
figures, WER) rebuilds from `records.jsonl` alone. Schema: docs/records.md.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

__all__ = [
    "SCHEMA_VERSION",
    "RequestFigures",
    "Record",
    "ALL_RECORD_FIELDS",
    "RECORD_FIELDS",
    "OPTIONAL_RECORD_FIELDS",
    "SUMMARY_FIELDS",
    "OPTIONAL_SUMMARY_FIELDS",
    "ERROR_TYPES",
    "RecordError",
    "RecordWriteError",
    "error_info",
    "append_record",
    "read_records",
    "missing_indices",
    "incompleteness",
    "write_json",
    "read_json",
]

SCHEMA_VERSION = "thetalker.data.records/1"


@dataclass(frozen=True)
class RequestFigures:
    """What `thetalker.metrics.request_metrics` derives from one request's timeline."""

    ttfa_s: float | None
    leading_silence_s: float
    ttfa_audible_s: float | None
    ttfa_audible_naive_s: float | None
    audio_s: float
    max_underrun_s: float
    underrun_events: int
    continuity_ok: bool
    stalls: int
    stall_s: float

    @classmethod
    def from_metrics(cls, figures: Mapping[str, Any]) -> RequestFigures:
        return cls(**{name: figures[name] for name in _FIGURE_NAMES})


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
    ttfa_s: float | None
    leading_silence_s: float
    ttfa_audible_s: float | None
    ttfa_audible_naive_s: float | None
    wall_s: float
    chunk_arrival_s: list[float]
    chunk_bytes: list[int]
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
)

# Error types a record may carry in `error.type`.
ERROR_TYPES = (
    "http_status",  # 4xx/5xx before any audio; message from the error body
    "truncated",  # body cut short (connection closed or payload error mid-stream)
    "connection",  # refused, reset before a response
    "content_type",  # 200 with a non-audio body (e.g. JSON)
    "odd_bytes",  # a half sample left at the end of the stream
    "timeout",  # the per-request timeout expired
    "sse_error",  # an SSE error event (`speech.audio.error`; sglang-omni's `error`)
    "empty",  # 200 with no audio at all
    "cancelled",  # the run stopped (Ctrl-C, server died) before this request finished
    # The agent mode (WebSocket):
    "session_refused",  # the server's first answer was `error` and it closed (a bad config)
    "ws_error",  # an `error` event during the session (e.g. a sentence failed)
    "closed_early",  # the socket closed before `session.done`
    # Refusals before audio, typed where the server kind says what they mean (thetalker.backends;
    # vllm-omni and the local server keep `http_status`):
    "rejected",  # the request itself was refused (Nari's 422: a field or value it forbids)
    "overloaded",  # too busy (Nari's 429 capacity, 503 PCM budget; sglang-omni's full queue)
    "not_ready",  # the server is not ready to serve (Nari's 503 "service is not ready")
)


class RecordError(ValueError):
    """A records file that cannot be read; the message names the file and line."""


def error_info(kind: str, message: str, status: int | None = None) -> dict[str, Any]:
    return {"type": kind, "message": message, "status": status}


class RecordWriteError(OSError):
    """A record could not be written (disk full, file made unwritable); names the file."""

    def __str__(self) -> str:  # the message alone, no `[Errno N]` prefix
        return str(self.strerror)


def append_record(fh: IO[str], record: Mapping[str, Any] | Record) -> None:
    """Append one record and push it to disk, so a crash keeps what was measured.

    Raises RecordWriteError naming the file when the write, flush or fsync fails."""
    if isinstance(record, Record):
        record = record.to_json()
    line = json.dumps(record, separators=(",", ":")) + "\n"
    try:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())
    except OSError as exc:
        why = exc.strerror or str(exc)
        index = record.get("request_index")
        raise RecordWriteError(
            exc.errno, f"{fh.name}: cannot write the record of request {index}: {why}"
        ) from None


def read_records(
    path: str | os.PathLike[str],
    warn: Callable[[str], None] | None = None,
    require_complete: bool = False,
) -> Iterator[dict[str, Any]]:
    """Yield the records of a JSONL file; any bad line raises RecordError naming file and line.

    Two damages are reported, not hidden: a torn last line (a crash mid-write; everything
    before it is intact) is skipped with a warning naming file and line, and, once the file is
    read, request indices missing from 0..max (a failed or lost write) give a warning naming
    the file and the indices (`incompleteness`). `warn` gets each warning line (default: stderr
    with a `warning: ` prefix); `require_complete` raises RecordError for missing indices
    instead, after the last record was yielded.
    """
    path = Path(path)
    say = warn if warn is not None else _warn_stderr
    raw = path.read_bytes()
    try:
        lines = io.StringIO(raw.decode("utf-8"), newline="\n").readlines()  # on \n alone
    except UnicodeDecodeError as exc:
        line = 1 + raw[: exc.start].count(b"\n")
        raise RecordError(f"{path}:{line}: not UTF-8 text") from None
    indices: list[int] = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if lineno == len(lines) and not line.endswith("\n"):
                say(f"{path}:{lineno}: torn last line skipped (a write cut short, e.g. SIGKILL)")
                break  # torn final write: everything before it is intact
            raise RecordError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise RecordError(f"{path}:{lineno}: a record must be a JSON object")
        missing = [f for f in RECORD_FIELDS if f not in record]
        if missing:
            raise RecordError(f"{path}:{lineno}: record lacks field(s) {', '.join(missing)}")
        if isinstance(record["request_index"], int):
            indices.append(record["request_index"])
        yield record
    gap = incompleteness(path, indices)
    if gap is not None:
        if require_complete:
            raise RecordError(gap)
        say(gap)


def missing_indices(indices: Iterable[int]) -> list[int]:
    """Request indices absent from 0..max(indices): records lost between written ones."""
    seen = set(indices)
    return [i for i in range(max(seen) + 1) if i not in seen] if seen else []


def incompleteness(path: str | os.PathLike[str], indices: Iterable[int]) -> str | None:
    """`FILE: incomplete: ...` naming the missing request indices, or None when none is."""
    indices = list(indices)
    missing = missing_indices(indices)
    if not missing:
        return None
    total = max(indices) + 1
    return (
        f"{path}: incomplete: {len(missing)} of {total} request indices missing "
        f"({_ranges(missing)}); a record write failed or was lost"
    )


def _ranges(values: list[int], limit: int = 8) -> str:
    """`3, 30-67, 90` (sorted input), at most `limit` runs then `...`."""
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    shown = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:limit]]
    return ", ".join(shown) + (", ..." if len(runs) > limit else "")


def _warn_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write JSON atomically (temp file then rename): a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise RecordWriteError(exc.errno, f"{path}: cannot write: {exc.strerror or exc}") from None


def read_json(path: str | os.PathLike[str]) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
