"""The record schema: what one request produced, one JSON line each.

The raw observations (`t_submit_s`, `chunk_arrival_s`, `chunk_bytes`, status, error)
are the core of a record; the per-request figures `thetalker.metrics.request_metrics`
derives from them are written beside them. Everything downstream (summaries, tables,
figures, WER) rebuilds from `records.jsonl` alone. Schema: docs/records.md.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import msgspec

from thetalker.data.record_checks import fields_problem, timeline_problem
from thetalker.data.record_lines import (
    TOO_DEEP,
    RepeatedKey,
    counted_keys,
    fill_absent,
    no_repeats,
    presence_type,
    repeated_key,
)

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
    "read_rounds",
    "check_record",
    "strict_dumps",
    "missing_indices",
    "incompleteness",
    "write_json",
    "read_json",
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


class RecordError(ValueError):
    """A records file that cannot be read; the message names the file and line."""


def error_info(kind: str, message: str, status: int | None = None) -> dict[str, Any]:
    return {"type": kind, "message": message, "status": status}


class RecordWriteError(OSError):
    """A record could not be written (disk full, file made unwritable); names the file."""

    def __str__(self) -> str:  # the message alone, no `[Errno N]` prefix
        return str(self.strerror)


def append_record(fh: IO[str], record: Mapping[str, Any] | Record, sync: bool = True) -> None:
    """Append one record and hand it to the OS (flushed: a killed process loses nothing),
    and with `sync` push it to disk (fsync: a power loss keeps it too).

    Raises RecordWriteError naming the file when the write, flush or fsync fails."""
    if isinstance(record, Record):
        record = record.to_json()
    line = strict_dumps(record, separators=(",", ":")) + "\n"
    try:
        fh.write(line)
        fh.flush()
        if sync:
            os.fsync(fh.fileno())
    except OSError as exc:
        why = exc.strerror or str(exc)
        index = record.get("request_index")
        raise RecordWriteError(
            exc.errno, f"{fh.name}: cannot write the record of request {index}: {why}"
        ) from None


def strict_dumps(data: Any, **kwargs: Any) -> str:
    """`json.dumps` that writes standard JSON only: a NaN or infinity raises ValueError
    naming the key path that holds it (never the non-standard `NaN` token)."""
    try:
        return json.dumps(data, allow_nan=False, **kwargs)
    except ValueError:
        where = _nonfinite_path(data) or "a value"
        raise ValueError(f"{where}: not a finite number; JSON cannot hold it") from None


def _nonfinite_path(value: Any, at: str = "") -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return at or "the value"
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list | tuple)
        else ()
    )
    for key, v in items:
        found = _nonfinite_path(v, f"{at}.{key}" if at else str(key))
        if found is not None:
            return found
    return None


def _refuse_constant(token: str) -> Any:
    raise ValueError(f"{token} is not standard JSON")


def read_records(
    path: str | os.PathLike[str],
    warn: Callable[[str], None] | None = None,
    require_complete: bool = False,
    require_consistent: bool = False,
    declared_only: bool = False,
) -> Iterator[dict[str, Any]]:
    """Yield the records of a JSONL file; any bad line raises RecordError naming file and line.

    Every line is checked against the declared schema (`check_record`: required fields,
    declared types, finite numbers, the index range; `NaN`/`Infinity` tokens are refused),
    and a request index seen twice in the file is refused naming both lines: a record is
    never reinterpreted (a string `"false"` is not false) or counted twice.

    Two damages are reported, not hidden: a torn last line (a crash mid-write; everything
    before it is intact) is skipped with a warning naming file and line, and, once the file is
    read, request indices missing from 0..max (a failed or lost write) give a warning naming
    the file and the indices (`incompleteness`). `warn` gets each warning line (default: stderr
    with a `warning: ` prefix); `require_complete` raises RecordError for missing indices
    instead, after the last record was yielded.

    A record whose figures contradict its own timeline (`timeline_problem`: an `audio_s`
    its chunks do not carry, a `ttfa_s` after `wall_s`), or whose `sample_rate` is not the
    file's first record's, is warned once per field at the end (`FILE:LINE: field F: why`,
    and how many records are like it); `require_consistent` raises RecordError at the first.

    The file is read a line at a time (memory does not grow with it), and each line is
    decoded and checked in one pass of msgspec against `Record` (`_fast_record`); a line
    that pass does not take goes through the standard library's decoder and `check_record`,
    which accept what the schema allows and word the refusal. `declared_only`: each record
    holds the schema's fields alone, every one (its default where the line has none), for a
    reader that needs nothing else: one typed pass (`_fast_record`).
    """
    path = Path(path)
    say = warn if warn is not None else _warn_stderr
    seen: dict[int, int] = {}  # request_index -> its line
    doubts = _Doubts(path, require_consistent)
    rate: tuple[int, int] | None = None  # the file's sample rate, the line it was read at
    with path.open("rb") as fh:
        lines = iter(fh)  # split on \n alone, as written
        line = next(lines, None)
        lineno = 0
        while line is not None:
            following = next(lines, None)
            lineno += 1
            try:
                record, given = _fast_decode(line, declared_only)
                if record is None:
                    record = _checked_record(path, lineno, line, last=following is None, say=say)
                    if record is _TORN:
                        break
                    if record is None:  # a blank line
                        line = following
                        continue
                repeated = _repeat(line, record, given)
            except RecursionError:  # a value nested past what a decoder survives
                raise RecordError(f"{path}:{lineno}: {TOO_DEEP}") from None
            if repeated is not None:
                doubts.add(lineno, repeated, _REPEATED)
            index = record["request_index"]
            if index in seen:
                raise RecordError(
                    f"{path}:{lineno}: request_index {index} already read at line {seen[index]} "
                    "(a duplicated line would count that request twice)"
                )
            seen[index] = lineno
            problem = timeline_problem(record)
            if problem is not None:
                doubts.add(lineno, *problem)
            if rate is None:
                rate = (record["sample_rate"], lineno)
            elif record["sample_rate"] != rate[0]:
                doubts.add(lineno, "sample_rate", _other_rate(record["sample_rate"], *rate))
            yield record
            line = following
    doubts.say(say)
    indices = seen.keys()
    gap = incompleteness(path, indices)
    if gap is not None:
        if require_complete:
            raise RecordError(gap)
        say(gap)


# msgspec decodes a line to the same dict as `json.loads` and checks it against `Record`
# in C: the strict types check_record asks for (a bool is no int, an int no bool, a float
# no string), numbers finite (msgspec refuses NaN, Infinity and out-of-range numbers).
# `declared_only` decodes straight into `Record` in one pass instead (the check with it, at
# about the untyped decode's cost): the record is then the instance's field dict, a field
# the line leaves out at its declared default (None, or `connection_reused` False,
# `protocol` "http": what readers take an absent one for) and a field the schema does not
# declare dropped.
# The declared decode goes into `Record`'s twin whose defaults are UNSET, so the fields the
# line gave are known (`fill_absent`): their count is what proves the line repeats no key.
_DECODE = msgspec.json.Decoder().decode
_DECODE_DECLARED = msgspec.json.Decoder(presence_type(Record)).decode
_DEFAULTS = {
    f.name: f.default for f in dataclasses.fields(Record) if f.default is not dataclasses.MISSING
}
_TORN: Any = object()
_REPEATED = "given twice in the line (a decoder keeps the last value: what it said first is lost)"


def _fast_record(line: bytes, declared_only: bool = False) -> dict[str, Any] | None:
    """The line's record when msgspec takes it as one of the declared schema (None: it did
    not, or the line is blank; `_checked_record` decides and says why)."""
    return _fast_decode(line, declared_only)[0]


def _fast_decode(line: bytes, declared_only: bool = False) -> tuple[dict[str, Any] | None, int]:
    """`_fast_record`'s record and how many top-level keys of the line it kept."""
    try:
        if declared_only:
            record = vars(_DECODE_DECLARED(line))
            given = fill_absent(record, ALL_RECORD_FIELDS, _DEFAULTS)
        else:
            record = _DECODE(line)
            msgspec.convert(record, Record)
            given = len(record)
    except msgspec.MsgspecError:
        return None, 0
    if not 0 <= record["request_index"] <= MAX_REQUEST_INDEX:
        return None, 0
    return record, given


