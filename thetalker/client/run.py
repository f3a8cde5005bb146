"""One load point end to end: probe, warmup, scored requests, records and summary."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from thetalker.api.speech import SpeechApiError, normalize_base_url, register_voice
from thetalker.backends import SAMPLE_RATE_HEADER, ServerApi
from thetalker.client.body import BodyEncoder, build_request_body
from thetalker.client.context import RunContext
from thetalker.client.exchange import Exchange, seen_failed
from thetalker.client.gc_pause import no_gc_pauses
from thetalker.client.options import (
    BenchError,
    BenchOptions,
    OptionsError,
    ProbeError,
    SampleRateError,
    effective_workers,
    validate_options,
)
from thetalker.client.probe import check_stream, probe_sample_rate
from thetalker.client.progress import (
    DEFAULT_INTERVAL_S,
    ProgressReporter,
    Tally,
    point_label,
    report_every,
)
from thetalker.client.schedule import arrival_offsets, closed_loop, dispatch, new_event_loop
from thetalker.client.sender import Sender, open_session
from thetalker.client.sigterm import sigterm_cancels_this_task
from thetalker.client.sinks import open_sink
from thetalker.client.summary import point_summary
from thetalker.client.workers import run_workers
from thetalker.client.ws_sender import WsSender
from thetalker.data.prompts import Prompt, ordered_prompts
from thetalker.data.record_writes import write_json
from thetalker.data.wavio import wav_data_uri
from thetalker.util.checks import field_message
from thetalker.util.fdlimit import FdLimitError, ensure_fd_limit

__all__ = ["ScoredWindow", "arun_benchmark", "run_benchmark"]

# Called (in a thread) with "begin" just before the first scored request and "end" just
# after the last one ends, and the run's clock origin (perf_counter, as t_submit_s counts
# from): what the warmup and the probe sent falls outside the window.
ScoredWindow = Callable[[str, float], None]


async def arun_benchmark(
    opts: BenchOptions,
    prompts: Sequence[Prompt],
    out_dir: str | os.PathLike[str],
    progress: ProgressReporter | None = None,
    scored_window: ScoredWindow | None = None,
) -> dict[str, Any]:
    """Run one load point; write `records.jsonl` (as requests finish) and `summary.json`.

    `progress`, when given, gets a `Progress` of the scored requests every `interval_s`
    seconds (the reporter's attribute; 5 s for a plain callable) and once when they are
    all done.

    On cancellation the finished requests are already on disk, in-flight ones are written
    as `cancelled`, a summary with `complete: false` is written, and CancelledError goes on.
    """
    api = validate_options(opts)  # the run's API, resolved once and carried from here
    try:  # a descriptor per stream, or refused before anything is sent (thetalker.util.fdlimit)
        ensure_fd_limit(opts.concurrency)
    except FdLimitError as exc:
        raise OptionsError(field_message("option", "concurrency", str(exc))) from None
    if not prompts:
        raise OptionsError(field_message("option", "prompts", "no prompts given"))
    interval_s = getattr(progress, "interval_s", DEFAULT_INTERVAL_S)
    if not interval_s > 0:
        raise OptionsError(
            field_message("option", "progress", f"interval_s must be > 0 (got {interval_s})")
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    base_url = normalize_base_url(opts.base_url)
    ref_uri = None
    if opts.ref_audio and opts.task_type == "Base" and not opts.register_voice:
        ref_uri = wav_data_uri(opts.ref_audio)
    ctx = RunContext.for_run(opts, out_dir, time.perf_counter(), 0, api)
    if ctx.save_dir is not None:
        ctx.save_dir.mkdir(parents=True, exist_ok=True)
    session = open_session(opts, opts.concurrency)
    sink = open_sink(out_dir / "records.jsonl", ctx)
    # A failed record write stops the point at once: what is sent after it would be lost.
    sink.on_failure = _cancel_on_failure(asyncio.current_task(), asyncio.get_running_loop())
    rate_source = "explicit" if opts.sample_rate else "auto"
    tally = Tally(point_label(opts.concurrency, opts.request_rate), opts.requests)

    def count(ex: Exchange) -> None:  # scored requests only; the record decides the rest
        if not ex.warmup:
            tally.add(not seen_failed(ex, opts.stream_format == "sse"))

    encoder = BodyEncoder(opts, ref_uri, api)
    if opts.protocol == "websocket":  # the agent mode: one session per request
        send: Sender | WsSender = WsSender(session, opts, ref_uri, sink, api, on_done=count)
    else:
        send = Sender(session, opts, encoder, sink, api, on_done=count)
    max_in_flight = 0
    complete = False
    try:
        async with session:
            if opts.register_voice:
                assert opts.ref_audio is not None
                try:
                    await register_voice(
                        session, base_url, opts.register_voice, opts.ref_audio, opts.ref_text
                    )
                except SpeechApiError as exc:
                    raise BenchError(str(exc)) from None
            first_body = build_request_body(opts, prompts[0].text, ref_uri, api)
            sse = opts.stream_format == "sse"
            fixed_rate = api.sample_rate
            streamed_probe = False  # the rate was read from the streamed request itself
            if opts.sample_rate is None and isinstance(fixed_rate, int):
                ctx.sample_rate, rate_source = fixed_rate, "server"  # the API's fixed rate
            elif opts.sample_rate is None:
                ctx.sample_rate = await probe_sample_rate(
                    session, base_url, first_body, opts.timeout_s, api, sse
                )
                streamed_probe = fixed_rate == SAMPLE_RATE_HEADER
            else:
                ctx.sample_rate = opts.sample_rate
                if opts.check_sample_rate:
                    await _check_explicit_rate(session, base_url, first_body, opts, api)
            if sse and opts.protocol != "websocket" and not streamed_probe:
                # The wav probe checked the body; whether the server streams SSE at all only
                # a streamed request shows (a diffusion model answers one whole body): the
                # run's request, once, refused -> one line, no warmup.
                body = encoder.encode(prompts[0].text)
                await check_stream(session, base_url, body, opts.timeout_s, sse)
            if opts.expected_sample_rate and ctx.sample_rate != opts.expected_sample_rate:
                raise SampleRateError(
                    f"sample rate {ctx.sample_rate} Hz ({rate_source}) is not the expected "
                    f"{opts.expected_sample_rate} Hz"
                )
            warm = ordered_prompts(prompts, opts.warmup, f"{opts.seed}:warmup")
            warm_items = [(i, p, True) for i, p in enumerate(warm)]
            if warm_items:
                await closed_loop(warm_items, opts.concurrency, send)
            scored = ordered_prompts(prompts, opts.requests, opts.seed)
            items = [(len(warm) + i, p, False) for i, p in enumerate(scored)]
            sink.wait_ready()  # nothing in flight: the warmup is over
            max_in_flight = send.max_in_flight
            if scored_window is not None:  # e.g. the server's /metrics, read before
                await asyncio.to_thread(scored_window, "begin", ctx.t_origin)
            tally.t_start = time.monotonic()
            reporting = None
            if progress is not None:
                reporting = asyncio.create_task(report_every(tally, progress, interval_s))
            try:
                with no_gc_pauses():  # no collector pause in any stream's timeline
                    if effective_workers(opts) > 1:
                        spread = await run_workers(opts, ctx, ref_uri, items, sink, tally)
                        max_in_flight = max(max_in_flight, spread)
                    else:
                        offsets = None
                        if opts.request_rate is not None:
                            offsets = arrival_offsets(len(items), opts.request_rate, opts.seed)
                        start = time.perf_counter()
                        drop = getattr(send, "drop", None)
                        await dispatch(
                            items, send, opts.concurrency, offsets, start, opts.max_in_flight, drop
                        )
            finally:
                if reporting is not None:
                    reporting.cancel()
            if scored_window is not None:  # ... and after the scored requests
                await asyncio.to_thread(scored_window, "end", ctx.t_origin)
            complete = True
    finally:
        max_in_flight = max(max_in_flight, send.max_in_flight)
        records = sink.close()
        if complete and progress is not None:  # the last line: the records' counts
            tally.settle(records)
            progress(tally.snapshot())
        if records or complete:
            summary = point_summary(
                records, opts, ctx.sample_rate, rate_source, complete, max_in_flight
            )
            write_json(out_dir / "summary.json", summary)
        else:  # stopped before any request (a failed probe): no empty file claims a point ran
            _remove_if_empty(out_dir / "records.jsonl")
    return summary


def _remove_if_empty(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.stat().st_size == 0:
            path.unlink()


def _cancel_on_failure(
    task: asyncio.Task[Any] | None, loop: asyncio.AbstractEventLoop
) -> Callable[[str], None]:
    """The sink's `on_failure` (called from its writer thread): cancel the run's task; the
    sink's close then raises BenchError naming the file."""

    def cancel(_message: str) -> None:
        if task is not None:
            loop.call_soon_threadsafe(task.cancel)

    return cancel


async def _check_explicit_rate(
    session: Any, base_url: str, body: dict[str, Any], opts: BenchOptions, api: ServerApi
) -> None:
    """An explicit rate checked against the server's own (one non-streamed `wav` request):
    a wrong one would scale every audio second and RTFx. A server that cannot answer the
    probe leaves the explicit rate trusted, with a warning."""
    try:
        sse = opts.stream_format == "sse"
        served = await probe_sample_rate(session, base_url, body, opts.timeout_s, api, sse)
    except (ProbeError, SampleRateError) as exc:
        print(f"warning: sample_rate {opts.sample_rate} not checked: {exc}", file=sys.stderr)
        return
    if served != opts.sample_rate:
        raise SampleRateError(
            f"sample_rate: {opts.sample_rate} Hz given, but the server streams {served} Hz "
            f"(its wav header); set sample_rate to {served} or leave it unset"
        )


def run_benchmark(
    opts: BenchOptions,
    prompts: Sequence[Prompt],
    out_dir: str | os.PathLike[str],
    progress: ProgressReporter | None = None,
    scored_window: ScoredWindow | None = None,
) -> dict[str, Any]:
    """`arun_benchmark` on a fresh event loop (uvloop when installed). Ctrl-C cancels the
    run cleanly (see arun_benchmark) and then raises KeyboardInterrupt; SIGTERM (a
    supervisor, `scancel`) does the same and raises CancelledError, unless the caller
    handles SIGTERM itself (the bench job's guard)."""
    run = arun_benchmark(opts, prompts, out_dir, progress, scored_window)
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(_cancelled_by_sigterm(run))


async def _cancelled_by_sigterm(run: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    """`run`, cancelled by SIGTERM as Ctrl-C cancels it: in-flight requests recorded as
    `cancelled`, `summary.json` written. A handler the caller set is left alone."""
    with sigterm_cancels_this_task():
        return await run
