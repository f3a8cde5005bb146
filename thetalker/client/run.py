"""One load point end to end: probe, warmup, scored requests, records and summary."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from thetalker.client.body import BodyEncoder, build_request_body
from thetalker.client.options import (
    BenchOptions,
    OptionsError,
    SampleRateError,
    effective_workers,
    validate_options,
)
from thetalker.client.probe import probe_sample_rate
from thetalker.client.progress import ProgressFn
from thetalker.client.receive import _connect_trace, _Exchange, _receive
from thetalker.client.record import RunContext
from thetalker.client.schedule import closed_loop, new_event_loop, open_loop
from thetalker.client.sinks import open_sink
from thetalker.client.summary import point_summary
from thetalker.client.workers import run_workers
from thetalker.prompts import Prompt, ordered_prompts
from thetalker.records import write_json
from thetalker.voice_cli import normalize_base_url, register_voice
from thetalker.wavio import wav_data_uri

__all__ = ["arun_benchmark", "run_benchmark"]


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
    encoder = BodyEncoder(opts, ref_uri)
    sse = opts.stream_format == "sse"
    ctx = RunContext(opts, out_dir, time.perf_counter())
    if opts.save_audio_dir is not None:
        ctx.save_dir = Path(opts.save_audio_dir)
        if opts.save_audio_count is not None:  # the first N scored, by sending order
            ctx.save_below_index = opts.warmup + opts.save_audio_count
        ctx.save_dir.mkdir(parents=True, exist_ok=True)
    is_open_loop = opts.request_rate is not None
    # Open loop sends on schedule: a pool limit would queue requests and hide the lag.
    connector = aiohttp.TCPConnector(limit=0 if is_open_loop else opts.concurrency)
    session = aiohttp.ClientSession(
        connector=connector,
        trace_configs=[_connect_trace()],
        timeout=aiohttp.ClientTimeout(total=None),  # per request, by asyncio.timeout
    )
    sink = open_sink(out_dir / "records.jsonl", ctx)
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
                await closed_loop(warm_items, opts.concurrency, send)
            scored = ordered_prompts(prompts, opts.requests, opts.seed)
            items = [(len(warm) + i, p, False) for i, p in enumerate(scored)]
            sink.wait_ready()  # nothing in flight: the warmup is over
            if effective_workers(opts) > 1:
                await run_workers(opts, ctx, ref_uri, items, sink, state, progress)
            elif opts.request_rate is not None:
                await open_loop(items, opts.request_rate, opts.seed, send)
            else:
                await closed_loop(items, opts.concurrency, send)
            complete = True
    finally:
        records = sink.close()
        if records or complete:
            summary = point_summary(
                records, opts, ctx.sample_rate, rate_source, complete, state["max_in_flight"]
            )
            write_json(out_dir / "summary.json", summary)
    return summary


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
