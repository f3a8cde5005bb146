"""Agent-mode figures: text streamed in, audio streamed out over one WebSocket session."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from thetalker.metrics.intervals import (
    SEED,
    continuity_interval,
    percentile_intervals,
    rtfx_bootstrap,
)
from thetalker.metrics.point import percentiles, scored_records
from thetalker.metrics.stream import CONTINUITY_THRESHOLDS_S, bytes_per_second, playback_time_s

__all__ = [
    "unit_text_sent_s",
    "agent_figures",
    "agent_intervals",
    "summarize_agent",
]

# --- the agent mode: text streamed in, audio streamed out (one WebSocket session) ----------
#
# All times are seconds on one clock (a record's: from the session's start). The audio's
# sentences are the server's units, each opened by its `audio.start` event: the frames
# after it, up to the next one, are that sentence's audio.


def _visible_chars(text: str) -> int:
    return sum(1 for ch in text if not ch.isspace())


def unit_text_sent_s(
    text_times: Sequence[float], text_pieces: Sequence[str], unit_texts: Sequence[str]
) -> list[float | None]:
    """When the last word of each unit (sentence or clause, in order) was sent.

    Units are matched to the text sent by counting non-space characters: unit k ends at
    the piece in which the sent text reaches the characters of units 0..k (a server splits
    and strips, it does not rewrite). A unit that ends past the text sent gets the last
    piece's time; None when no text was sent.
    """
    if not text_times or len(text_times) != len(text_pieces):
        return [None] * len(unit_texts)
    cumulative = np.cumsum([_visible_chars(p) for p in text_pieces])
    out: list[float | None] = []
    needed = 0
    for unit in unit_texts:
        needed += _visible_chars(unit)
        i = int(np.searchsorted(cumulative, needed, side="left"))
        out.append(float(text_times[min(i, len(text_times) - 1)]))
    return out


def agent_figures(
    text_times: Sequence[float],
    text_pieces: Sequence[str],
    t_input_done: float | None,
    chunk_arrival_s: Sequence[float],
    chunk_bytes: Sequence[int],
    units: Sequence[tuple[int, str]],
    sample_rate: int,
    sample_width_bytes: int = 2,
    channels: int = 1,
) -> dict[str, Any]:
    """The agent mode's figures of one session.

    `units`: per server unit, (index of its first frame, its text). Returns
    `ttfa_first_text_s` (first frame minus the first text piece), `ttfa_input_done_s`
    (first frame minus `input.done`; negative when audio began before the text ended),
    `sentence_lag_s` (per unit: its first frame minus the time its last word was sent),
    `sentence_heard_lag_s` (per unit: when a pausing player starting at the first frame
    begins to play it, minus the same time) and `text_s` (first piece to `input.done`).
    Continuity and stalls are `request_metrics`' on the same frames.
    """
    first = float(chunk_arrival_s[0]) if len(chunk_arrival_s) else None
    t_text = float(text_times[0]) if len(text_times) else None
    sent = unit_text_sent_s(text_times, text_pieces, [text for _, text in units])
    bps = bytes_per_second(sample_rate, sample_width_bytes, channels)
    offsets = np.concatenate([[0], np.cumsum([int(b) for b in chunk_bytes])])
    lag: list[float | None] = []
    heard: list[float | None] = []
    for (frame, _), t_sent in zip(units, sent, strict=True):
        if t_sent is None or frame >= len(chunk_arrival_s) or bps <= 0:
            lag.append(None)
            heard.append(None)
            continue
        lag.append(float(chunk_arrival_s[frame]) - t_sent)
        played = playback_time_s(
            chunk_arrival_s,
            chunk_bytes,
            float(offsets[frame]) / bps,
            sample_rate,
            sample_width_bytes,
            channels,
        )
        heard.append(None if played is None else played - t_sent)
    done = float(t_input_done) if t_input_done is not None else None
    return {
        "ttfa_first_text_s": _minus(first, t_text),
        "ttfa_input_done_s": _minus(first, done),
        "sentence_lag_s": lag,
        "sentence_heard_lag_s": heard,
        "text_s": _minus(done, t_text),
    }


def _minus(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None


def _sentence_values(records: Iterable[Mapping[str, Any]], key: str) -> list[float]:
    return [float(v) for r in records for v in (r.get(key) or []) if v is not None]


def agent_intervals(
    records: Iterable[Mapping[str, Any]],
    thresholds_s: Sequence[float] = CONTINUITY_THRESHOLDS_S,
    seed: int = SEED,
) -> dict[str, Any]:
    """The agent mode's headline figures of one point with their intervals.

    Over the scored, successful sessions: first audio from the first text and from
    `input.done`, p50 and p90 (bootstrap over sessions); the lag of each sentence behind
    its last word, as received and as heard, p50 and p90 (bootstrap over the sentences of
    all sessions, pooled); continuity (Wilson, failed sessions count as not continuous) at
    the run's threshold and at each of `thresholds_s`; RTFx (bootstrap, window kept).
    """
    pooled = scored_records(records)
    ok = [r for r in pooled if r.get("ok")]
    out: dict[str, Any] = {
        "n_scored": len(pooled),
        "n_ok": len(ok),
        "rtfx": rtfx_bootstrap(pooled, seed=seed),
        "continuity_pct": continuity_interval(pooled),
        "continuity_pct_at": {t: continuity_interval(pooled, t) for t in thresholds_s},
        "stalls_per_session": (
            sum(int(r.get("stalls") or 0) for r in ok) / len(ok) if ok else None
        ),
    }
    series = {
        "ttfa_first_text_s": [r.get("ttfa_first_text_s") for r in ok],
        "ttfa_input_done_s": [r.get("ttfa_input_done_s") for r in ok],
        "sentence_lag_s": _sentence_values(ok, "sentence_lag_s"),
        "sentence_heard_lag_s": _sentence_values(ok, "sentence_heard_lag_s"),
    }
    # One draw of resamples for the series of one size (the same Intervals: shared_bootstrap).
    found = percentile_intervals(series, (50, 90), seed=seed)
    for name in series:
        for q in (50, 90):
            out[f"{name}_p{q}"] = found[name][q]
    return out


def summarize_agent(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The agent mode's figures of a point for summary.json: percentiles (no intervals: the
    client computes none) over the scored, successful sessions, the lags over their sentences.
    """
    ok = [r for r in scored_records(records) if r.get("ok")]
    return {
        "ttfa_first_text_s": percentiles(r.get("ttfa_first_text_s") for r in ok),
        "ttfa_input_done_s": percentiles(r.get("ttfa_input_done_s") for r in ok),
        "sentence_lag_s": percentiles(_sentence_values(ok, "sentence_lag_s")),
        "sentence_heard_lag_s": percentiles(_sentence_values(ok, "sentence_heard_lag_s")),
        "text_s": percentiles(r.get("text_s") for r in ok),
    }
