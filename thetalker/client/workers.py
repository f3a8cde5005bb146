"""Workers: the scored requests spread over spawned processes after the warmup.

They stamp the same system-wide `perf_counter` and send finished records back to the
parent, the one writer of records.jsonl.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import queue
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from thetalker.client.body import BodyEncoder
from thetalker.client.options import BenchError, BenchOptions, effective_workers
from thetalker.client.progress import ProgressFn
from thetalker.client.receive import _connect_trace, _describe, _Exchange, _receive
from thetalker.client.record import RunContext
from thetalker.client.schedule import arrival_offsets, closed_loop, new_event_loop
from thetalker.client.sinks import ThreadSink
from thetalker.prompts import Prompt
from thetalker.voice_cli import normalize_base_url

__all__ = ["WorkerPlan", "split_items", "max_overlap", "run_workers"]


@dataclass(frozen=True)
class WorkerPlan:
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


def split_items(
    items: Sequence[tuple[int, Prompt, bool]], opts: BenchOptions, k: int
) -> list[tuple[list[tuple[int, Prompt, float | None]], int]]:
    """Per worker: (its requests, its concurrency). Request i goes to worker i mod k, so
    each queue keeps the seeded order; open loop: the schedule is computed once, here."""
    if opts.request_rate is not None:
        offsets: list[float | None] = list(
            arrival_offsets(len(items), opts.request_rate, opts.seed)
        )
    else:
        offsets = [None] * len(items)
    plans = []
    for w in range(k):
        share = opts.concurrency // k + (1 if w < opts.concurrency % k else 0)
        mine = [(i, p, o) for (i, p, _), o in zip(items[w::k], offsets[w::k], strict=True)]
        plans.append((mine, share))
    return plans


def _worker_main(plan: WorkerPlan, results: Any, go: Any, t_go: Any) -> None:
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


async def _worker_run(plan: WorkerPlan, results: Any, go: Any, t_go: Any) -> None:
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
    ctx = RunContext(
        opts, Path(plan.out_dir), plan.t_origin, plan.sample_rate, save_dir, plan.save_below_index
    )
    sink = ThreadSink(None, ctx, forward=lambda r: results.put(("record", plan.worker_id, r)))
    encoder = BodyEncoder(opts, plan.ref_uri)
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
                await closed_loop(mine, plan.concurrency, send)
    finally:
        watchdog.cancel()
        sink.close()


def max_overlap(intervals: Sequence[tuple[float, float]]) -> int:
    """Most intervals open at once (ends sort before starts at the same time)."""
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


async def run_workers(
    opts: BenchOptions,
    ctx: RunContext,
    ref_uri: str | None,
    items: Sequence[tuple[int, Prompt, bool]],
    sink: ThreadSink,
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
    k = effective_workers(opts)
    procs = []
    for w, (mine, share) in enumerate(split_items(items, opts, k)):
        plan = WorkerPlan(
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
        state["max_in_flight"] = max(state["max_in_flight"], max_overlap(spans))
    if errors:
        raise BenchError("; ".join(errors))
