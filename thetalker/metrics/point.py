"""Per-request metrics and per-point summaries (RTFx, TTFA percentiles, continuity), and
cost. Pure, no I/O: the client, the workflow and the report mean the same by each figure."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from thetalker.metrics.onset import DEFAULT_ONSET, OnsetSettings, audible_onset_s
from thetalker.metrics.overload import is_rejection
from thetalker.metrics.players import STALLS_KEY, pausing_stalls_s, summarize_players
from thetalker.metrics.sessions import (
    DEFAULT_USABLE_AUDIO_S,
    TIME_TO_AUDIO_KEY,
    record_time_to_audio_s,
    sessions_in_flight,
    tail_spread,
)
from thetalker.metrics.stream import (
    CONTINUITY_THRESHOLD_S,
    PERCENTILES,
    bytes_per_second,
    compute_continuity_stats,
    compute_stalls,
    playable_timeline,
    playback_time_s,
    valid_timeline,
)

__all__ = [
    "request_metrics",
    "record_metrics",
    "first_byte_from_sent_s",
    "percentiles",
    "PointSummary",
    "summarize_point",
    "usd_per_million_chars",
    "point_cost",
    "scored_records",
    "audible_of",
    "is_dropped",
    "OLD_ONSET_RULE",
    "MIXED_ONSET_RULES",
    "record_onset",
    "point_onset",
    "MixedOnsetRulesError",
    "measurement_window_s",
    "POINT_FIELDS",
    "point_fields",
]


def scored_records(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if not r.get("warmup")]


def measurement_window_s(scored: Sequence[Mapping[str, Any]]) -> float:
    sends = [float(r["t_submit_s"]) for r in scored]
    finishes = [float(r["t_submit_s"]) + float(r.get("wall_s") or 0.0) for r in scored]
    return (max(finishes) - min(sends)) if scored else 0.0


def request_metrics(
    chunk_arrival_s: Sequence[float],
    chunk_bytes: Sequence[int],
    pcm: bytes | np.ndarray,
    sample_rate: int,
    threshold_s: float = CONTINUITY_THRESHOLD_S,
    sample_width_bytes: int = 2,
    channels: int = 1,
    read_arrival_s: Sequence[float] | None = None,
    read_bytes: Sequence[int] | None = None,
    onset: OnsetSettings = DEFAULT_ONSET,
) -> dict[str, Any]:
    """The per-request figures written beside the raw timeline of a record.

    Arrival times are seconds since the request was sent. With the reads
    (`read_arrival_s`, `read_bytes`: every read that carried audio), `ttfa_s` is the first
    read and the player (continuity, stalls, audible onset) plays whole frames as the reads
    bring them (`playable_timeline`); without them (records written before reads were kept,
    SSE events, WebSocket frames) the server chunks are the timeline, each arriving with
    its last read, as before. `audio_s` is the chunks' bytes either way. An empty timeline
    gives None for the times and 0 audio. The audible onset is `thetalker.metrics.onset`'s
    (`onset`: its settings, named in `audible_onset_rule`); no onset: `audible` false and
    the onset figures None, never 0.
    """
    bps = bytes_per_second(sample_rate, sample_width_bytes, channels)
    total = int(sum(int(b) for b in chunk_bytes))
    audio_s = total / bps if bps > 0 else 0.0
    has_audio = valid_timeline(chunk_arrival_s, chunk_bytes, bps) and total > 0
    arrivals, sizes = chunk_arrival_s, chunk_bytes
    first: float | None = float(chunk_arrival_s[0]) if has_audio else None
    if read_arrival_s is not None and read_bytes is not None and has_audio:
        arrivals, sizes = playable_timeline(
            read_arrival_s, read_bytes, sample_width_bytes * channels
        )
        first = float(read_arrival_s[0]) if len(read_arrival_s) else None
        has_audio = first is not None
    continuity = compute_continuity_stats(
        arrivals, sizes, sample_rate, sample_width_bytes, channels, threshold_s
    )
    stalls = compute_stalls(arrivals, sizes, sample_rate, sample_width_bytes, channels)
    silence_s = audible_onset_s(pcm, sample_rate, onset) if has_audio else None
    audible = (
        playback_time_s(arrivals, sizes, silence_s, sample_rate, sample_width_bytes, channels)
        if silence_s is not None
        else None
    )
    return {
        "ttfa_s": first,
        "leading_silence_s": silence_s,
        "ttfa_audible_s": audible,
        "ttfa_audible_naive_s": (
            (first + silence_s) if first is not None and silence_s is not None else None
        ),
        "audible": silence_s is not None,
        "audible_onset_rule": onset.label(),
        "audio_s": audio_s,
        "max_underrun_s": continuity.max_underrun_s,
        "underrun_events": continuity.underrun_event_count,
        "continuity_ok": bool(has_audio and continuity.is_continuous),
        "stalls": stalls.stalls,
        "stall_s": stalls.stall_s,
    }


def record_metrics(
    record: Mapping[str, Any],
    pcm: bytes | np.ndarray,
    threshold_s: float = CONTINUITY_THRESHOLD_S,
    onset: OnsetSettings | None = None,
) -> dict[str, Any]:
    """A record's figures recomputed from its own timeline and its audio: the reads when the
    record has them (`read_arrival_s`, `read_bytes`), else its server chunks (older records).
    The audible onset is found by the rule the record was measured with (`record_onset`:
    its `audible_onset_rule` read back), unless `onset` names another."""
    return request_metrics(
        record["chunk_arrival_s"],
        record["chunk_bytes"],
        pcm,
        int(record["sample_rate"]),
        threshold_s,
        read_arrival_s=record.get("read_arrival_s"),
        read_bytes=record.get("read_bytes"),
        onset=record_onset(record) if onset is None else onset,
    )


def record_onset(record: Mapping[str, Any]) -> OnsetSettings:
    """The onset settings a record was measured with: its `audible_onset_rule` read back
    (`OnsetSettings.from_label`). A record without one (written before the absolute rule,
    whose relative rule is gone) gets today's default; a label that is no absolute rule's
    raises ValueError naming the record and the label."""
    label = record.get("audible_onset_rule")
    if label is None:
        return DEFAULT_ONSET
    try:
        return OnsetSettings.from_label(label)
    except ValueError:
        raise ValueError(
            f"record {record.get('request_index')}: audible_onset_rule {label!r} is no rule "
            "thetalker.metrics.onset can apply; pass onset= to recompute it by another"
        ) from None


class MixedOnsetRulesError(ValueError):
    """A point's records measured by several onset rules (`point_onset`)."""


