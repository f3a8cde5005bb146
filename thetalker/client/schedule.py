"""When requests are sent: closed loop (N in flight) or open loop (seeded Poisson)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence

from thetalker.prompts import Prompt

__all__ = ["closed_loop", "open_loop", "arrival_offsets", "new_event_loop"]


async def closed_loop(
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


async def open_loop(
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


def arrival_offsets(n: int, request_rate: float, seed: int) -> list[float]:
    """The open loop's Poisson schedule, drawn exactly as `open_loop` draws it."""
    rng = random.Random(f"thetalker.arrivals:{seed}")
    offsets: list[float] = []
    offset = 0.0
    for _ in range(n):
        offsets.append(offset)
        offset += rng.expovariate(request_rate)
    return offsets


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when installed (a tighter timeline), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()
