"""Continuity under named player models: one stream timeline, several legitimate verdicts.

Each model is a player a reader may have in mind; a table or figure names the one its
number uses (`PLAYER_MODELS`), and two runs are compared under the same one.

- `max_deficit_{T}s` (vllm-omni's `compute_continuity_stats`): a player that starts at the
  first chunk with no prebuffer and never pauses falls at most T behind (a record's
  `max_underrun_s <= T`, inclusive). T = 0.1 s is upstream's default and the headline
  `continuity_pct`; the others are `continuity_pct_{T}s`.
- `stall_gate` (the public report's per-request gate, `tts_bench` `AudioSuccessCriteria`):
  a zero-buffer player that pauses when it runs dry and resumes when data arrives stalls
  at most `GATE_LARGEST_STALL_S` (500 ms) at once and `GATE_TOTAL_STALL_S` (1000 ms) in all.
- `no_stall` (the public report's `continuous`): that pausing player never stalls.
- The start buffer a player needs: the least audio time a player must wait after the first
  byte so it never stalls; it equals vllm-omni's max deficit (`max_underrun_s`), for the
  pausing and the non-pausing player alike. Per point: the buffer that makes P% of the
  scored streams gapless (`start_buffer_for_pct`), P = 90, 95, 99.

A failed request (or one without audio) passes no model and needs an infinite buffer: a
player could not play it. Every verdict is computed from the record's timeline
(`chunk_arrival_s`, `chunk_bytes`, `sample_rate`) and its `max_underrun_s`, so old records
get them too. Pure, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from thetalker.metrics.stream import (
    CONTINUITY_THRESHOLD_S,
    bytes_per_second,
    valid_timeline,
)

__all__ = [
    "GATE_LARGEST_STALL_S",
    "GATE_TOTAL_STALL_S",
    "START_BUFFER_PCTS",
    "PlayerModel",
    "PLAYER_MODELS",
    "player_model",
    "pausing_stalls_s",
    "pausing_stall_points",
    "passes_stall_gate",
    "has_no_stall",
    "start_buffer_s",
    "start_buffer_for_pct",
    "summarize_players",
    "STALLS_KEY",
]

GATE_LARGEST_STALL_S = 0.5
GATE_TOTAL_STALL_S = 1.0
START_BUFFER_PCTS = (90, 95, 99)
_STALL_EPSILON_S = 1e-9  # below a nanosecond a gap is float noise (as stream.compute_stalls)


@dataclass(frozen=True)
class PlayerModel:
    """A named player: `column` is its share of continuous streams in a summary / points.csv
    (percent of the scored requests), `describe` the words a table says it in."""

    name: str
    column: str
    describe: str


def _max_deficit(threshold_s: float) -> PlayerModel:
    column = "continuity_pct" if threshold_s == CONTINUITY_THRESHOLD_S else None
    return PlayerModel(
        f"max_deficit_{threshold_s:g}s",
        column or f"continuity_pct_{threshold_s:g}s",
        f"vllm-omni max deficit <= {threshold_s * 1000:g} ms (never-pausing player)",
    )


PLAYER_MODELS: dict[str, PlayerModel] = {
    m.name: m
    for m in (
        _max_deficit(CONTINUITY_THRESHOLD_S),
        PlayerModel(
            "stall_gate",
            "stall_gate_pct",
            f"stall gate: largest stall <= {GATE_LARGEST_STALL_S * 1000:g} ms and total <= "
            f"{GATE_TOTAL_STALL_S * 1000:g} ms (pausing zero-buffer player, tts_bench)",
        ),
        PlayerModel("no_stall", "no_stall_pct", "no stall at all (pausing zero-buffer player)"),
    )
}


def player_model(name: str) -> PlayerModel:
    """A model by name: one of PLAYER_MODELS, or `max_deficit_{T}s` for any T > 0."""
    if name in PLAYER_MODELS:
        return PLAYER_MODELS[name]
    if name.startswith("max_deficit_") and name.endswith("s"):
        try:
            threshold = float(name[len("max_deficit_") : -1])
        except ValueError:
            threshold = math.nan
        if math.isfinite(threshold) and threshold > 0:
            return _max_deficit(threshold)
    known = ", ".join([*PLAYER_MODELS, "max_deficit_<T>s"])
    raise ValueError(f"player model {name!r}: not one of {known}")


def _playable(record: Mapping[str, Any]) -> bool:
    return bool(record.get("ok")) and record.get("ttfa_s") is not None


# Where a record slimmed for a point's figures (`thetalker.metrics.point_fields`) keeps its
# pausing player's stalls, computed from the timeline it no longer carries.
STALLS_KEY = "_pausing_stalls_s"


def pausing_stalls_s(record: Mapping[str, Any]) -> list[float]:
    """Each stall of the pausing zero-buffer player over the record's timeline (seconds)."""
    if STALLS_KEY in record:
        return record[STALLS_KEY]
    arrivals = record.get("chunk_arrival_s") or []
    sizes = record.get("chunk_bytes") or []
    bps = bytes_per_second(int(record.get("sample_rate") or 0))
    if not valid_timeline(arrivals, sizes, bps):
        return []
    return _stalls(arrivals, sizes, bps)


