"""The load generator: streams `POST /v1/audio/speech` and records every server chunk.

Closed loop (`concurrency` requests in flight, the next sent as one finishes) or open loop
(`request_rate`: Poisson arrivals drawn from the seed, sent on schedule whether or not
earlier requests finished; each record keeps its `schedule_lag_s`). A warmup finishes before
the first scored request is sent. One `aiohttp.ClientSession` per run, its pool sized to the
concurrency, keep-alive.

The receive path does as little as possible, because everything done between two chunk
reads delays the next timestamp: per piece of body it stamps `time.perf_counter()` once and
appends to three lists. Grouping pieces into the server's chunks (`end_of_http_chunk`),
SSE decoding, WAV header checks, the figures of `thetalker.metrics`, saving audio and the
fsynced JSONL write all happen afterwards, in a writer thread (from `_PROCESS_SINK_FROM`
streams, in a writer process, so it shares no GIL with the receive loop).

`workers > 1` spreads the scored requests over spawned processes after the warmup; they
stamp the same system-wide `perf_counter` and send finished records back to the parent,
the one writer of records.jsonl.

Failures are data: each becomes a record with `ok: false` and an `error` of a type from
`thetalker.records.ERROR_TYPES`, and the run goes on. Schema: docs/records.md.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import contextlib
import dataclasses
import json
import multiprocessing
import os
import queue
import random
import re
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from thetalker import metrics
from thetalker.prompts import Prompt, ordered_prompts
from thetalker.records import (
    SCHEMA_VERSION,
    append_record,
    error_info,
    read_records,
    write_json,
)
from thetalker.voice_cli import normalize_base_url, register_voice
from thetalker.wavio import (
    WavError,
    check_reference_clip,
    parse_wav_header,
    wav_data_uri,
    write_wav,
)

__all__ = [
    "TASK_TYPES",
    "STREAM_FORMATS",
    "RESPONSE_FORMATS",
    "BenchOptions",
    "BenchError",
    "OptionsError",
    "SampleRateError",
    "ProbeError",
    "validate_options",
    "build_request_body",
    "probe_sample_rate",
    "arun_benchmark",
    "run_benchmark",
    "new_event_loop",
]

TASK_TYPES = ("CustomVoice", "Base", "VoiceDesign")
STREAM_FORMATS = ("audio", "sse")
RESPONSE_FORMATS = ("pcm", "wav")  # the only two the API streams
_ERROR_BODY_LIMIT = 64 * 1024
_JSON_HEADERS = {"Content-Type": "application/json"}
# Streams from which records are built in a process of their own (benchmarks/README.md):
# below it the writer thread costs the timeline nothing measurable, and a process its start.
_PROCESS_SINK_FROM = 256
# The GIL switch interval while a writer thread runs beside the receive loop (see _RecordSink).
_SWITCH_INTERVAL_S = 0.0002

ProgressFn = Callable[[int, int, int], None]  # (scored done, scored total, failed so far)


@dataclass(frozen=True)
class BenchOptions:
    """One load point. Field names match docs/architecture.md; `register_voice` is an
    addition (default None keeps the documented behaviour)."""

    base_url: str = "http://127.0.0.1:8091"  # no trailing /v1
    model: str | None = None  # sent as "model" when set
    task_type: str = "CustomVoice"
    speaker: str | None = "joe"
    voice: str | None = None
    ref_audio: str | None = None  # a WAV path; sent inline as a data URI
    ref_text: str | None = None
    instructions: str | None = None
    language: str | None = "English"
    max_new_tokens: int | None = None
    stream_format: str = "audio"  # or "sse"
    response_format: str = "pcm"  # or "wav" (its 44-byte header is stripped and checked)
    sample_rate: int | None = None  # None = auto: one non-streamed wav request before warmup
    expected_sample_rate: int | None = None  # mismatch with the server's rate = SampleRateError
    concurrency: int = 1
    request_rate: float | None = None  # requests/s; set = open loop (Poisson, seeded)
    requests: int = 10
    warmup: int = 2
    seed: int = 42
    timeout_s: float = 120.0  # per request, send to end of body
    save_audio_dir: str | None = None
    max_error_rate: float = 0.05  # the CLI's exit policy; recorded in the summary
    threshold_s: float = metrics.CONTINUITY_THRESHOLD_S
    register_voice: str | None = None  # upload ref_audio/ref_text as this voice, then use it
    # Additions (defaults keep the documented behaviour):
    save_audio_count: int | None = None  # save only the first N scored requests' audio
    workers: int = 1  # processes the scored requests are spread over (1 = this process)


class BenchError(RuntimeError):
    """The run could not be carried out (as opposed to requests that failed, which are data)."""


class OptionsError(BenchError, ValueError):
    """Bad options; the message names the option."""


class SampleRateError(BenchError):
    """The sample rate is unknown or not the expected one."""


class ProbeError(BenchError):
    """The sample-rate request failed (server down, HTTP error)."""


def validate_options(opts: BenchOptions) -> None:
    """Raise OptionsError naming the first bad field."""

    def bad(name: str, why: str) -> None:
        raise OptionsError(f"{name}: {why}")

    if opts.concurrency < 1:
        bad("concurrency", f"must be at least 1 (got {opts.concurrency})")
    if opts.requests < 1:
        bad("requests", f"must be at least 1 (got {opts.requests})")
    if opts.warmup < 0:
        bad("warmup", f"must be 0 or more (got {opts.warmup})")
    if not isinstance(opts.workers, int) or opts.workers < 1:
        bad("workers", f"must be a positive integer (got {opts.workers!r})")
    if opts.save_audio_count is not None:
        if not isinstance(opts.save_audio_count, int) or opts.save_audio_count < 0:
            bad("save_audio_count", f"must be 0 or more (got {opts.save_audio_count!r})")
        if opts.save_audio_dir is None:
            bad("save_audio_count", "needs save_audio_dir")
    if opts.request_rate is not None and not opts.request_rate > 0:
        bad("request_rate", f"must be > 0 (got {opts.request_rate})")
    if not opts.timeout_s > 0:
        bad("timeout_s", f"must be > 0 (got {opts.timeout_s})")
    if opts.task_type not in TASK_TYPES:
        bad("task_type", f"{opts.task_type!r} is not one of {', '.join(TASK_TYPES)}")
    if opts.stream_format not in STREAM_FORMATS:
        bad("stream_format", f"{opts.stream_format!r} is not one of {', '.join(STREAM_FORMATS)}")
    if opts.response_format not in RESPONSE_FORMATS:
        bad("response_format", f"{opts.response_format!r} cannot be streamed (use pcm or wav)")
    for name in ("sample_rate", "expected_sample_rate", "max_new_tokens"):
        value = getattr(opts, name)
        if value is not None and (not isinstance(value, int) or value <= 0):
            bad(name, f"must be a positive integer (got {value!r})")
    if not 0 <= opts.max_error_rate <= 1:
        bad("max_error_rate", f"must be within 0..1 (got {opts.max_error_rate})")
    if opts.task_type == "Base" and not (opts.ref_audio or opts.voice):
        bad("task_type", "Base needs ref_audio (with ref_text) or voice")
    if opts.task_type == "VoiceDesign" and not opts.instructions:
        bad("instructions", "VoiceDesign needs instructions")
    if opts.instructions is not None and len(opts.instructions) > 500:
        bad("instructions", f"at most 500 characters (got {len(opts.instructions)})")
    if opts.ref_audio is not None and not Path(opts.ref_audio).is_file():
        bad("ref_audio", f"no such file: {opts.ref_audio}")
    if opts.ref_audio is not None and Path(opts.ref_audio).is_file():
        # The speech API takes 1 to 30 s; refuse here rather than fail every request later.
        try:
            check_reference_clip(opts.ref_audio)
        except WavError as exc:
            bad("ref_audio", str(exc))
    if opts.register_voice is not None and not opts.ref_audio:
        bad("register_voice", "needs ref_audio (and ref_text) to upload")
    if not opts.base_url.startswith(("http://", "https://")):
        bad("base_url", f"must start with http:// or https:// (got {opts.base_url!r})")


def build_request_body(
    opts: BenchOptions, text: str, ref_audio_uri: str | None = None
) -> dict[str, Any]:
    """The JSON body of one streamed request (speech-api.md). `ref_audio_uri` is the data
    URI of `opts.ref_audio`, passed in so the file is read once per run."""
    body: dict[str, Any] = {"input": text, "task_type": opts.task_type}
    if opts.model:
        body["model"] = opts.model
    if opts.language:
        body["language"] = opts.language
    voice = opts.register_voice or opts.voice
    if voice:
        body["voice"] = voice
    elif opts.task_type == "Base" and ref_audio_uri:
        body["ref_audio"] = ref_audio_uri
        if opts.ref_text:
            body["ref_text"] = opts.ref_text
    elif opts.speaker:
        body["speaker"] = opts.speaker
    if opts.instructions:
        body["instructions"] = opts.instructions
    if opts.max_new_tokens is not None:
        body["max_new_tokens"] = opts.max_new_tokens
    # `stream: true` alone means SSE on recent servers: always say which stream is wanted.
    body["stream"] = True
    body["stream_format"] = opts.stream_format
    body["response_format"] = opts.response_format
    return body


class _BodyEncoder:
    """Bytes of each request body from a template, so a large `ref_audio` data URI is
    serialised once per run rather than once per request."""

    def __init__(self, opts: BenchOptions, ref_audio_uri: str | None) -> None:
        common = build_request_body(opts, "", ref_audio_uri)
        del common["input"]
        self._tail = "," + json.dumps(common, separators=(",", ":"))[1:] if common else "}"

    def encode(self, text: str) -> bytes:
        return ('{"input":' + json.dumps(text) + self._tail).encode("utf-8")


@dataclass
class _Exchange:
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
    trace: dict[str, Any] = field(default_factory=dict)


def _is_stream_type(content_type: str | None, sse: bool) -> bool:
    content_type = (content_type or "").lower()
    if sse:
        return content_type == "text/event-stream"
    return content_type.startswith("audio/") or content_type == "application/octet-stream"


async def _receive(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    timeout_s: float,
    sse: bool,
    ex: _Exchange,
) -> None:
    """Send one request and collect its body; never raises except CancelledError."""
    times, pieces, ends = ex.times, ex.pieces, ex.ends
    ex.t_send = time.perf_counter()
    try:
        async with (
            asyncio.timeout(timeout_s),
            session.post(url, data=body, headers=_JSON_HEADERS, trace_request_ctx=ex.trace) as resp,
        ):
            ex.status = resp.status
            ex.content_type = resp.content_type
            if resp.status >= 400 or not _is_stream_type(resp.content_type, sse):
                ex.error_body = await resp.content.read(_ERROR_BODY_LIMIT)
                return
            # The hot loop: one clock read and three appends per piece, nothing else.
            async for data, end_of_chunk in resp.content.iter_chunks():
                if data:
                    times.append(time.perf_counter())
                    pieces.append(data)
                    ends.append(end_of_chunk)
                elif end_of_chunk and ends:
                    ends[-1] = True
    except TimeoutError:
        ex.failure = ("timeout", f"no complete response within {timeout_s:g} s")
    except aiohttp.ClientPayloadError as exc:
        ex.failure = ("truncated", f"body cut short: {_describe(exc)}")
    except (aiohttp.ClientError, OSError) as exc:
        kind = "connection" if ex.status is None else "truncated"
        ex.failure = (kind, _describe(exc))
    finally:
        ex.t_end = time.perf_counter()


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _connect_trace() -> aiohttp.TraceConfig:
    """Stamp connection setup per request, so connect time is recorded apart from TTFA."""

    async def start(_s: Any, ctx: Any, _p: Any) -> None:
        if ctx.trace_request_ctx is not None:
            ctx.trace_request_ctx["connect_start"] = time.perf_counter()

    async def end(_s: Any, ctx: Any, _p: Any) -> None:
        if ctx.trace_request_ctx is not None:
            ctx.trace_request_ctx["connect_end"] = time.perf_counter()

    async def reuse(_s: Any, ctx: Any, _p: Any) -> None:
        if ctx.trace_request_ctx is not None:
            ctx.trace_request_ctx["reused"] = True

    trace = aiohttp.TraceConfig()
    trace.on_connection_create_start.append(start)
    trace.on_connection_create_end.append(end)
    trace.on_connection_reuseconn.append(reuse)
    return trace


# -- after the stream: from raw pieces to a record ------------------------------------


def _server_chunks(
    times: Sequence[float], pieces: Sequence[bytes], ends: Sequence[bool]
) -> tuple[list[float], list[int]]:
    """Group pieces into the server's chunks; a chunk arrives with its last piece. A body
    without chunk ends (Content-Length) is one chunk."""
    arrivals: list[float] = []
    sizes: list[int] = []
    pending = 0
    for t, data, end in zip(times, pieces, ends, strict=True):
        pending += len(data)
        if end:
            arrivals.append(t)
            sizes.append(pending)
            pending = 0
    if pending:
        arrivals.append(times[-1])
        sizes.append(pending)
    return arrivals, sizes


_SSE_EVENT_END = re.compile(rb"\r?\n\r?\n")


def _sse_chunks(
    times: Sequence[float], pieces: Sequence[bytes]
) -> tuple[list[float], list[bytes], tuple[str, str] | None]:
    """Audio of each `speech.audio.delta` event and when its last byte arrived; a failure
    for an error event, a bad event, or a stream that ended without `speech.audio.done`."""
    buf = b"".join(pieces)
    piece_ends: list[int] = []
    total = 0
    for data in pieces:
        total += len(data)
        piece_ends.append(total)
    arrivals: list[float] = []
    audio: list[bytes] = []
    start = 0
    for match in _SSE_EVENT_END.finditer(buf):
        event, start_next = buf[start : match.start()], match.end()
        when = times[bisect.bisect_left(piece_ends, match.end())]
        start = start_next
        data = b"\n".join(
            line[5:].strip() for line in event.splitlines() if line.startswith(b"data:")
        )
        if not data or data == b"[DONE]":
            continue
        try:
            payload = json.loads(data)
        except ValueError:
            return arrivals, audio, ("sse_error", f"event is not JSON: {data[:80]!r}")
        kind = payload.get("type") if isinstance(payload, dict) else None
        if kind == "speech.audio.delta":
            try:
                chunk = base64.b64decode(payload.get("audio") or "", validate=True)
            except ValueError:
                return arrivals, audio, ("sse_error", "speech.audio.delta: audio is not base64")
            if chunk:
                arrivals.append(when)
                audio.append(chunk)
        elif kind == "speech.audio.done":
            return arrivals, audio, None
        elif kind == "speech.audio.error":
            err = payload.get("error")
            if isinstance(err, dict) and isinstance(err.get("error"), dict):
                err = err["error"]
            message = err.get("message") if isinstance(err, dict) else err
            return arrivals, audio, ("sse_error", str(message or "speech.audio.error event"))
    return arrivals, audio, ("truncated", "SSE stream ended without speech.audio.done")


def _strip_wav_header(
    sizes: list[int], arrivals: list[float], pcm: bytes, sample_rate: int
) -> tuple[list[float], list[int], bytes, tuple[str, str] | None]:
    """Drop the RIFF header from the front of a `wav` stream, checking its rate."""
    try:
        info = parse_wav_header(pcm[:4096], source="stream")
    except WavError as exc:
        return arrivals, sizes, pcm, ("content_type", f"response_format wav: {exc}")
    failure = None
    if info.sample_rate != sample_rate:
        why = f"WAV header says {info.sample_rate} Hz, the run uses {sample_rate} Hz"
        failure = ("content_type", why)
    skip = info.data_offset
    arrivals, sizes = list(arrivals), list(sizes)
    while skip and sizes:
        take = min(skip, sizes[0])
        sizes[0] -= take
        skip -= take
        if sizes[0] == 0:
            del sizes[0], arrivals[0]
    return arrivals, sizes, pcm[info.data_offset :], failure


def _error_message(body: bytes, status: int | None) -> str:
    text = body.decode("utf-8", errors="replace").strip()
    with contextlib.suppress(ValueError):
        data = json.loads(text)
        if isinstance(data, dict):
            err = data.get("error", data)
            if isinstance(err, dict) and err.get("message"):
                return str(err["message"])
            if isinstance(err, str):
                return err
            if data.get("detail"):
                return str(data["detail"])
    return text[:300] or f"HTTP {status} with an empty body"


@dataclass
class _RunContext:
    opts: BenchOptions
    out_dir: Path
    t_origin: float
    sample_rate: int = 0
    save_dir: Path | None = None
    save_below_index: int | None = None  # save audio of requests with a smaller index only


def _audio_path(ctx: _RunContext, ex: _Exchange) -> Path:
    assert ctx.save_dir is not None
    safe_id = re.sub(r"[^A-Za-z0-9._-]", "_", ex.prompt.sample_id)
    return ctx.save_dir / f"{ex.request_index:05d}_{safe_id}.wav"


def _build_record(ctx: _RunContext, ex: _Exchange) -> dict[str, Any]:
    opts, rate = ctx.opts, ctx.sample_rate
    failure = ex.failure
    status = ex.status
    if opts.stream_format == "sse":
        abs_arrivals, chunks, sse_failure = _sse_chunks(ex.times, ex.pieces)
        sizes = [len(c) for c in chunks]
        pcm = b"".join(chunks)
        if failure is None and status is not None and status < 400 and ex.pieces:
            failure = sse_failure
    else:
        abs_arrivals, sizes = _server_chunks(ex.times, ex.pieces, ex.ends)
        pcm = b"".join(ex.pieces)
    if opts.response_format == "wav" and pcm:
        abs_arrivals, sizes, pcm, wav_failure = _strip_wav_header(sizes, abs_arrivals, pcm, rate)
        failure = failure or wav_failure
    if failure is None:
        if status is not None and status >= 400:
            failure = ("http_status", _error_message(ex.error_body, status))
        elif not _is_stream_type(ex.content_type, opts.stream_format == "sse"):
            shown = _error_message(ex.error_body, status)
            failure = ("content_type", f"HTTP {status} {ex.content_type}: {shown}")
        elif not pcm:
            failure = ("empty", "the response carried no audio")
        elif len(pcm) % 2:
            failure = ("odd_bytes", f"{len(pcm)} audio bytes: a half sample at the end")
    t_send = ex.t_send if ex.t_send is not None else ctx.t_origin
    arrivals = [t - t_send for t in abs_arrivals]
    figures = metrics.request_figures(
        arrivals, sizes, pcm[: len(pcm) - len(pcm) % 2], rate, opts.threshold_s
    )
    ok = failure is None
    if not ok:
        figures["continuity_ok"] = False  # a player could not play a failed request
    trace = ex.trace
    if "connect_end" in trace and "connect_start" in trace:
        t_connect: float | None = trace["connect_end"] - trace["connect_start"]
    else:
        t_connect = 0.0 if trace.get("reused") else None
    audio_path = None
    wanted = ctx.save_below_index is None or ex.request_index < ctx.save_below_index
    if ok and not ex.warmup and ctx.save_dir is not None and wanted:
        path = write_wav(_audio_path(ctx, ex), pcm, rate)
        audio_path = _display_path(path, ctx.out_dir)
    return {
        "request_index": ex.request_index,
        "sample_id": ex.prompt.sample_id,
        "text": ex.prompt.text,
        "text_chars": len(ex.prompt.text),
        "warmup": ex.warmup,
        "ok": ok,
        "error": None if ok else error_info(failure[0], failure[1], status),
        "http_status": status,
        "t_submit_s": t_send - ctx.t_origin,
        "schedule_lag_s": (t_send - ex.scheduled) if ex.scheduled is not None else None,
        "t_connect_s": t_connect,
        "connection_reused": bool(trace.get("reused")),
        **{k: figures[k] for k in ("ttfa_s", "leading_silence_s", "ttfa_audible_s")},
        "ttfa_audible_naive_s": figures["ttfa_audible_naive_s"],
        "wall_s": (ex.t_end or t_send) - t_send,
        "chunk_arrival_s": arrivals,
        "chunk_bytes": sizes,
        "audio_s": figures["audio_s"],
        "sample_rate": rate,
        "max_underrun_s": figures["max_underrun_s"],
        "underrun_events": figures["underrun_events"],
        "continuity_ok": figures["continuity_ok"],
        "stalls": figures["stalls"],
        "stall_s": figures["stall_s"],
        "audio_path": audio_path,
    }


def _display_path(path: Path, out_dir: Path) -> str:
    """Relative to the out dir when the audio lies inside it (the run folder can move),
    else absolute."""
    path, out_dir = path.resolve(), out_dir.resolve()
    try:
        return str(path.relative_to(out_dir))
    except ValueError:
        return str(path)


class _RecordSink:
    """Builds and appends records in a thread of its own, off the event loop.

    `put` takes an exchange (built here) or a record a worker process built already. With
    `forward` (a worker's sink) records go to that callable instead of a file."""

    def __init__(
        self,
        path: Path | None,
        ctx: _RunContext,
        forward: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.ctx = ctx
        self.records: list[dict[str, Any]] = []
        self._forward = forward
        self._fh = path.open("w", encoding="utf-8") if path is not None else None
        self._queue: queue.SimpleQueue[_Exchange | dict[str, Any] | None] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="thetalker-records", daemon=True)
        # A thread holding the GIL keeps it up to the switch interval (5 ms by default) after
        # the receive loop asks for it: a chunk's stamp would wait that long behind a record.
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch_interval, _SWITCH_INTERVAL_S))
        self._thread.start()

    def put(self, ex: _Exchange | dict[str, Any]) -> None:
        self._queue.put(ex)

    def _run(self) -> None:
        while (ex := self._queue.get()) is not None:
            try:
                record = ex if isinstance(ex, dict) else _build_record(self.ctx, ex)
                if self._fh is not None:
                    append_record(self._fh, record)
                if self._forward is not None:
                    self._forward(record)
                self.records.append(record)
            except BaseException as exc:  # reported by close(); later records still written
                self._error = self._error or exc

    def close(self) -> list[dict[str, Any]]:
        self._queue.put(None)
        self._thread.join()
        sys.setswitchinterval(self._switch_interval)
        if self._fh is not None:
            self._fh.close()
        if self._error is not None:
            raise BenchError(f"writing records failed: {_describe(self._error)}")
        return sorted(self.records, key=lambda r: r["request_index"])