def point_onset(records: Iterable[Mapping[str, Any]]) -> OnsetSettings | None:
    """The one onset rule a point's scored successful records were measured with (None: no
    such record; records without a rule: today's default). Records measured by several
    rules raise MixedOnsetRulesError naming each rule and how many records it found (a
    point's audible figures never pool two definitions unsaid); one label that is no
    absolute rule's, ValueError."""
    counts: dict[str, int] = {}
    for r in records:
        if r.get("ok") and not r.get("warmup"):
            label = str(r.get("audible_onset_rule") or OLD_ONSET_RULE)
            counts[label] = counts.get(label, 0) + 1
    if len(counts) > 1:
        said = ", ".join(
            f"{label} ({n} record{'' if n == 1 else 's'})" for label, n in sorted(counts.items())
        )
        raise MixedOnsetRulesError(
            f"records measured with {len(counts)} audible onset rules: {said}"
        )
    if not counts:
        return None
    (label,) = counts
    return DEFAULT_ONSET if label == OLD_ONSET_RULE else OnsetSettings.from_label(label)


# Every field of a record a point's figures read (summarize_point, point_intervals,
# point_onset and the player models): a table over many points keeps these alone.
POINT_FIELDS = (
    "request_index",
    "warmup",
    "ok",
    "error",
    "t_submit_s",
    "wall_s",
    "audio_s",
    "text_chars",
    "sample_rate",
    "ttfa_s",
    "ttfa_audible_s",
    "audible",
    "audible_onset_rule",
    "continuity_ok",
    "max_underrun_s",
    "stalls",
    "schedule_lag_s",
)


def point_fields(
    record: Mapping[str, Any], usable_audio_s: float = DEFAULT_USABLE_AUDIO_S
) -> dict[str, Any]:
    """What a point's figures need of one record: its `POINT_FIELDS` (those it has), the
    stalls of the pausing player over its timeline (`pausing_stalls_s`, kept under
    `STALLS_KEY`) and its time to `usable_audio_s` of audio (kept under `TIME_TO_AUDIO_KEY`),
    without the timeline itself: a point's reads are most of its memory."""
    slim = {name: record[name] for name in POINT_FIELDS if name in record}
    slim[STALLS_KEY] = pausing_stalls_s(record)
    slim[TIME_TO_AUDIO_KEY] = (usable_audio_s, record_time_to_audio_s(record, usable_audio_s))
    return slim