def _stalls(arrivals: Sequence[float], sizes: Sequence[int], bps: float) -> list[float]:
    """`chunk_play_starts`' gaps above a nanosecond, by the same additions in the same
    order (each chunk ends where it starts plus its bytes / bps; it starts at its arrival
    when that is after the last end), so the same floats to the last bit. A plain loop: a
    stream has tens of chunks, where numpy's per-call cost is most of the work, and every
    record of a point passes here when it is read (`point_fields`)."""
    pairs = zip(arrivals, sizes, strict=True)
    arrival, size = next(pairs)
    end = float(arrival) + int(size) / bps
    stalls: list[float] = []
    for arrival, size in pairs:
        t = float(arrival)
        if t > end:  # the player ran dry: it waits, then starts this chunk on arrival
            if t - end > _STALL_EPSILON_S:
                stalls.append(t - end)
            end = t + int(size) / bps
        else:
            end = end + int(size) / bps
    return stalls


def pausing_stall_points(record: Mapping[str, Any]) -> list[tuple[int, float]]:
    """Where each stall of `pausing_stalls_s` falls: (bytes of the stream's audio played
    before the player ran dry, seconds it waited), by the same additions as `_stalls`.
    Empty for a record without its timeline (a slimmed one) or one that never stalled."""
    arrivals = record.get("chunk_arrival_s") or []
    sizes = record.get("chunk_bytes") or []
    bps = bytes_per_second(int(record.get("sample_rate") or 0))
    if not valid_timeline(arrivals, sizes, bps):
        return []
    end, played, points = float(arrivals[0]) + int(sizes[0]) / bps, int(sizes[0]), []
    for arrival, size in zip(arrivals[1:], sizes[1:], strict=True):
        t = float(arrival)
        if t > end:
            if t - end > _STALL_EPSILON_S:
                points.append((played, t - end))
            end = t + int(size) / bps
        else:
            end = end + int(size) / bps
        played += int(size)
    return points


def passes_stall_gate(
    record: Mapping[str, Any],
    largest_s: float = GATE_LARGEST_STALL_S,
    total_s: float = GATE_TOTAL_STALL_S,
) -> bool:
    """The public report's gate: largest stall <= `largest_s` and total <= `total_s`."""
    if not _playable(record):
        return False
    return _within_gate(pausing_stalls_s(record), largest_s, total_s)


def _within_gate(stalls: Sequence[float], largest_s: float, total_s: float) -> bool:
    return max(stalls, default=0.0) <= largest_s and sum(stalls) <= total_s


def has_no_stall(record: Mapping[str, Any]) -> bool:
    return _playable(record) and not pausing_stalls_s(record)


def start_buffer_s(record: Mapping[str, Any]) -> float:
    """The start buffer that makes this stream gapless (its `max_underrun_s`); inf for a
    request a player could not play."""
    if not _playable(record):
        return math.inf
    return float(record.get("max_underrun_s") or 0.0)


def start_buffer_for_pct(buffers: Sequence[float], pct: float) -> float | None:
    """The least start buffer with which at least `pct`% of the streams play gapless: the
    nearest-rank percentile (element ceil(pct * n / 100) - 1 of the sorted buffers). inf
    when more than 100 - pct % of them cannot be played at all; None without streams."""
    if not buffers:
        return None
    ordered = sorted(buffers)
    rank = max(0, math.ceil(pct * len(ordered) / 100.0) - 1)
    return float(ordered[rank])


def summarize_players(scored: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The point's figures under each player model, over its scored requests."""
    n = len(scored)

    def pct(k: int) -> float | None:
        return 100.0 * k / n if n else None

    # Each playable stream's stalls, once (None: a player could not play it).
    stalls = [pausing_stalls_s(r) if _playable(r) else None for r in scored]
    played = [s for s in stalls if s is not None]
    largest = [max(s, default=0.0) for s in played]
    gate = sum(_within_gate(s, GATE_LARGEST_STALL_S, GATE_TOTAL_STALL_S) for s in played)
    buffers = [start_buffer_s(r) for r in scored]
    return {
        "stall_gate_pct": pct(gate),
        "no_stall_pct": pct(sum(not s for s in played)),
        "largest_stall_s_max": max(largest) if largest else None,
        "start_buffer_s": {
            f"p{p}": _finite_or_none(start_buffer_for_pct(buffers, p)) for p in START_BUFFER_PCTS
        }
        | {"n": n},
    }


def _finite_or_none(value: float | None) -> float | None:
    """inf (more unplayable streams than the share allows) is written as None: JSON has
    no infinity, and a table prints it n/a."""
    return value if value is not None and np.isfinite(value) else None