class _ProcessSink:
    """Builds and appends records in a process of its own, at a lower CPU priority.

    From `_PROCESS_SINK_FROM` streams up, building records in a thread (metrics, JSON,
    fsync: ~1 ms per request) competes with the receive loop for the GIL and delays its
    timestamps; in another process it does not, and the OS runs it when the receive loop
    is idle. The exchanges cross over an unbounded `multiprocessing.Queue` (pickled by its
    feeder thread, so `put` never blocks the loop). Same interface as `_RecordSink`."""

    def __init__(self, path: Path, ctx: _RunContext) -> None:
        self.ctx = ctx
        self.path = path
        mp = multiprocessing.get_context("spawn")
        self._queue = mp.Queue()
        self._done = mp.Queue()
        self._sent_ctx = False
        path.open("w", encoding="utf-8").close()  # the file exists from the start
        self._proc = mp.Process(
            target=_sink_process_main,
            args=(str(path), self._queue, self._done),
            name="thetalker-records",
            daemon=True,
        )
        self._proc.start()
        self._ready = False

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Block until the writer process has started (its imports cost ~1 s of CPU that
        must not overlap the scored requests); call it when nothing is in flight."""
        if not self._ready:
            with contextlib.suppress(queue.Empty):
                self._done.get(timeout=timeout_s)
            self._ready = True

    def put(self, ex: _Exchange | dict[str, Any]) -> None:
        if not self._sent_ctx:  # complete (sample rate known) once requests finish
            self._queue.put(self.ctx)
            self._sent_ctx = True
        self._queue.put(ex)

    def close(self) -> list[dict[str, Any]]:
        self._queue.put(None)
        error: str | None = "the record writer process ended without a word"
        while True:
            try:
                message = self._done.get(timeout=0.5)
            except queue.Empty:
                if not self._proc.is_alive():
                    break
                continue
            if message != ("ready",):
                error = message[0]
                break
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        self._queue.close()
        if error is not None:
            raise BenchError(f"writing records failed: {error}")
        records = list(read_records(self.path))
        return sorted(records, key=lambda r: r["request_index"])


def _sink_process_main(path: str, inbox: Any, done: Any) -> None:
    """The record writer process: exchanges in, fsynced JSONL lines out, until None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops it, after its records
    with contextlib.suppress(OSError):
        os.nice(10)
    parent = os.getppid()
    done.put(("ready",))
    error: str | None = None
    ctx: _RunContext | None = None
    with open(path, "a", encoding="utf-8") as fh:
        while True:
            try:
                item = inbox.get(timeout=1.0)
            except queue.Empty:
                if os.getppid() != parent:  # the parent was killed outright
                    break
                continue
            if item is None:
                break
            if isinstance(item, _RunContext):
                ctx = item
                continue
            try:
                assert ctx is not None
                record = item if isinstance(item, dict) else _build_record(ctx, item)
                append_record(fh, record)
            except BaseException as exc:  # reported by close(); later records still written
                error = error or _describe(exc)
    done.put((error,))


