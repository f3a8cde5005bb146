"""No cyclic garbage collection while the scored requests run.

A full collection walks every tracked object while holding the GIL: with 1,024 streams in
flight (their exchanges, aiohttp's objects per connection) one pause took tens of ms, and every
chunk arriving meanwhile was stamped that late; the bare aiohttp loop, with few objects alive,
did not show it (benchmarks/README.md, client fidelity). A run makes almost no cyclic garbage
(~0.1 unreachable objects per request, counted with the collector off for 3,000 requests),
and reference counting frees the rest, so the collector can wait until the requests are done.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["no_gc_pauses"]


@contextmanager
def no_gc_pauses() -> Iterator[None]:
    """Collect once, set what lives now aside (`gc.freeze`), and keep the automatic
    collector off inside; afterwards restore it as it was and collect what the run left."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if was_enabled:
            gc.enable()
            gc.collect()
