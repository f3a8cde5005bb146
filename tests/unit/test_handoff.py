"""QuietHandoff: finished exchanges leave the receive loop at its first quiet moment, never
later than the bound after the oldest, in the order they came; at once without a loop.

Every assertion is an order or a causal floor (a hand-off is never before the moment its
rule allows), never a duration."""

from __future__ import annotations

import asyncio
import time

import pytest

from thetalker.client.handoff import QuietHandoff, last_read, note_read

QUIET_S = 0.02
HOLD_S = 0.2
DEADLINE_S = 30.0  # generous: the test waits for a condition, it does not time one


class Reads:
    """A receive loop's reads as the hand-off sees them: `busy` keeps the last read at now."""

    def __init__(self) -> None:
        self.busy = False
        self.at = 0.0

    def __call__(self) -> float:
        return time.perf_counter() if self.busy else self.at


class Sent(list):
    """What the hand-off passed on, with the clock time of each, and an event per item."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []
        self.event = asyncio.Event()

    def __call__(self, item: object) -> None:
        self.append(item)
        self.times.append(time.perf_counter())
        self.event.set()

    async def until(self, count: int) -> None:
        async with asyncio.timeout(DEADLINE_S):
            while len(self) < count:
                self.event.clear()
                await self.event.wait()


def test_without_an_event_loop_items_are_passed_on_at_once_in_order():
    sent = Sent()
    handoff = QuietHandoff(sent)
    handoff.put(1)
    handoff.put(2)
    assert list(sent) == [1, 2] and handoff.held == 0


async def test_held_while_the_loop_reads_and_passed_on_once_it_is_quiet():
    reads, sent = Reads(), Sent()
    reads.busy = True
    handoff = QuietHandoff(sent, quiet_s=QUIET_S, hold_at_most_s=DEADLINE_S * 10, reads=reads)
    for item in range(3):
        handoff.put(item)
    await asyncio.sleep(QUIET_S * 3)  # several checks, each finding a read just now
    assert list(sent) == [] and handoff.held == 3
    quiet_from = time.perf_counter()
    reads.busy, reads.at = False, quiet_from
    await sent.until(3)
    assert list(sent) == [0, 1, 2]  # the order they came
    assert min(sent.times) >= quiet_from + QUIET_S  # not before the loop was quiet that long
    assert handoff.held == 0


async def test_a_loop_never_quiet_still_passes_items_on_at_the_bound():
    reads, sent = Reads(), Sent()
    reads.busy = True  # never quiet
    handoff = QuietHandoff(sent, quiet_s=QUIET_S, hold_at_most_s=HOLD_S, reads=reads)
    first_put = time.perf_counter()
    handoff.put("a")
    handoff.put("b")
    await sent.until(2)
    assert list(sent) == ["a", "b"]
    assert min(sent.times) >= first_put + HOLD_S  # held to the bound, not beyond need
    second_put = time.perf_counter()
    handoff.put("c")  # the oldest held now: a bound of its own
    await sent.until(3)
    assert sent[2] == "c" and sent.times[2] >= second_put + HOLD_S


async def test_flush_passes_everything_on_now_and_nothing_twice():
    reads, sent = Reads(), Sent()
    reads.busy = True
    handoff = QuietHandoff(sent, quiet_s=QUIET_S, hold_at_most_s=HOLD_S, reads=reads)
    handoff.put(1)
    handoff.put(2)
    handoff.flush()
    assert list(sent) == [1, 2] and handoff.held == 0
    await asyncio.sleep(HOLD_S * 2)  # the cancelled check must not send again
    assert list(sent) == [1, 2]


async def test_items_put_after_a_hand_off_wait_for_their_own_quiet_moment():
    reads, sent = Reads(), Sent()
    handoff = QuietHandoff(sent, quiet_s=QUIET_S, hold_at_most_s=DEADLINE_S * 10, reads=reads)
    handoff.put(1)
    await sent.until(1)  # quiet from the start: passed on at the first check
    reads.busy = True
    handoff.put(2)
    await asyncio.sleep(QUIET_S * 3)
    assert list(sent) == [1] and handoff.held == 1
    reads.busy, reads.at = False, time.perf_counter()
    await sent.until(2)
    assert list(sent) == [1, 2]


@pytest.mark.parametrize("stamp", [12.5, 99.0])
def test_note_read_is_what_last_read_answers(stamp: float):
    before = last_read()
    try:
        note_read(stamp)
        assert last_read() == stamp
    finally:
        note_read(before)


async def test_a_read_between_two_slices_holds_the_rest_for_the_next_quiet_moment():
    reads = Reads()
    sent = Sent()

    def send(item: object) -> None:
        sent(item)
        if len(sent) == 1:
            reads.busy = True  # a read comes in while the first slice is handed off

    handoff = QuietHandoff(
        send, quiet_s=QUIET_S, hold_at_most_s=DEADLINE_S * 10, reads=reads, slice_size=2
    )
    for item in range(5):
        handoff.put(item)
    await sent.until(2)
    await asyncio.sleep(QUIET_S * 3)  # several checks, each finding the loop reading
    assert list(sent) == [0, 1] and handoff.held == 3  # one slice, then held again
    reads.busy, reads.at = False, time.perf_counter()
    await sent.until(5)  # quiet again: the rest, a slice at a time, in order
    assert list(sent) == [0, 1, 2, 3, 4]