async def probe_sample_rate(
    session: aiohttp.ClientSession, base_url: str, body: dict[str, Any], timeout_s: float
) -> int:
    """The server's rate from the header of one non-streamed `wav` response."""
    probe = {k: v for k, v in body.items() if k not in ("stream", "stream_format")}
    probe["response_format"] = "wav"
    url = f"{normalize_base_url(base_url)}/v1/audio/speech"
    try:
        async with (
            asyncio.timeout(timeout_s),
            session.post(url, json=probe) as resp,
        ):
            data = await resp.read()
            if resp.status >= 400:
                message = _error_message(data, resp.status)
                raise ProbeError(f"sample-rate request: HTTP {resp.status}: {message}")
    except TimeoutError:
        raise ProbeError(f"sample-rate request: no answer within {timeout_s:g} s") from None
    except aiohttp.ClientError as exc:
        raise ProbeError(f"sample-rate request to {url}: {_describe(exc)}") from None
    try:
        return parse_wav_header(data, source="sample-rate response").sample_rate
    except WavError as exc:
        raise SampleRateError(f"{exc} (use --sample-rate N)") from None


async def _closed_loop(
    items: Sequence[tuple[int, Prompt, bool]],
    concurrency: int,
    send: Callable[[tuple[int, Prompt, bool], float | None], Awaitable[None]],
) -> None:
    it = iter(items)

    async def worker() -> None:
        for item in it:  # shared iterator: each worker takes the next item when free
            await send(item, None)

    async with asyncio.TaskGroup() as group:
        for _ in range(min(concurrency, len(items))):
            group.create_task(worker())


