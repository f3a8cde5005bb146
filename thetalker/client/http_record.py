"""One record from one HTTP exchange: decoding, failure type, figures, saved audio."""

from __future__ import annotations

from thetalker.api.speech import error_message
from thetalker.client.context import RunContext, exchange_fields, figures_of, saved_audio
from thetalker.client.decode import drop_front, server_chunks, sse_chunks, strip_wav_header
from thetalker.client.exchange import ERROR_BODY_LIMIT, Exchange, is_stream_type
from thetalker.data.records import Record

__all__ = ["build_http_record"]


def build_http_record(ctx: RunContext, ex: Exchange) -> Record:
    """Decode the exchange, type its failure, derive its figures, save its audio."""
    opts, rate = ctx.opts, ctx.sample_rate
    failure = ex.failure
    status = ex.status
    api = ctx.api
    # Reads: every piece of audio as it arrived. An SSE event's audio can only be decoded
    # once its last byte came, so an SSE stream has its events and no reads.
    read_times: list[float] | None = None
    read_sizes: list[int] | None = None
    if opts.stream_format == "sse":
        events = api.sse_error_events
        abs_arrivals, chunks, sse_failure = sse_chunks(ex.times, ex.pieces, events)
        sizes = [len(c) for c in chunks]
        pcm = b"".join(chunks)
        if failure is None and status is not None and status < 400 and ex.pieces:
            failure = sse_failure
    else:
        abs_arrivals, sizes = server_chunks(ex.times, ex.pieces, ex.ends)
        read_times, read_sizes = list(ex.times), [len(p) for p in ex.pieces]
        pcm = b"".join(ex.pieces)
    if failure is None and ex.rate_header is not None and ex.rate_header != str(rate):
        why = f"{api.sample_rate_header}: {ex.rate_header} Hz, the run uses {rate} Hz"
        failure = ("content_type", why)
    if opts.response_format == "wav" and pcm:
        whole = len(pcm)
        abs_arrivals, sizes, pcm, wav_failure = strip_wav_header(sizes, abs_arrivals, pcm, rate)
        failure = failure or wav_failure
        if read_times is not None and read_sizes is not None:
            read_times, read_sizes = drop_front(read_times, read_sizes, whole - len(pcm))
    if failure is None:
        limit = ERROR_BODY_LIMIT  # what the receive loop reads of a non-audio body
        if status is not None and status >= 400:
            message = error_message(ex.error_body, status, ex.content_type, limit)
            failure = (api.errors.failure_type(status, message), message)
        elif not is_stream_type(ex.content_type, opts.stream_format == "sse"):
            shown = error_message(ex.error_body, status, ex.content_type, limit)
            failure = ("content_type", f"HTTP {status} {ex.content_type}: {shown}")
        elif not pcm:
            failure = ("empty", "the response carried no audio")
        elif len(pcm) % 2:
            failure = ("odd_bytes", f"{len(pcm)} audio bytes: a half sample at the end")
    t_send = ex.t_send if ex.t_send is not None else ctx.t_origin
    arrivals = [t - t_send for t in abs_arrivals]
    reads = None if read_times is None else [t - t_send for t in read_times]
    ok = failure is None
    usable = pcm[: len(pcm) - len(pcm) % 2]
    figures = figures_of(
        arrivals, sizes, usable, rate, opts.threshold_s, ok, reads, read_sizes, opts.onset
    )
    trace = ex.trace
    if "connect_end" in trace and "connect_start" in trace:
        t_connect: float | None = trace["connect_end"] - trace["connect_start"]
    else:
        t_connect = 0.0 if trace.get("reused") else None
    connect_s = trace["conn"] - t_send if "conn" in trace else None
    sent_s = trace["sent"] - t_send if "sent" in trace else None
    audio_path = saved_audio(ctx, ex, ok, pcm, rate)
    return Record(
        **exchange_fields(
            ctx, ex, failure, status, t_send, sent_s, arrivals, sizes, figures, audio_path
        ),
        t_connect_s=t_connect,
        connection_reused=bool(trace.get("reused")),
        connect_s=connect_s,
        read_arrival_s=reads,
        read_bytes=read_sizes,
    )