def _repeat(line: bytes, record: dict[str, Any], given: int) -> str | None:
    """A key the line gives twice (None: none). One byte count proves most lines free of
    repeats (`counted_keys`); the rest, and lines the fast decode did not take (`given`
    0), are decoded once more by the standard library to find one."""
    if given and counted_keys(line, record, given):
        return None
    return repeated_key(line)


def _other_rate(rate: int, first: int, where: int | str) -> str:
    at = f"line {where}" if isinstance(where, int) else where
    return f"{rate} Hz, but {at} has {first} Hz (one run has one rate: its figures would mix two)"


class _Doubts:
    """Records whose figures contradict their timeline: refused at the first (`strict`), or
    said once per field when the file is read, naming the first line and the count."""

    def __init__(self, path: Path, strict: bool) -> None:
        self.path, self.strict = path, strict
        self.first: dict[str, tuple[int, str]] = {}
        self.count: dict[str, int] = {}

    def add(self, lineno: int, field: str, why: str) -> None:
        if self.strict:
            raise RecordError(f"{self.path}:{lineno}: field {field}: {why}")
        self.first.setdefault(field, (lineno, why))
        self.count[field] = self.count.get(field, 0) + 1

    def say(self, say: Callable[[str], None]) -> None:
        for field, (lineno, why) in self.first.items():
            more = self.count[field] - 1
            also = f" ({more} more record{'s' if more > 1 else ''} like it)" if more else ""
            say(f"{self.path}:{lineno}: field {field}: {why}{also}")