async def _open_loop(
    items: Sequence[tuple[int, Prompt, bool]],
    request_rate: float,
    seed: int,
    send: Callable[[tuple[int, Prompt, bool], float | None], Awaitable[None]],
) -> None:
    """Poisson arrivals on one clock: the first at once, then exponential gaps."""
    rng = random.Random(f"thetalker.arrivals:{seed}")
    t0 = time.perf_counter()
    offset = 0.0
    async with asyncio.TaskGroup() as group:
        for item in items:
            due = t0 + offset
            # A loop's timer may wake a little early; never send before the schedule.
            while (wait := due - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
            group.create_task(send(item, due))
            offset += rng.expovariate(request_rate)


# -- workers: the scored requests spread over processes ---------------------------------


@dataclass(frozen=True)
class _WorkerPlan:
    """What one worker process runs: its share of the scored requests, in sending order."""

    worker_id: int
    opts: BenchOptions
    out_dir: str
    t_origin: float  # the parent's clock origin: perf_counter is system-wide on Linux
    sample_rate: int
    save_below_index: int | None
    ref_uri: str | None
    items: tuple[tuple[int, Prompt, float | None], ...]  # (request_index, prompt, due offset)
    concurrency: int  # closed loop: this worker's share of the streams


def _effective_workers(opts: BenchOptions) -> int:
    """Workers that would get something to do: no more than requests (closed loop: streams)."""
    k = min(opts.workers, opts.requests)
    return k if opts.request_rate is not None else min(k, opts.concurrency)


def _arrival_offsets(n: int, request_rate: float, seed: int) -> list[float]:
    """The open loop's Poisson schedule, drawn exactly as `_open_loop` draws it."""
    rng = random.Random(f"thetalker.arrivals:{seed}")
    offsets: list[float] = []
    offset = 0.0
    for _ in range(n):
        offsets.append(offset)
        offset += rng.expovariate(request_rate)
    return offsets


def _split_items(
    items: Sequence[tuple[int, Prompt, bool]], opts: BenchOptions, k: int
) -> list[tuple[list[tuple[int, Prompt, float | None]], int]]:
    """Per worker: (its requests, its concurrency). Request i goes to worker i mod k, so
    each queue keeps the seeded order; open loop: the schedule is computed once, here."""
    if opts.request_rate is not None:
        offsets: list[float | None] = list(
            _arrival_offsets(len(items), opts.request_rate, opts.seed)
        )
    else:
        offsets = [None] * len(items)
    plans = []
    for w in range(k):
        share = opts.concurrency // k + (1 if w < opts.concurrency % k else 0)
        mine = [(i, p, o) for (i, p, _), o in zip(items[w::k], offsets[w::k], strict=True)]
        plans.append((mine, share))
    return plans


def _worker_main(plan: _WorkerPlan, results: Any, go: Any, t_go: Any) -> None:
    """A worker process (spawned): run its share, send each record back to the parent."""
    # A terminal's Ctrl-C reaches the whole process group: the parent alone decides and
    # stops the workers with SIGTERM, so their in-flight requests are recorded as cancelled.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            runner.run(_worker_run(plan, results, go, t_go))
    except asyncio.CancelledError:
        pass
    except BaseException as exc:  # reported by the parent, which stops the run
        results.put(("error", plan.worker_id, _describe(exc)))
    finally:
        results.put(("done", plan.worker_id, None))


async def _worker_run(plan: _WorkerPlan, results: Any, go: Any, t_go: Any) -> None:
    opts = plan.opts
    main = asyncio.current_task()
    assert main is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)
    parent = os.getppid()

    async def watch_parent() -> None:  # a parent killed outright leaves no orphan sending
        while os.getppid() == parent:
            await asyncio.sleep(0.5)
        main.cancel()

    watchdog = asyncio.create_task(watch_parent())
    save_dir = Path(opts.save_audio_dir) if opts.save_audio_dir is not None else None
    ctx = _RunContext(
        opts, Path(plan.out_dir), plan.t_origin, plan.sample_rate, save_dir, plan.save_below_index
    )
    sink = _RecordSink(None, ctx, forward=lambda r: results.put(("record", plan.worker_id, r)))
    encoder = _BodyEncoder(opts, plan.ref_uri)
    url = f"{normalize_base_url(opts.base_url)}/v1/audio/speech"
    sse = opts.stream_format == "sse"
    open_loop = opts.request_rate is not None
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0 if open_loop else plan.concurrency),
        trace_configs=[_connect_trace()],
        timeout=aiohttp.ClientTimeout(total=None),
    )

    async def send(item: tuple[int, Prompt, bool], scheduled: float | None) -> None:
        ex = _Exchange(item[0], item[1], False, scheduled)
        try:
            await _receive(session, url, encoder.encode(item[1].text), opts.timeout_s, sse, ex)
        except asyncio.CancelledError:
            ex.failure = ("cancelled", "the run stopped before this request finished")
            sink.put(ex)
            raise
        sink.put(ex)

    try:
        async with session:
            results.put(("ready", plan.worker_id, None))
            while not go.is_set():
                await asyncio.sleep(0.002)
            start = t_go.value
            if open_loop:
                async with asyncio.TaskGroup() as group:
                    for index, prompt, offset in plan.items:
                        due = start + (offset or 0.0)
                        while (wait := due - time.perf_counter()) > 0:
                            await asyncio.sleep(wait)
                        group.create_task(send((index, prompt, False), due))
            else:
                while (wait := start - time.perf_counter()) > 0:
                    await asyncio.sleep(wait)
                mine = [(i, p, False) for i, p, _ in plan.items]
                await _closed_loop(mine, plan.concurrency, send)
    finally:
        watchdog.cancel()
        sink.close()


