"""What a second of speech costs the machine (issue 50): energy from sampled GPU power, and
CPU-seconds of the server's process tree. Pure, no I/O; the samples come from
thetalker.pipeline.sampler.

- `trapezoid_j`: joules under a sampled power curve (watts at monotonic seconds), by the
  trapezoid rule; the sampler samples at the scored window's two ends, so the integral is the
  window's.
- `energy_above_idle_j`: that energy less the idle draw (measured before the first point with
  the server loaded and nothing sent) over the same seconds: the energy the load cost. The
  idle draw is reported apart, never hidden in the figure.
- `per_audio_s`: any amount (joules, CPU-seconds) per second of audio delivered.
- `wh_per_million_chars`: joules as watt-hours per million characters (the characters the
  price counts: those of requests delivered continuously).

Definitions with hand-checkable numbers: tutorials/03-streaming-metrics.md.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "trapezoid_j",
    "energy_above_idle_j",
    "per_audio_s",
    "wh_per_million_chars",
]


def trapezoid_j(times_s: Sequence[float], watts: Sequence[float]) -> float | None:
    """Joules under (times_s, watts) by the trapezoid rule; None with fewer than 2 samples,
    lists of different length or times going back."""
    if len(times_s) != len(watts) or len(times_s) < 2:
        return None
    if any(b < a for a, b in zip(times_s, times_s[1:], strict=False)):
        return None
    return sum(
        (t1 - t0) * (w0 + w1) / 2.0
        for t0, t1, w0, w1 in zip(times_s, times_s[1:], watts, watts[1:], strict=False)
    )


def energy_above_idle_j(
    energy_j: float | None, idle_w: float | None, seconds: float | None
) -> float | None:
    """`energy_j - idle_w * seconds`; None without any of them."""
    if energy_j is None or idle_w is None or seconds is None:
        return None
    return energy_j - idle_w * seconds


def per_audio_s(amount: float | None, audio_s: float | None) -> float | None:
    """`amount / audio_s`; None without either or without audio."""
    if amount is None or not audio_s or audio_s <= 0:
        return None
    return amount / audio_s


def wh_per_million_chars(energy_j: float | None, chars: float | None) -> float | None:
    """`energy_j / 3600 / chars * 1e6`; None without either or without characters."""
    if energy_j is None or not chars or chars <= 0:
        return None
    return energy_j / 3600.0 / chars * 1e6
