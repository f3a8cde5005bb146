"""Progress during a load point, and the point's end line, each figure with its unit.

The run counts its scored requests in a `Tally`; every `interval_s` (the reporter's
attribute, else `DEFAULT_INTERVAL_S`) and once when the point's records are written, it
hands a `Progress` snapshot to the caller's reporter. The lines during the point count the
failures the receive path has seen; some only the record finds (a half sample at the end,
an event the client cannot read), so the last line counts the failed records, by the
point's own definition (`n_failed`: thetalker.metrics.point), and agrees with its result. Reporters
here: `LineReporter` (one log line per report, for a log or a pipe) and `TtyReporter` (a
single-line bar rewritten with `\\r`, for a terminal):

    c8: 120/300 done, 2 errors, 41 s elapsed, ~62 s left
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import IO, Any

from thetalker.data import layout
from thetalker.metrics.point import is_dropped

__all__ = [
    "DEFAULT_INTERVAL_S",
    "Progress",
    "ProgressReporter",
    "Tally",
    "LineReporter",
    "TtyReporter",
    "point_label",
    "format_progress",
    "format_point_end",
    "report_every",
]

DEFAULT_INTERVAL_S = 5.0


@dataclass(frozen=True)
class Progress:
    """Where the scored requests of one point stand."""

    label: str  # the point: "c8" (closed loop) or "20 req/s" (open loop)
    done: int
    total: int
    errors: int
    elapsed_s: float  # since the first scored request was sent
    left_s: float | None  # estimated from the pace so far; None before the first is done


ProgressReporter = Callable[[Progress], None]


def point_label(concurrency: int, request_rate: float | None) -> str:
    if request_rate is not None:
        return f"{request_rate:g} req/s"
    return layout.concurrency_label(concurrency)


@dataclass
class Tally:
    """Counts of a point's scored requests, kept by the run as they finish."""

    label: str
    total: int
    done: int = 0
    errors: int = 0
    t_start: float | None = None  # monotonic, set when the scored requests start

    def add(self, ok: bool) -> None:
        self.done += 1
        self.errors += not ok

    def settle(self, records: Iterable[Mapping[str, Any]]) -> None:
        """The counts from the point's records: done, every scored request recorded (a
        dropped arrival too, as it counts toward the total); errors, those that failed, a
        dropped arrival aside (the point's `n_failed`)."""
        measured = [r for r in records if not r.get("warmup")]
        self.done = len(measured)
        self.errors = sum(1 for r in measured if not r.get("ok") and not is_dropped(r))

    def snapshot(self, now: float | None = None) -> Progress:
        now = time.monotonic() if now is None else now
        elapsed = 0.0 if self.t_start is None else max(0.0, now - self.t_start)
        left = None
        if self.done:
            left = elapsed / self.done * (self.total - self.done)
        return Progress(self.label, self.done, self.total, self.errors, elapsed, left)


def _seconds(value: float) -> str:
    return f"{value:.0f} s"


def format_progress(p: Progress) -> str:
    """`c8: 120/300 done, 2 errors, 41 s elapsed, ~62 s left`."""
    errors = "1 error" if p.errors == 1 else f"{p.errors} errors"
    left = "time left unknown" if p.left_s is None else f"~{_seconds(p.left_s)} left"
    return f"{p.label}: {p.done}/{p.total} done, {errors}, {_seconds(p.elapsed_s)} elapsed, {left}"


def format_point_end(summary: dict[str, Any], label: str | None = None) -> str:
    """The end-of-point line, every figure with its unit: `c8: 300/300 ok, error rate
    0.0 %, RTFx 20.2, TTFA p50 0.182 s, continuity 100.0 %`."""
    label = label or point_label(summary.get("concurrency") or 0, summary.get("request_rate"))
    parts = [f"{label}: {summary.get('n_ok', 0)}/{summary.get('n_scored', 0)} ok"]
    if summary.get("error_rate") is not None:
        parts.append(f"error rate {100 * summary['error_rate']:.1f} %")
    if summary.get("rtfx") is not None:
        parts.append(f"RTFx {summary['rtfx']:.1f}")
    ttfa = (summary.get("ttfa_s") or {}).get("p50")
    if ttfa is not None:
        parts.append(f"TTFA p50 {ttfa:.3f} s")
    if summary.get("continuity_pct") is not None:
        parts.append(f"continuity {summary['continuity_pct']:.1f} %")
    return ", ".join(parts)


class LineReporter:
    """One line per report through `emit` (a logger's `info`, or `print`), every
    `interval_s` seconds."""

    def __init__(self, emit: Callable[[str], Any], interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self._emit = emit
        self.interval_s = interval_s

    def __call__(self, p: Progress) -> None:
        self._emit(format_progress(p))


class TtyReporter:
    """A single-line progress bar on a terminal, rewritten in place with `\\r`; the line
    ends when the point's last request is done."""

    def __init__(
        self,
        stream: IO[str],
        prefix: str = "",
        width: int = 24,
        interval_s: float = DEFAULT_INTERVAL_S,
    ) -> None:
        self._stream = stream
        self.interval_s = interval_s
        self._prefix = prefix
        self._width = width

    def __call__(self, p: Progress) -> None:
        filled = round(self._width * p.done / p.total) if p.total else self._width
        bar = "#" * filled + "." * (self._width - filled)
        self._stream.write(f"\r{self._prefix}[{bar}] {format_progress(p)} ")
        if p.done >= p.total:
            self._stream.write("\n")
        self._stream.flush()


async def report_every(tally: Tally, reporter: ProgressReporter, interval_s: float) -> None:
    """Report `tally` every `interval_s` until cancelled (the run reports the last itself)."""
    while True:
        await asyncio.sleep(interval_s)
        reporter(tally.snapshot())