def _max_overlap(intervals: Sequence[tuple[float, float]]) -> int:
    """Most intervals open at once (ends sort before starts at the same time)."""
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


async def _run_workers(
    opts: BenchOptions,
    ctx: _RunContext,
    ref_uri: str | None,
    items: Sequence[tuple[int, Prompt, bool]],
    sink: _RecordSink,
    state: dict[str, int],
    progress: ProgressFn | None,
) -> None:
    """The scored requests over `opts.workers` processes; their records come back here and
    go through the run's one sink (one records.jsonl, fsynced). Cancellation (Ctrl-C,
    SIGTERM) stops every worker, keeps their records, and goes on."""
    mp = multiprocessing.get_context("spawn")  # no fork of a process with threads and a loop
    results = mp.Queue()
    go = mp.Event()
    t_go = mp.RawValue("d", 0.0)
    k = _effective_workers(opts)
    procs = []
    for w, (mine, share) in enumerate(_split_items(items, opts, k)):
        plan = _WorkerPlan(
            w, opts, str(ctx.out_dir), ctx.t_origin, ctx.sample_rate, ctx.save_below_index,
            ref_uri, tuple(mine), share,
        )  # fmt: skip
        procs.append(
            mp.Process(
                target=_worker_main,
                args=(plan, results, go, t_go),
                name=f"thetalker-worker-{w}",
                daemon=True,
            )
        )
    pending, ready = set(range(k)), set()
    errors: list[str] = []
    spans: list[tuple[float, float]] = []

    def drain() -> None:
        while True:
            try:
                kind, wid, payload = results.get_nowait()
            except queue.Empty:
                return
            if kind == "ready":
                ready.add(wid)
            elif kind == "record":
                sink.put(payload)
                spans.append((payload["t_submit_s"], payload["t_submit_s"] + payload["wall_s"]))
                state["done"] += 1
                state["failed"] += not payload["ok"]
                if progress is not None:
                    progress(state["done"], opts.requests, state["failed"])
            elif kind == "error":
                errors.append(f"worker {wid}: {payload}")
            else:
                pending.discard(wid)

    def reap_dead() -> None:
        for w in list(pending):
            if procs[w].exitcode is not None:
                drain()  # what it sent before exiting
                if w in pending:
                    pending.discard(w)
                    errors.append(f"worker {w} exited with status {procs[w].exitcode}")

    loop = asyncio.get_running_loop()
    term_handled = False
    task = asyncio.current_task()
    if task is not None and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        # SIGTERM stops the run like Ctrl-C; a handler the caller set is left alone.
        with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
            loop.add_signal_handler(signal.SIGTERM, task.cancel)
            term_handled = True
    try:
        for proc in procs:
            proc.start()
        while pending and not errors:
            drain()
            if not go.is_set() and len(ready) == k:
                t_go.value = time.perf_counter() + 0.02  # one start, on the shared clock
                go.set()
            reap_dead()
            await asyncio.sleep(0.01)
    finally:
        if term_handled:
            loop.remove_signal_handler(signal.SIGTERM)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        # Stop what still runs; wait (blocking: nothing else runs here) for its records.
        for w in pending:
            if procs[w].is_alive():
                procs[w].terminate()
        deadline = time.monotonic() + 15.0
        while pending and time.monotonic() < deadline:
            drain()
            reap_dead()
            time.sleep(0.01)
        for proc in procs:
            if proc.is_alive():
                proc.kill()
            if proc.pid is not None:
                proc.join(5)
        drain()
        results.close()
        results.join_thread()
        state["max_in_flight"] = max(state["max_in_flight"], _max_overlap(spans))
    if errors:
        raise BenchError("; ".join(errors))


