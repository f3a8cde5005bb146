"""The agent mode's text: a prompt cut into the pieces an LLM would stream, and when each goes.

A piece is one word with the whitespace before it (`"Hello"`, `" world,"`), as an LLM's
token stream carries it. The pace is in words per second; an LLM's rate in tokens per second
converts at `WORDS_PER_TOKEN` (an English word is about 1.33 tokens of a BPE vocabulary, so
a token is about 0.75 words: 40 tokens/s is 30 words/s). A pace of 0 sends the whole text
as one piece (the whole-text request, over the WebSocket).

Jitter stretches or shrinks each gap by a factor drawn uniformly from `1 ± jitter`, seeded
by the run's seed and the request's index, so a rerun sends on the same times. A trace
(`load_trace`) replaces the pace: the offsets at which a recorded LLM stream gave its pieces,
applied to each prompt's words in order (past the trace's end the trace's mean gap goes on).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "WORDS_PER_TOKEN",
    "TEXT_PACE_UNITS",
    "TraceError",
    "words_per_s",
    "text_pieces",
    "load_trace",
    "piece_offsets",
]

WORDS_PER_TOKEN = 0.75
TEXT_PACE_UNITS = ("words", "tokens")

_PIECE = re.compile(r"\s*\S+")


class TraceError(ValueError):
    """A text trace that cannot be used; the message names the file and line."""


def words_per_s(rate: float, unit: str) -> float:
    """The pace in words per second from a rate in `unit` ("words" or "tokens") per second."""
    if unit not in TEXT_PACE_UNITS:
        raise ValueError(f"text_pace_unit: {unit!r} is not one of {', '.join(TEXT_PACE_UNITS)}")
    return rate * WORDS_PER_TOKEN if unit == "tokens" else rate


def text_pieces(text: str, whole: bool = False) -> list[str]:
    """The pieces of `text`: each word with the whitespace before it (`whole`: one piece)."""
    text = text.strip()
    if whole or not text:
        return [text] if text else []
    return _PIECE.findall(text)


def load_trace(path: str | Path) -> tuple[float, ...]:
    """Piece offsets (seconds from the first piece) of a recorded stream.

    One offset a line, either a bare number or a JSON object with `t_s` (other keys, such
    as the piece's `text`, are ignored); or one JSON list of numbers. Offsets start at 0 or
    later and never go back.
    """
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the text trace ({exc.strerror})") from None
    stripped = raw.strip()
    values: list[tuple[int, float]] = []
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
        for i, v in enumerate(data):
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise TraceError(f"{path}: item {i} of the list is not a number: {v!r}")
            values.append((1, float(v)))
    else:
        for lineno, line in enumerate(raw.splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            values.append((lineno, _trace_line(path, lineno, line)))
    if not values:
        raise TraceError(f"{path}: the text trace has no offsets")
    last = 0.0
    for lineno, v in values:
        if v < last:
            raise TraceError(f"{path}:{lineno}: offset {v:g} s goes back (before {last:g} s)")
        last = v
    return tuple(v for _, v in values)


def _trace_line(path: Path, lineno: int, line: str) -> float:
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        raise TraceError(f"{path}:{lineno}: neither a number nor a JSON object: {line!r}") from None
    if isinstance(value, dict):
        value = value.get("t_s")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TraceError(f"{path}:{lineno}: no offset (a number, or an object with t_s)")
    return float(value)


def piece_offsets(
    n: int,
    words_per_s: float,
    jitter: float = 0.0,
    seed: int | str = 0,
    request_index: int = 0,
    trace: Sequence[float] | None = None,
) -> list[float]:
    """When each of `n` pieces is sent, seconds after the first (which goes at 0)."""
    if n <= 0:
        return []
    if trace:
        t0 = trace[0]
        base = [t - t0 for t in trace[:n]]
        span = base[-1]
        mean_gap = span / (len(base) - 1) if len(base) > 1 else 0.0
        while len(base) < n:
            base.append(base[-1] + mean_gap)
        return base
    if words_per_s <= 0:
        return [0.0] * n
    gap = 1.0 / words_per_s
    rng = random.Random(f"thetalker.text_pace:{seed}:{request_index}")
    offsets = [0.0]
    for _ in range(n - 1):
        factor = 1.0 + rng.uniform(-jitter, jitter) if jitter > 0 else 1.0
        offsets.append(offsets[-1] + gap * factor)
    return offsets