def first_byte_from_sent_s(ttfa_s: float | None, request_sent_s: float | None) -> float | None:
    """First audio byte from the moment the request was on the wire (its body's first byte
    written, after any connection setup): `ttfa_s - request_sent_s`; None without either."""
    if ttfa_s is None or request_sent_s is None:
        return None
    return ttfa_s - request_sent_s


def percentiles(values: Iterable[float | None], qs: Sequence[int] = PERCENTILES) -> dict:
    """p50/p90/p95/p99 by linear interpolation (numpy's default) and n; None when empty."""
    data = np.asarray([v for v in values if v is not None], dtype=float)
    out: dict[str, Any] = {
        f"p{q}": (float(np.percentile(data, q)) if data.size else None) for q in qs
    }
    out["n"] = int(data.size)
    return out


@dataclass(frozen=True)
class PointSummary(Mapping[str, Any]):
    """One load point's figures (summarize_point). The fields, in this order, are the
    summary's JSON form (summary.json's core, points.csv's columns after flattening): a
    new figure is one field here and one value in summarize_point. Read-only mapping
    view too (`s["rtfx"]`, `s.get(...)`, `{**s}`), so a summary and a loaded summary.json
    are read the same way. Percentile blocks are `percentiles()` dicts."""

    concurrency: int | None
    n_scored: int
    n_ok: int
    n_failed: int
    error_rate: float | None
    window_s: float
    audio_s: float
    rtfx: float | None
    continuity_pct: float | None
    continuity_pct_ok_only: float | None
    chars_per_s: float | None
    stalls_total: int
    ttfa_s: dict[str, Any]
    ttfa_audible_s: dict[str, Any]
    wall_s: dict[str, Any]
    rtfx_per_request: dict[str, Any]
    # Audibility (thetalker.metrics.onset): ok requests with no audible onset, their share,
    # and the rule the records' onsets were found by.
    n_inaudible: int
    audible_pct: float | None
    audible_onset_rule: str | None
    # Continuity under the other player models (thetalker.metrics.players).
    stall_gate_pct: float | None
    no_stall_pct: float | None
    largest_stall_s_max: float | None
    start_buffer_s: dict[str, Any]
    # Open loop with a cap on requests in flight: arrivals dropped at the cap (not scored),
    # and how late the sent ones went out (`schedule_lag_s` percentiles, n 0 on a closed loop).
    n_dropped: int
    schedule_lag_s: dict[str, Any]
    # Sessions and starts (thetalker.metrics.sessions): mean streams in flight (Little's
    # law over the sent requests), time to the first `usable_audio_s` of audio over the ok
    # requests (those that never delivered that much counted apart), and the spread of the
    # audible first-audio tail.
    sessions_in_flight: float | None
    usable_audio_s: float
    time_to_usable_audio_s: dict[str, Any]
    n_short_of_usable_audio: int
    ttfa_audible_p99_over_p50: float | None
    ttfa_audible_iqr_s: float | None
    # Admission rejections (thetalker.metrics.overload): scored requests the server refused
    # for load, and how long a refusal took (`wall_s` percentiles).
    n_rejected: int
    rejected_wall_s: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: the fields in order (percentile blocks copied)."""
        return {f.name: _copy(getattr(self, f.name)) for f in fields(self)}

    def __getitem__(self, key: str) -> Any:
        if key not in _FIELD_NAMES:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(_FIELD_NAMES)

    def __len__(self) -> int:
        return len(_FIELD_NAMES)


def _copy(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else value


_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(PointSummary))


def summarize_point(
    records: Iterable[Mapping[str, Any]],
    concurrency: int | None = None,
    usable_audio_s: float = DEFAULT_USABLE_AUDIO_S,
) -> PointSummary:
    """One load point from its records (warmup records are ignored).

    A failed request counts as not continuous in `continuity_pct` (a player could not
    play it); `continuity_pct_ok_only` uses upstream's denominator. `chars_per_s`
    counts the characters of requests delivered continuously.
    """
    measured = [r for r in records if not r.get("warmup")]
    scored = [r for r in measured if not is_dropped(r)]
    ok = [r for r in scored if r.get("ok")]
    n_scored, n_ok = len(scored), len(ok)
    audible = [audible_of(r) for r in ok]
    window_s = measurement_window_s(scored)
    continuous = [r for r in ok if r.get("continuity_ok")]
    audio_s = sum(float(r.get("audio_s") or 0.0) for r in ok)
    chars = sum(int(r.get("text_chars") or 0) for r in continuous)

    def rate(x: float) -> float | None:
        return x / window_s if window_s > 0 else None

    usable = [record_time_to_audio_s(r, usable_audio_s) for r in ok]
    spread = tail_spread(r.get("ttfa_audible_s") for r in ok)

    def pct(num: int, den: int) -> float | None:
        return 100.0 * num / den if den else None

    return PointSummary(
        concurrency=concurrency,
        n_scored=n_scored,
        n_ok=n_ok,
        n_failed=n_scored - n_ok,
        error_rate=(n_scored - n_ok) / n_scored if n_scored else None,
        window_s=window_s,
        audio_s=audio_s,
        rtfx=rate(audio_s),
        continuity_pct=pct(len(continuous), n_scored),
        continuity_pct_ok_only=pct(len(continuous), n_ok),
        chars_per_s=rate(chars),
        stalls_total=sum(int(r.get("stalls") or 0) for r in ok),
        ttfa_s=percentiles(r.get("ttfa_s") for r in ok),
        ttfa_audible_s=percentiles(r.get("ttfa_audible_s") for r in ok),
        wall_s=percentiles(r.get("wall_s") for r in ok),
        rtfx_per_request=percentiles(
            float(r["audio_s"]) / float(r["wall_s"]) for r in ok if r.get("wall_s")
        ),
        n_inaudible=audible.count(False),
        audible_pct=pct(audible.count(True), n_ok),
        audible_onset_rule=_onset_rule(ok),
        **summarize_players(scored),
        n_dropped=len(measured) - n_scored,
        schedule_lag_s=_lags([r.get("schedule_lag_s") for r in scored]),
        sessions_in_flight=sessions_in_flight((r.get("wall_s") for r in scored), window_s),
        usable_audio_s=float(usable_audio_s),
        time_to_usable_audio_s=percentiles(usable),
        n_short_of_usable_audio=usable.count(None),
        ttfa_audible_p99_over_p50=spread["p99_over_p50"],
        ttfa_audible_iqr_s=spread["iqr"],
        n_rejected=len(rejected := [r for r in scored if is_rejection(r)]),
        rejected_wall_s=percentiles(r.get("wall_s") for r in rejected),
    )


def _lags(values: Sequence[float | None]) -> dict[str, Any]:
    lags = [float(v) for v in values if v is not None]
    return {**percentiles(lags), "max": max(lags) if lags else None}


# Records written before the absolute onset rule carry no `audible_onset_rule`: their onset
# was relative (5% of the utterance's peak, 5 ms windows, 4 in a row) and silence read as 0.
OLD_ONSET_RULE = "relative-5%peak/5ms/4 (old records)"


def audible_of(record: Mapping[str, Any]) -> bool:
    """Whether a record's stream had an audible onset (old records: an audible time)."""
    if "audible" in record and record["audible"] is not None:
        return bool(record["audible"])
    return record.get("ttfa_audible_s") is not None