def _options_dict(opts: BenchOptions) -> dict[str, Any]:
    return {
        k: (os.fspath(v) if isinstance(v, os.PathLike) else v)
        for k, v in dataclasses.asdict(opts).items()
    }


def _summary(
    records: list[dict[str, Any]],
    opts: BenchOptions,
    sample_rate: int,
    rate_source: str,
    complete: bool,
    max_in_flight: int,
) -> dict[str, Any]:
    open_loop = opts.request_rate is not None
    summary = metrics.summarize_point(records, None if open_loop else opts.concurrency)
    scored = [r for r in records if not r["warmup"]]
    lags = [r["schedule_lag_s"] for r in scored if r.get("schedule_lag_s") is not None]
    summary.update(
        {
            "schema_version": SCHEMA_VERSION,
            "complete": complete,
            "sample_rate": sample_rate,
            "sample_rate_source": rate_source,
            "request_rate": opts.request_rate,
            "max_in_flight": max_in_flight,
            "n_warmup": sum(1 for r in records if r["warmup"]),
            "errors_by_type": dict(Counter(r["error"]["type"] for r in scored if r["error"])),
            "schedule_lag_s": (
                {**metrics.percentiles(lags), "max": max(lags) if lags else None}
                if open_loop
                else None
            ),
            "event_loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
            "aiohttp_version": aiohttp.__version__,
            "options": _options_dict(opts),
        }
    )
    return summary


