"""One record from one exchange: decoding, failure type, figures, saved audio."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thetalker import metrics
from thetalker.api.speech import error_message
from thetalker.client.decode import server_chunks, sse_chunks, strip_wav_header
from thetalker.client.options import BenchOptions
from thetalker.client.receive import _ERROR_BODY_LIMIT, _Exchange, _is_stream_type
from thetalker.data.records import Record, RequestFigures, error_info
from thetalker.data.wavio import write_wav

__all__ = ["RunContext", "build_record"]


@dataclass
class RunContext:
    """What building a record needs besides the exchange (picklable: it crosses to the
    writer process and to workers)."""

    opts: BenchOptions
    out_dir: Path
    t_origin: float  # perf_counter at the run's start: perf_counter is system-wide on Linux
    sample_rate: int = 0
    save_dir: Path | None = None
    save_below_index: int | None = None  # save audio of requests with a smaller index only

    @classmethod
    def for_run(
        cls, opts: BenchOptions, out_dir: Path, t_origin: float, sample_rate: int = 0
    ) -> RunContext:
        """Where audio goes: `save_audio_dir`, only the first `save_audio_count` scored
        requests by sending order (indices after the warmup's)."""
        save_dir = Path(opts.save_audio_dir) if opts.save_audio_dir is not None else None
        below = None
        if save_dir is not None and opts.save_audio_count is not None:
            below = opts.warmup + opts.save_audio_count
        return cls(opts, out_dir, t_origin, sample_rate, save_dir, below)


# Longest sample_id part of a saved audio file's name: far below a file system's 255 bytes.
AUDIO_NAME_ID_CHARS = 64


def audio_file_name(request_index: int, sample_id: str) -> str:
    """`{index:05d}_{id}.wav`, the id's characters other than `A-Za-z0-9._-` as `_`; an id
    longer than AUDIO_NAME_ID_CHARS is cut and given a hash of the whole id, so any id
    makes a valid, distinct name (the record keeps the full id)."""
    safe_id = re.sub(r"[^A-Za-z0-9._-]", "_", sample_id)
    if len(safe_id) > AUDIO_NAME_ID_CHARS:
        digest = hashlib.sha256(sample_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        safe_id = f"{safe_id[:AUDIO_NAME_ID_CHARS]}-{digest}"
    return f"{request_index:05d}_{safe_id}.wav"


def audio_file(ctx: RunContext, ex: _Exchange) -> Path:
    assert ctx.save_dir is not None
    return ctx.save_dir / audio_file_name(ex.request_index, ex.prompt.sample_id)


def build_record(ctx: RunContext, ex: _Exchange) -> Record:
    """Decode the exchange, type its failure, derive its figures, save its audio."""
    if getattr(ex, "protocol", "http") == "websocket":  # the agent mode's session
        from thetalker.client.ws_record import build_ws_record

        return build_ws_record(ctx, ex)  # type: ignore[arg-type]
    opts, rate = ctx.opts, ctx.sample_rate
    failure = ex.failure
    status = ex.status
    if opts.stream_format == "sse":
        abs_arrivals, chunks, sse_failure = sse_chunks(ex.times, ex.pieces)
        sizes = [len(c) for c in chunks]
        pcm = b"".join(chunks)
        if failure is None and status is not None and status < 400 and ex.pieces:
            failure = sse_failure
    else:
        abs_arrivals, sizes = server_chunks(ex.times, ex.pieces, ex.ends)
        pcm = b"".join(ex.pieces)
    if opts.response_format == "wav" and pcm:
        abs_arrivals, sizes, pcm, wav_failure = strip_wav_header(sizes, abs_arrivals, pcm, rate)
        failure = failure or wav_failure
    if failure is None:
        limit = _ERROR_BODY_LIMIT  # what the receive loop reads of a non-audio body
        if status is not None and status >= 400:
            failure = ("http_status", error_message(ex.error_body, status, ex.content_type, limit))
        elif not _is_stream_type(ex.content_type, opts.stream_format == "sse"):
            shown = error_message(ex.error_body, status, ex.content_type, limit)
            failure = ("content_type", f"HTTP {status} {ex.content_type}: {shown}")
        elif not pcm:
            failure = ("empty", "the response carried no audio")
        elif len(pcm) % 2:
            failure = ("odd_bytes", f"{len(pcm)} audio bytes: a half sample at the end")
    t_send = ex.t_send if ex.t_send is not None else ctx.t_origin
    arrivals = [t - t_send for t in abs_arrivals]
    ok = failure is None
    usable = pcm[: len(pcm) - len(pcm) % 2]
    figures = figures_of(arrivals, sizes, usable, rate, opts.threshold_s, ok)
    trace = ex.trace
    if "connect_end" in trace and "connect_start" in trace:
        t_connect: float | None = trace["connect_end"] - trace["connect_start"]
    else:
        t_connect = 0.0 if trace.get("reused") else None
    audio_path = saved_audio(ctx, ex, ok, pcm, rate)
    return Record(
        **identity_fields(ex),
        ok=ok,
        error=None if failure is None else error_info(failure[0], failure[1], status),
        http_status=status,
        t_submit_s=t_send - ctx.t_origin,
        schedule_lag_s=(t_send - ex.scheduled) if ex.scheduled is not None else None,
        t_connect_s=t_connect,
        connection_reused=bool(trace.get("reused")),
        wall_s=(ex.t_end or t_send) - t_send,
        chunk_arrival_s=arrivals,
        chunk_bytes=sizes,
        sample_rate=rate,
        **dataclasses.asdict(figures),
        audio_path=audio_path,
    )


def identity_fields(ex: Any) -> dict[str, Any]:
    """Which request a record is: the fields every record starts with, HTTP or WebSocket."""
    return {
        "request_index": ex.request_index,
        "sample_id": ex.prompt.sample_id,
        "text": ex.prompt.text,
        "text_chars": len(ex.prompt.text),
        "warmup": ex.warmup,
    }


def figures_of(
    arrivals: list[float], sizes: list[int], pcm: bytes, rate: int, threshold_s: float, ok: bool
) -> RequestFigures:
    """The per-request figures of a timeline (thetalker.metrics); a failed request is never
    continuous, since a player could not have played it."""
    figures = RequestFigures.from_metrics(
        metrics.request_metrics(arrivals, sizes, pcm, rate, threshold_s)
    )
    return figures if ok else dataclasses.replace(figures, continuity_ok=False)


def saved_audio(ctx: RunContext, ex: _Exchange, ok: bool, pcm: bytes, rate: int) -> str | None:
    """Write a scored, successful request's audio when the run saves it; its shown path."""
    wanted = ctx.save_below_index is None or ex.request_index < ctx.save_below_index
    if not (ok and not ex.warmup and ctx.save_dir is not None and wanted):
        return None
    return display_path(write_wav(audio_file(ctx, ex), pcm, rate), ctx.out_dir)


def display_path(path: Path, out_dir: Path) -> str:
    """Relative to the out dir when the audio lies inside it (the run folder can move),
    else absolute."""
    path, out_dir = path.resolve(), out_dir.resolve()
    try:
        return str(path.relative_to(out_dir))
    except ValueError:
        return str(path)
