"""Workers: the scored requests spread over spawned processes after the warmup.

They stamp the same system-wide `perf_counter` and send finished records back to the
parent, the one writer of records.jsonl.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thetalker.backends import ServerApi
from thetalker.client.body import BodyEncoder
from thetalker.client.child import ParentWatch
from thetalker.client.context import RunContext
from thetalker.client.exchange import describe
from thetalker.client.gc_pause import no_gc_pauses
from thetalker.client.options import BenchError, BenchOptions, effective_workers
from thetalker.client.progress import Tally
from thetalker.client.schedule import Item, arrival_offsets, dispatch, new_event_loop
from thetalker.client.sender import Sender, open_session
from thetalker.client.sigterm import sigterm_cancels_this_task
from thetalker.client.sinks import RecordSink, ThreadSink
from thetalker.client.ws_sender import WsSender

__all__ = ["Share", "WorkerPlan", "split_items", "max_overlap", "run_workers"]


@dataclass(frozen=True)
class Share:
    """One worker's part of the scored requests, in sending order."""

    items: tuple[Item, ...]
    offsets: tuple[float, ...] | None  # open loop: each one's slot in the one schedule
    concurrency: int  # closed loop: this worker's share of the streams


@dataclass(frozen=True)
class WorkerPlan:
    """What one worker process runs."""

    worker_id: int
    opts: BenchOptions
    out_dir: str
    t_origin: float  # the parent's clock origin: perf_counter is system-wide on Linux
    sample_rate: int
    ref_uri: str | None
    share: Share
    api: ServerApi  # the run's, resolved once in the parent


def split_items(items: Sequence[Item], opts: BenchOptions, k: int) -> list[Share]:
    """Request i goes to worker i mod k, so each queue keeps the seeded order; open loop:
    the schedule is drawn once, here, and each worker sends its slots of it."""
    offsets = None
    if opts.request_rate is not None:
        offsets = arrival_offsets(len(items), opts.request_rate, opts.seed)
    shares = []
    for w in range(k):
        streams = opts.concurrency // k + (1 if w < opts.concurrency % k else 0)
        mine = offsets[w::k] if offsets is not None else None
        shares.append(Share(tuple(items[w::k]), None if mine is None else tuple(mine), streams))
    return shares


# A worker looks for its parent at least this often while its records wait to be written.
PARENT_CHECK_S = 0.5


def _worker_main(plan: WorkerPlan, results: Any, go: Any, t_go: Any) -> None:
    """A worker process (spawned): run its share, send each record back to the parent."""
    # The parent stops the workers with SIGTERM, so their in-flight requests are recorded
    # as cancelled.
    watch = ParentWatch()
    # The GIL switch interval stays Python's 5 ms: an interleaved A/B against 0.2 ms
    # (benchmarks/README.md, 2026-12-06) could not tell them apart at 64, 256 or 1,024 streams.
    try:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            runner.run(_worker_run(plan, watch, results, go, t_go))
    except asyncio.CancelledError:
        pass
    except BaseException as exc:  # reported by the parent, which stops the run
        results.put(("error", plan.worker_id, describe(exc)))
    finally:
        results.put(("done", plan.worker_id, None))
        _flush_while_parent_lives(results, watch)


def _flush_while_parent_lives(results: Any, watch: ParentWatch) -> None:
    """Wait for the queue's feeder to write what it holds to the parent, but only while the
    parent lives. multiprocessing joins the feeder at exit with no deadline, and the pipe
    of a parent killed outright is read by no one: a full one would keep this worker (and
    the resource tracker) running for ever. A child never waits on its parent without a
    deadline; a dead parent means "end"."""
    results.close()
    flushed = threading.Thread(target=results.join_thread, name="thetalker-flush", daemon=True)
    flushed.start()
    while flushed.is_alive():
        flushed.join(PARENT_CHECK_S)
        if flushed.is_alive() and not watch.parent_alive():
            results.cancel_join_thread()  # no join at exit: what it held had no reader
            return


async def _worker_run(
    plan: WorkerPlan, watch: ParentWatch, results: Any, go: Any, t_go: Any
) -> None:
    opts, share = plan.opts, plan.share
    main = asyncio.current_task()
    assert main is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main.cancel)
    watchdog = asyncio.create_task(watch.cancel_when_gone(main))
    ctx = RunContext.for_run(opts, Path(plan.out_dir), plan.t_origin, plan.sample_rate, plan.api)
    sink = ThreadSink(None, ctx, forward=lambda r: results.put(("record", plan.worker_id, r)))
    session = open_session(opts, share.concurrency)
    if opts.protocol == "websocket":  # the agent mode: one session per request
        send: Sender | WsSender = WsSender(session, opts, plan.ref_uri, sink, plan.api)
    else:
        send = Sender(session, opts, BodyEncoder(opts, plan.ref_uri, plan.api), sink, plan.api)
    try:
        async with session:
            results.put(("ready", plan.worker_id, None))
            while not go.is_set():
                await asyncio.sleep(0.002)
            with no_gc_pauses():  # as the in-process run (thetalker.client.gc_pause)
                await dispatch(share.items, send, share.concurrency, share.offsets, t_go.value)
    finally:
        watchdog.cancel()
        sink.close()


def _on_wire_span(record: dict[str, Any]) -> tuple[float, float] | None:
    """When a record's request was on the wire (run clock): from its body's first byte to its
    end, as the senders count in flight; None when it never got on the wire."""
    sent = record.get("request_sent_s")
    if sent is None:
        return None
    start = float(record["t_submit_s"])
    return start + float(sent), start + float(record["wall_s"])


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
    items: Sequence[Item],
    sink: RecordSink,
    tally: Tally,
) -> int:
    """The scored requests over `opts.workers` processes; their records come back here and
    go through the run's one sink (one records.jsonl). Cancellation (Ctrl-C,
    SIGTERM) stops every worker, keeps their records, and goes on. Returns the most
    requests that were in flight at once."""
    mp = multiprocessing.get_context("spawn")  # no fork of a process with threads and a loop
    results = mp.Queue()
    go = mp.Event()
    t_go = mp.RawValue("d", 0.0)
    k = effective_workers(opts)
    procs = []
    for w, share in enumerate(split_items(items, opts, k)):
        plan = WorkerPlan(
            w, opts, str(ctx.out_dir), ctx.t_origin, ctx.sample_rate, ref_uri, share, ctx.api
        )
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
                if (span := _on_wire_span(payload)) is not None:
                    spans.append(span)
                tally.add(payload["ok"])
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

    try:
        with sigterm_cancels_this_task():  # SIGTERM stops the run like Ctrl-C
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
    if errors:
        raise BenchError("; ".join(errors))
    return max_overlap(spans)