def is_dropped(record: Mapping[str, Any]) -> bool:
    """An open-loop arrival dropped at the cap on requests in flight (never sent)."""
    return (record.get("error") or {}).get("type") == "dropped"


def _onset_rule(ok: Sequence[Mapping[str, Any]]) -> str | None:
    """The rule the records' onsets were found by; several: `mixed: A; B` (the audible
    figures then pool two definitions, and say so)."""
    rules = sorted({str(r.get("audible_onset_rule") or OLD_ONSET_RULE) for r in ok})
    if len(rules) > 1:
        return f"{MIXED_ONSET_RULES}{'; '.join(rules)}"
    return rules[0] if rules else None


# The start of a summary's `audible_onset_rule` when its records used several rules.
MIXED_ONSET_RULES = "mixed: "


def usd_per_million_chars(gpu_hour_usd: float, chars_per_s: float | None) -> float | None:
    """Price of a million characters of speech at a sustained `chars_per_s`."""
    if not chars_per_s or chars_per_s <= 0:
        return None
    return gpu_hour_usd / (chars_per_s * 3600.0) * 1e6


def point_cost(
    summary: Mapping[str, Any], gpu_hour_usd: float, min_continuity_pct: float = 95.0
) -> float | None:
    """Cost of one load point, only where its streams were continuous enough to sell."""
    continuity = summary.get("continuity_pct")
    if continuity is None or continuity < min_continuity_pct:
        return None
    return usd_per_million_chars(gpu_hour_usd, summary.get("chars_per_s"))