async def arun_benchmark(
    opts: BenchOptions,
    prompts: Sequence[Prompt],
    out_dir: str | os.PathLike[str],
    progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """Run one load point; write `records.jsonl` (as requests finish) and `summary.json`.

    On cancellation the finished requests are already on disk, in-flight ones are written
    as `cancelled`, a summary with `complete: false` is written, and CancelledError goes on.
    """
    validate_options(opts)
    if not prompts:
        raise OptionsError("prompts: no prompts given")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    base_url = normalize_base_url(opts.base_url)
    url = f"{base_url}/v1/audio/speech"
    ref_uri = None
    if opts.ref_audio and opts.task_type == "Base" and not opts.register_voice:
        ref_uri = wav_data_uri(opts.ref_audio)
    encoder = _BodyEncoder(opts, ref_uri)
    sse = opts.stream_format == "sse"
    ctx = _RunContext(opts, out_dir, time.perf_counter())
    if opts.save_audio_dir is not None:
        ctx.save_dir = Path(opts.save_audio_dir)
        if opts.save_audio_count is not None:  # the first N scored, by sending order
            ctx.save_below_index = opts.warmup + opts.save_audio_count
        ctx.save_dir.mkdir(parents=True, exist_ok=True)
    open_loop = opts.request_rate is not None
    # Open loop sends on schedule: a pool limit would queue requests and hide the lag.
    connector = aiohttp.TCPConnector(limit=0 if open_loop else opts.concurrency)
    session = aiohttp.ClientSession(
        connector=connector,
        trace_configs=[_connect_trace()],
        timeout=aiohttp.ClientTimeout(total=None),  # per request, by asyncio.timeout
    )
    sink: _RecordSink | _ProcessSink
    if _effective_workers(opts) == 1 and (open_loop or opts.concurrency >= _PROCESS_SINK_FROM):
        sink = _ProcessSink(out_dir / "records.jsonl", ctx)
    else:
        sink = _RecordSink(out_dir / "records.jsonl", ctx)
    rate_source = "explicit" if opts.sample_rate else "auto"
    scored_total = opts.requests
    state = {"done": 0, "failed": 0, "in_flight": 0, "max_in_flight": 0}
    complete = False

    async def send(item: tuple[int, Prompt, bool], scheduled: float | None) -> None:
        index, prompt, warmup = item
        ex = _Exchange(index, prompt, warmup, scheduled)
        body = encoder.encode(prompt.text)
        state["in_flight"] += 1
        state["max_in_flight"] = max(state["max_in_flight"], state["in_flight"])
        try:
            await _receive(session, url, body, opts.timeout_s, sse, ex)
        except asyncio.CancelledError:
            ex.failure = ("cancelled", "the run stopped before this request finished")
            sink.put(ex)
            raise
        finally:
            state["in_flight"] -= 1
        sink.put(ex)
        if not warmup:
            state["done"] += 1
            if ex.failure or (ex.status or 0) >= 400:
                state["failed"] += 1
            if progress is not None:
                progress(state["done"], scored_total, state["failed"])

    try:
        async with session:
            if opts.register_voice:
                assert opts.ref_audio is not None
                await register_voice(
                    session, base_url, opts.register_voice, opts.ref_audio, opts.ref_text
                )
            first_body = build_request_body(opts, prompts[0].text, ref_uri)
            if opts.sample_rate is None:
                ctx.sample_rate = await probe_sample_rate(
                    session, base_url, first_body, opts.timeout_s
                )
            else:
                ctx.sample_rate = opts.sample_rate
            if opts.expected_sample_rate and ctx.sample_rate != opts.expected_sample_rate:
                raise SampleRateError(
                    f"sample rate {ctx.sample_rate} Hz ({rate_source}) is not the expected "
                    f"{opts.expected_sample_rate} Hz"
                )
            warm = ordered_prompts(prompts, opts.warmup, f"{opts.seed}:warmup")
            warm_items = [(i, p, True) for i, p in enumerate(warm)]
            if warm_items:
                await _closed_loop(warm_items, opts.concurrency, send)
            scored = ordered_prompts(prompts, opts.requests, opts.seed)
            items = [(len(warm) + i, p, False) for i, p in enumerate(scored)]
            if isinstance(sink, _ProcessSink):
                sink.wait_ready()  # nothing in flight: the warmup is over
            if _effective_workers(opts) > 1:
                await _run_workers(opts, ctx, ref_uri, items, sink, state, progress)
            elif opts.request_rate is not None:
                await _open_loop(items, opts.request_rate, opts.seed, send)
            else:
                await _closed_loop(items, opts.concurrency, send)
            complete = True
    finally:
        records = sink.close()
        if records or complete:
            summary = _summary(
                records, opts, ctx.sample_rate, rate_source, complete, state["max_in_flight"]
            )
            write_json(out_dir / "summary.json", summary)
    return summary


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when installed (a tighter timeline), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run_benchmark(
    opts: BenchOptions,
    prompts: Sequence[Prompt],
    out_dir: str | os.PathLike[str],
    progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """`arun_benchmark` on a fresh event loop (uvloop when installed). Ctrl-C cancels the
    run cleanly (see arun_benchmark) and then raises KeyboardInterrupt."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(arun_benchmark(opts, prompts, out_dir, progress))
