"""When a finished exchange leaves the receive loop for the record writer: at the loop's
first quiet moment, never later than a bound.

Handing an exchange to the writer process costs the receive loop's process a queue put, a
pickle and a pipe write (its feeder thread), and the writer a record's build on the other
core. Exchanges end in bursts (a wave of streams started together ends together, and the
closed loop's replacement requests go out at that moment), so done at each exchange's end
that work lands exactly where the next chunks of every other stream are being stamped. At
256 streams that put the client's p99 timeline error at 1.3-1.5x the bare aiohttp loop's,
against 1.0x with every exchange held to the run's end (benchmarks/README.md, client
fidelity). Holding them all to the end would lose a whole point's records to a SIGKILL, so
they are held only while the loop is busy: handed off once no piece has been read for
`QUIET_S`, and at most `HOLD_AT_MOST_S` after the oldest of them ended.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

__all__ = ["QUIET_S", "HOLD_AT_MOST_S", "SLICE", "QuietHandoff", "note_read", "last_read"]

# No piece read for this long: the loop is between bursts (a real-time stream's chunks come
# tens of ms apart; one burst's pieces, well under a ms apart).
QUIET_S = 0.005
# Never held longer than this after the oldest held exchange ended: a loop never quiet (many
# streams out of step, short requests back to back) still hands its records off, a failed
# write still stops the point within about this long, and a SIGKILL of the bench process
# loses at most this much of the records. Not shorter: at 1,024 streams the closed loop's
# replacement requests keep the loop busy for a few tenths of a second, and a bound of 0.1 s
# handed records off in the middle of it (client p99 1.47x the bare loop's against 0.72x).
HOLD_AT_MOST_S = 0.5
# Handed off this many at a time, the loop's ready reads served between two (a thousand
# streams ending together would otherwise keep the loop on queue puts for milliseconds).
SLICE = 32

_last_read = 0.0


def note_read(t: float) -> None:
    """The receive loops call this with each piece's stamp (a global store, ~30 ns)."""
    global _last_read
    _last_read = t


def last_read() -> float:
    """`perf_counter` time of the last piece any receive loop of this process read."""
    return _last_read


class QuietHandoff:
    """Takes items on the event loop's thread and passes them to `send` in the order taken:
    at the loop's first moment without a read for `quiet_s`, at most `hold_at_most_s` after
    the oldest came, `slice_size` at a time (the loop serves its ready reads between two, and
    a read then waits the rest for the next quiet moment); at once where no event loop runs;
    everything held on `flush`."""

    def __init__(
        self,
        send: Callable[[Any], None],
        quiet_s: float = QUIET_S,
        hold_at_most_s: float = HOLD_AT_MOST_S,
        reads: Callable[[], float] = last_read,
        slice_size: int = SLICE,
    ) -> None:
        self._send = send
        self._slice = slice_size
        self._quiet_s = quiet_s
        self._hold_at_most_s = hold_at_most_s
        self._reads = reads
        self._held: list[Any] = []
        self._oldest = 0.0  # perf_counter time the oldest held item came (as reads())
        self._timer: asyncio.TimerHandle | None = None

    @property
    def held(self) -> int:
        return len(self._held)

    def put(self, item: Any) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a thread, a test): nothing to keep quiet for
            self.flush()
            self._send(item)
            return
        self._held.append(item)
        if self._timer is None:
            self._oldest = time.perf_counter()
            self._timer = loop.call_later(self._quiet_s, self._check, loop)

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        now = time.perf_counter()
        quiet_for = now - self._reads()
        held_for = now - self._oldest
        if quiet_for >= self._quiet_s or held_for >= self._hold_at_most_s:
            part, self._held = self._held[: self._slice], self._held[self._slice :]
            for item in part:
                self._send(item)
            # The rest after the loop's next turn; the oldest's bound still stands.
            self._timer = loop.call_later(0, self._check, loop) if self._held else None
            return
        wait = min(self._quiet_s - quiet_for, self._hold_at_most_s - held_for)
        self._timer = loop.call_later(wait, self._check, loop)

    def flush(self) -> None:
        """Pass on everything held, now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        held, self._held = self._held, []
        for item in held:
            self._send(item)
