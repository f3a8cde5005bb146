"""The record schema: what one request produced, one JSON line each.

The raw observations (`t_submit_s`, `chunk_arrival_s`, `chunk_bytes`, status, error)
are the core of a record; the per-request figures `thetalker.metrics.request_figures`
derives from them are written beside them. Everything downstream (summaries, tables,
figures, WER) rebuilds from `records.jsonl` alone. Schema: docs/records.md.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

__all__ = [
    "SCHEMA_VERSION",
    "RECORD_FIELDS",
    "SUMMARY_FIELDS",
    "RecordError",
    "error_info",
    "append_record",
    "read_records",
    "write_json",
    "read_json",
]

SCHEMA_VERSION = "thetalker.records/1"

# Required in every line of records.jsonl, by these names.
RECORD_FIELDS = (
    "request_index",
    "sample_id",
    "text",
    "text_chars",
    "warmup",
    "ok",
    "error",
    "t_submit_s",
    "t_connect_s",
    "ttfa_s",
    "leading_silence_s",
    "ttfa_audible_s",
    "ttfa_audible_naive_s",
    "wall_s",
    "chunk_arrival_s",
    "chunk_bytes",
    "audio_s",
    "sample_rate",
    "max_underrun_s",
    "underrun_events",
    "continuity_ok",
    "stalls",
    "stall_s",
)

# Required in summary.json (one load point).
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

# Error types a record may carry in `error.type`.
ERROR_TYPES = (
    "http_status",  # 4xx/5xx before any audio; message from the error body
    "truncated",  # body cut short (connection closed or payload error mid-stream)
    "connection",  # refused, reset before a response
    "content_type",  # 200 with a non-audio body (e.g. JSON)
    "odd_bytes",  # a half sample left at the end of the stream
    "timeout",  # the per-request timeout expired
    "sse_error",  # an SSE `speech.audio.error` event
    "empty",  # 200 with no audio at all
    "cancelled",  # the run stopped (Ctrl-C, server died) before this request finished
)


class RecordError(ValueError):
    """A records file that cannot be read; the message names the file and line."""


def error_info(kind: str, message: str, status: int | None = None) -> dict[str, Any]:
    return {"type": kind, "message": message, "status": status}


def append_record(fh: IO[str], record: Mapping[str, Any]) -> None:
    """Append one record and push it to disk, so a crash keeps what was measured."""
    fh.write(json.dumps(record, separators=(",", ":")) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def read_records(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Yield the records of a JSONL file; a torn last line (a crash mid-write) is skipped,
    any other bad line raises RecordError naming file and line."""
    path = Path(path)
    with path.open(encoding="utf-8") as fh:
        lines = fh.readlines()
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if lineno == len(lines) and not line.endswith("\n"):
                return  # torn final write: everything before it is intact
            raise RecordError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise RecordError(f"{path}:{lineno}: a record must be a JSON object")
        missing = [f for f in RECORD_FIELDS if f not in record]
        if missing:
            raise RecordError(f"{path}:{lineno}: record lacks field(s) {', '.join(missing)}")
        yield record


def write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write JSON atomically (temp file then rename): a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: str | os.PathLike[str]) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
