"""The closed loop's order of work when a wave of streams ends together (issue 22 item 6):
every stream already able to go on (its read waiting) goes before any replacement request is
sent. asyncio runs ready tasks first in, first out, so the order is fixed, not a race."""

from __future__ import annotations

import asyncio

from thetalker.client.schedule import closed_loop
from thetalker.data.prompts import Prompt


def test_a_wave_that_ends_together_is_stamped_before_the_replacements_go():
    log: list[tuple[str, int]] = []

    async def main() -> None:
        last_chunk = asyncio.Event()  # the first wave's last chunks, all waiting at once

        async def send(item: tuple[int, Prompt, bool], _scheduled: float | None) -> None:
            index = item[0]
            log.append(("send", index))
            if index < 3:
                await last_chunk.wait()
                log.append(("stamp", index))

        async def release() -> None:
            while len(log) < 3:
                await asyncio.sleep(0)
            last_chunk.set()

        items = [(i, Prompt(f"p{i}", f"t{i}"), False) for i in range(6)]
        await asyncio.gather(closed_loop(items, 3, send), release())

    asyncio.run(main())
    assert log[:3] == [("send", 0), ("send", 1), ("send", 2)]
    # all three stamps before the first replacement, not stamp 0, send 3, stamp 1, ...
    assert log[3:6] == [("stamp", 0), ("stamp", 1), ("stamp", 2)]
    assert sorted(log[6:]) == [("send", 3), ("send", 4), ("send", 5)]