def _checked_record(
    path: Path, lineno: int, raw: bytes, last: bool, say: Callable[[str], None]
) -> dict[str, Any] | None:
    """The line read by the standard library and `check_record`: the record, None for a
    blank line, `_TORN` for a torn last line (warned); RecordError saying what is wrong."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RecordError(f"{path}:{lineno}: not UTF-8 text") from None
    if not line.strip():
        return None
    try:
        record = json.loads(line, parse_constant=_refuse_constant)
    except RecursionError:
        raise RecordError(f"{path}:{lineno}: {TOO_DEEP}") from None
    except ValueError as exc:
        if last and not line.endswith("\n"):
            say(f"{path}:{lineno}: torn last line skipped (a write cut short, e.g. SIGKILL)")
            return _TORN  # torn final write: everything before it is intact
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise RecordError(f"{path}:{lineno}: not valid JSON ({why})") from None
    problem = check_record(record)
    if problem is not None:
        raise RecordError(f"{path}:{lineno}: {problem}")
    return record


def read_rounds(
    paths: Sequence[str | os.PathLike[str]],
    keep: Callable[[dict[str, Any]], Any] | None = None,
    **kwargs: Any,
) -> list[list[Any]]:
    """The records of each file (`read_records`, same options), one list per round; the
    same file named twice (by any path to it) is refused, as it would double the point.
    `keep`: what to hold of each record as it is read (e.g. the fields a table needs),
    so memory grows with that, not with the records' timelines; it is given the declared
    fields alone (`declared_only`), which is all a reader that keeps some can name."""
    seen: dict[Path, str] = {}
    for p in paths:
        real = Path(p).resolve()
        if real in seen:
            raise RecordError(f"{p}: the same records file as {seen[real]}, given twice")
        seen[real] = str(p)
    rounds: list[list[Any]] = []
    rate: tuple[int, str] | None = None  # the first round's sample rate, its file
    for p in paths:
        one = []
        for r in read_records(p, declared_only=keep is not None, **kwargs):
            if not one and rate is None:
                rate = (r["sample_rate"], str(p))
            elif not one and r["sample_rate"] != rate[0]:  # a file is one rate: read_records
                why = f"{p}: field sample_rate: {_other_rate(r['sample_rate'], *rate)}"
                if kwargs.get("require_consistent"):
                    raise RecordError(why)
                (kwargs.get("warn") or _warn_stderr)(why)
            one.append(r if keep is None else keep(r))
        rounds.append(one)
    return rounds


def _missing_runs(indices: Iterable[int]) -> list[tuple[int, int]]:
    """The runs (first, last) of indices absent from 0..max(indices), from the indices seen
    alone (nothing sized by the largest index)."""
    runs: list[tuple[int, int]] = []
    expected = 0
    for i in sorted(set(indices)):
        if i > expected:
            runs.append((expected, i - 1))
        expected = i + 1
    return runs


def missing_indices(indices: Iterable[int]) -> list[int]:
    """Request indices absent from 0..max(indices): records lost between written ones."""
    return [i for a, b in _missing_runs(indices) for i in range(a, b + 1)]


def incompleteness(path: str | os.PathLike[str], indices: Iterable[int]) -> str | None:
    """`FILE: incomplete: ...` naming the missing request indices, or None when none is."""
    indices = list(indices)
    runs = _missing_runs(indices)
    if not runs:
        return None
    total = max(indices) + 1
    n_missing = sum(b - a + 1 for a, b in runs)
    return (
        f"{path}: incomplete: {n_missing} of {total} request indices missing "
        f"({_ranges(runs)}); a record write failed or was lost"
    )


def _ranges(runs: list[tuple[int, int]], limit: int = 8) -> str:
    """`3, 30-67, 90`, at most `limit` runs then `...`."""
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
        text = strict_dumps(data, indent=2, sort_keys=False) + "\n"  # before the temp file
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise RecordWriteError(exc.errno, f"{path}: cannot write: {exc.strerror or exc}") from None


def read_json(path: str | os.PathLike[str]) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=no_repeats)
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except RepeatedKey as exc:
        raise RecordError(f"{path}: field {exc.key}: {_REPEATED}") from None
    except RecursionError:
        raise RecordError(f"{path}: {TOO_DEEP}") from None
