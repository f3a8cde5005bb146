"""When requests are sent: closed loop (N in flight) or open loop (seeded Poisson arrivals).

One implementation for the in-process run and the worker processes alike: the open loop's
schedule is drawn once (`arrival_offsets`) and `dispatch` sends on it from a start time on
the system-wide `perf_counter` clock, so workers given slices of one schedule send as one
process would.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence

from thetalker.data.prompts import Prompt

__all__ = ["Item", "Send", "Drop", "closed_loop", "open_loop", "arrival_offsets", "dispatch"]

Item = tuple[int, Prompt, bool]  # (request_index, prompt, warmup)
Send = Callable[[Item, float | None], Awaitable[None]]  # (item, scheduled perf_counter time)
Drop = Callable[[Item, float], None]  # an arrival dropped at the cap (item, its due time)


async def closed_loop(items: Sequence[Item], concurrency: int, send: Send) -> None:
    """`concurrency` requests in flight; the next is sent as one finishes.

    Between two requests a worker yields to the loop once, so reads already waiting (the
    other streams' chunks, stamped when their task runs) are stamped before the next
    request's send path runs: a wave of streams ending together otherwise stamped its
    last chunks behind every replacement request (issue 22 item 6). A bare aiohttp loop
    behaves alike: its next request waits on the pool and is woken behind those reads."""
    it = iter(items)

    async def worker() -> None:
        for item in it:  # shared iterator: each worker takes the next item when free
            await send(item, None)
            await asyncio.sleep(0)

    async with asyncio.TaskGroup() as group:
        for _ in range(min(concurrency, len(items))):
            group.create_task(worker())


def arrival_offsets(n: int, request_rate: float, seed: int) -> list[float]:
    """The open loop's Poisson schedule, seconds from its start: the first at once, then
    exponential gaps drawn from the seed (the only place they are drawn)."""
    rng = random.Random(f"thetalker.arrivals:{seed}")
    offsets: list[float] = []
    offset = 0.0
    for _ in range(n):
        offsets.append(offset)
        offset += rng.expovariate(request_rate)
    return offsets


async def _sleep_until(due: float) -> None:
    # A loop's timer may wake a little early; never go before the time.
    while (wait := due - time.perf_counter()) > 0:
        await asyncio.sleep(wait)


async def open_loop(
    items: Sequence[Item],
    offsets: Sequence[float],
    start: float,
    send: Send,
    max_in_flight: int | None = None,
    drop: Drop | None = None,
) -> None:
    """Send item i at `start + offsets[i]` whether or not earlier ones finished; with
    `max_in_flight`, an arrival that finds that many in flight is handed to `drop` instead
    (never sent, as the public report's open loop)."""
    in_flight: set[asyncio.Task[None]] = set()
    async with asyncio.TaskGroup() as group:
        for item, offset in zip(items, offsets, strict=True):
            due = start + offset
            await _sleep_until(due)
            if max_in_flight is not None and drop is not None and len(in_flight) >= max_in_flight:
                drop(item, due)
                continue
            task = group.create_task(send(item, due))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)


async def dispatch(
    items: Sequence[Item],
    send: Send,
    concurrency: int,
    offsets: Sequence[float] | None,
    start: float,
    max_in_flight: int | None = None,
    drop: Drop | None = None,
) -> None:
    """The scored requests from `start` on: open loop when `offsets` are given (capped at
    `max_in_flight`, arrivals over it to `drop`), else closed."""
    if offsets is not None:
        await open_loop(items, offsets, start, send, max_in_flight, drop)
    else:
        await _sleep_until(start)
        await closed_loop(items, concurrency, send)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when installed (a tighter timeline), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()
