"""Audio health of each stream a run received: what a listener hears go wrong that WER misses.

Per stream, from its saved audio (s16le) and the server chunks of its record (`chunk_bytes`),
pure numpy (definitions and worked numbers: docs/quality.md "Audio health"):

- **clicking joins**: at each server chunk boundary, the step between the last sample of one
  chunk and the first of the next, against the steps inside the chunks around it (the
  largest within `JOIN_WINDOW_S` either side). A join is a click when its step is more than
  `CLICK_RATIO` times that and at least `CLICK_FLOOR` of full scale.
- **clipping**: a run of at least `CLIP_RUN` samples at full scale (|s| >= 32767).
- **DC offset**: the stream's mean sample, |mean| above `DC_LIMIT` of full scale.
- **mid-stream silence**: after the first audible frame and before the last one, a stretch
  of frames below `SILENCE_DBFS` lasting at least `MID_SILENCE_S`.
- **truncated ending**: the last whole frame at or above `TRUNCATED_DBFS` (the stream was cut
  while still loud: mid-word).
- **empty success**: a request that succeeded with no audio, or none audible (no frame at
  the audible level, `AUDIBLE_DBFS`).

Frames are the onset rule's (thetalker.metrics.onset): 20 ms every 10 ms, each frame's own
mean taken off, RMS in dBFS. A failed request is no healthy stream: every share counts it
(thetalker.report.health). `main` writes a point's health.json from its records.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from scipy.ndimage import maximum_filter1d

from thetalker.data.record_reads import RecordError
from thetalker.quality.point_files import (
    point_parser,
    record_audio,
    scored_records,
    write_finite_json,
)

__all__ = [
    "CLICK_RATIO",
    "CLICK_FLOOR",
    "JOIN_WINDOW_S",
    "CLIP_RUN",
    "DC_LIMIT",
    "SILENCE_DBFS",
    "AUDIBLE_DBFS",
    "MID_SILENCE_S",
    "TRUNCATED_DBFS",
    "DEFECTS",
    "StreamHealth",
    "join_samples",
    "clicking_joins",
    "clip_runs",
    "frame_dbfs",
    "longest_mid_silence",
    "stream_health",
    "point_health",
    "settings",
    "main",
]

FULL_SCALE = 32768.0
# A join step above 4x the largest step within 10 ms either side, and at least 1% of full
# scale (-40 dB: a step below it is too small to hear as a click in any context).
CLICK_RATIO = 4.0
CLICK_FLOOR = 0.01
JOIN_WINDOW_S = 0.010
# Three full-scale samples in a row: one can be a peak normalised to full scale, a run is
# the waveform flattened against the rail.
CLIP_RUN = 3
CLIP_LEVEL = 32767
DC_LIMIT = 0.01  # -40 dBFS of offset: far above what speech averages to over a sentence
FRAME_S = 0.020
HOP_S = 0.010
AUDIBLE_DBFS = -45.0  # the audible onset's level (thetalker.metrics.onset's default)
SILENCE_DBFS = -60.0
MID_SILENCE_S = 1.0
TRUNCATED_DBFS = -30.0
_SILENT_DB = -120.0  # the level of an all-zero frame (log of 0 would be -inf)

# The defects, in the order the tables print them.
DEFECTS = ("clicks", "clipping", "dc_offset", "mid_silence", "truncated", "empty")


def settings() -> dict[str, float]:
    """The thresholds, written beside every health.json so a number names its definition."""
    return {
        "click_ratio": CLICK_RATIO,
        "click_floor": CLICK_FLOOR,
        "join_window_s": JOIN_WINDOW_S,
        "clip_run": CLIP_RUN,
        "dc_limit": DC_LIMIT,
        "frame_s": FRAME_S,
        "hop_s": HOP_S,
        "audible_dbfs": AUDIBLE_DBFS,
        "silence_dbfs": SILENCE_DBFS,
        "mid_silence_s": MID_SILENCE_S,
        "truncated_dbfs": TRUNCATED_DBFS,
    }


@dataclass
class StreamHealth:
    """One stream's health. `ok` False: a failed request (no figure is measured)."""

    request_index: int
    sample_id: str
    ok: bool
    audio_s: float
    audio_path: str | None = None
    joins: int = 0
    clicking_joins: int = 0
    click_at_s: list[float] = field(default_factory=list)
    clip_runs: int = 0
    dc_offset: float = 0.0
    longest_mid_silence_s: float = 0.0
    mid_silence_at_s: float | None = None
    end_dbfs: float | None = None
    audible: bool = False

    def defects(self) -> list[str]:
        """The defects of this stream (`DEFECTS` names); a failed request has none: it is
        counted as failed, and against every share."""
        if not self.ok:
            return []
        if not self.audible:
            return ["empty"]
        found = {
            "clicks": self.clicking_joins > 0,
            "clipping": self.clip_runs > 0,
            "dc_offset": abs(self.dc_offset) > DC_LIMIT,
            "mid_silence": self.longest_mid_silence_s >= MID_SILENCE_S,
            "truncated": self.end_dbfs is not None and self.end_dbfs >= TRUNCATED_DBFS,
        }
        return [name for name in DEFECTS if found.get(name)]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "defects": self.defects()}


def as_float(pcm: bytes | np.ndarray) -> np.ndarray:
    """s16le bytes (an odd last byte dropped) or int16 samples as floats in [-1, 1)."""
    if isinstance(pcm, bytes | bytearray | memoryview):
        pcm = np.frombuffer(bytes(pcm)[: len(pcm) - len(pcm) % 2], dtype="<i2")
    return np.asarray(pcm, dtype=np.float64) / FULL_SCALE


def join_samples(chunk_bytes: Sequence[int], n_samples: int) -> np.ndarray:
    """Sample index of the first sample after each server chunk boundary, inside (0, n).

    A boundary that falls mid-sample (an odd byte count) belongs to the sample it cuts;
    empty chunks add no boundary."""
    ends = np.cumsum(np.asarray(chunk_bytes, dtype=np.int64))[:-1] // 2
    ends = np.unique(ends)
    return ends[(ends > 0) & (ends < n_samples)]


def clicking_joins(
    x: np.ndarray,
    joins: np.ndarray,
    sample_rate: int,
    ratio: float = CLICK_RATIO,
    floor: float = CLICK_FLOOR,
    window_s: float = JOIN_WINDOW_S,
) -> np.ndarray:
    """The joins (sample indices) whose step |x[j] - x[j-1]| exceeds `ratio` times the
    local slope and is at least `floor`. The local slope is the largest step within
    `window_s` either side, each side judged by its steps inside chunks; a side with none
    (every sample a join: chunks of one sample) by all its steps, joins included (the
    judged one never), so a clean sine cut into 1-sample chunks has no click and a jump in
    it still stands out."""
    if x.size < 2 or joins.size == 0:
        return np.empty(0, dtype=np.int64)
    steps = np.abs(np.diff(x))  # steps[i] = |x[i+1] - x[i]|; the join at j is steps[j-1]
    is_join = np.zeros(steps.size, dtype=bool)
    is_join[joins - 1] = True
    inner = np.where(is_join, 0.0, steps)  # a join step is no step inside a chunk
    w = max(1, int(round(window_s * sample_rate)))
    at = joins - 1  # each join's step
    # Per side: the window [s - w, s) to the left of step s, (s, s + w] to its right.
    inner_max = _window_max(inner, w)
    any_max = _window_max(steps, w)
    inner_count = _window_count(~is_join, w)

    def side(first: np.ndarray) -> np.ndarray:  # `first`: each window's first index, padded
        return np.where(inner_count[first] > 0, inner_max[first], any_max[first])

    local = np.maximum(side(at), side(at + w + 1))
    step = steps[at]
    return joins[(step >= floor) & (step > ratio * local)].astype(np.int64)


def _window_max(values: np.ndarray, w: int) -> np.ndarray:
    """M[k] = max of `values` padded with w zeros before and w + 1 after, over [k, k + w)
    (the values are steps, never negative: a zero pads nothing)."""
    padded = np.concatenate([np.zeros(w), values, np.zeros(w + 1)])
    return maximum_filter1d(padded, size=w, mode="constant", cval=0.0, origin=-(w // 2))


def _window_count(flags: np.ndarray, w: int) -> np.ndarray:
    """C[k] = how many of `flags` (padded as `_window_max` pads) are set in [k, k + w)."""
    padded = np.concatenate([np.zeros(w), flags.astype(np.int64), np.zeros(w + 1)])
    total = np.concatenate([[0], np.cumsum(padded)])
    ends = np.minimum(np.arange(padded.size) + w, padded.size)
    return total[ends] - total[: padded.size]


def clip_runs(ints: np.ndarray, run: int = CLIP_RUN, level: int = CLIP_LEVEL) -> int:
    """Runs of at least `run` samples in a row with |s| >= `level`."""
    at_rail = np.abs(ints.astype(np.int32)) >= level
    if not at_rail.any():
        return 0
    edges = np.diff(np.concatenate([[0], at_rail.astype(np.int8), [0]]))
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return int(np.sum((stops - starts) >= run))


def frame_dbfs(x: np.ndarray, sample_rate: int) -> np.ndarray:
    """Each whole frame's RMS in dBFS, its own mean removed (FRAME_S every HOP_S)."""
    frame = max(1, int(round(FRAME_S * sample_rate)))
    hop = max(1, int(round(HOP_S * sample_rate)))
    if x.size < frame:
        return np.empty(0)
    frames = sliding_window_view(x, frame)[::hop]
    rms = frames.std(axis=1)  # the RMS about the frame's own mean
    with np.errstate(divide="ignore"):
        return np.maximum(20.0 * np.log10(rms), _SILENT_DB)


def longest_mid_silence(db: np.ndarray, sample_rate: int) -> tuple[float, float | None]:
    """(seconds, start in s) of the longest stretch of frames below SILENCE_DBFS between
    the first and the last frame at AUDIBLE_DBFS; (0, None) when there is none. A stretch
    of k frames lasts (k - 1) * hop + frame seconds: the audio its frames cover."""
    audible = np.flatnonzero(db >= AUDIBLE_DBFS)
    if audible.size < 2:
        return 0.0, None
    inside = db[audible[0] : audible[-1] + 1] < SILENCE_DBFS
    if not inside.any():
        return 0.0, None
    edges = np.diff(np.concatenate([[0], inside.astype(np.int8), [0]]))
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    k = int(np.argmax(stops - starts))
    frames = int(stops[k] - starts[k])
    seconds = (frames - 1) * HOP_S + FRAME_S
    return seconds, (audible[0] + starts[k]) * HOP_S


def stream_health(
    pcm: bytes | np.ndarray,
    sample_rate: int,
    chunk_bytes: Sequence[int],
    request_index: int = 0,
    sample_id: str = "",
    audio_path: str | None = None,
) -> StreamHealth:
    """The health of one successful stream from its PCM and its server chunks."""
    x = as_float(pcm)
    ints = np.round(x * FULL_SCALE).astype(np.int32)
    joins = join_samples(chunk_bytes, x.size)
    clicks = clicking_joins(x, joins, sample_rate)
    db = frame_dbfs(x, sample_rate)
    silence_s, silence_at = longest_mid_silence(db, sample_rate)
    return StreamHealth(
        request_index=request_index,
        sample_id=sample_id,
        ok=True,
        audio_s=x.size / sample_rate if sample_rate > 0 else 0.0,
        audio_path=audio_path,
        joins=int(joins.size),
        clicking_joins=int(clicks.size),
        click_at_s=[round(float(j) / sample_rate, 4) for j in clicks],
        clip_runs=clip_runs(ints),
        dc_offset=float(x.mean()) if x.size else 0.0,
        longest_mid_silence_s=round(silence_s, 4),
        mid_silence_at_s=None if silence_at is None else round(silence_at, 4),
        end_dbfs=round(float(db[-1]), 2) if db.size else None,
        audible=bool(db.size and (db >= AUDIBLE_DBFS).any()),
    )


def point_health(records_path: str | os.PathLike[str]) -> list[StreamHealth]:
    """One StreamHealth per scored record of a point (warmup left out), in file order.

    Only the records whose audio was saved, and the failed ones, are judged: with
    `save_audio_count` the rest of a point has no audio to hear."""
    records_path = Path(records_path)
    out = []
    for where, rec in scored_records(records_path):
        index, sid = int(rec["request_index"]), str(rec["sample_id"])
        if not rec.get("ok"):
            out.append(StreamHealth(index, sid, False, float(rec.get("audio_s") or 0.0)))
            continue
        audio = record_audio(rec, records_path.parent, where)
        if audio is None:  # a success with no audio at all: an empty success
            out.append(StreamHealth(index, sid, True, 0.0))
            continue
        pcm, rate = audio
        out.append(stream_health(pcm, rate, rec["chunk_bytes"], index, sid, rec.get("audio_path")))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = point_parser("thetalker.quality.health", __doc__, "health.json").parse_args(argv)
    try:
        streams = point_health(args.records)
    except (RecordError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = [s.to_dict() for s in streams]
    data = {"records": str(args.records), "settings": settings(), "streams": rows}
    write_finite_json(args.out, data)
    bad = sum(1 for s in streams if s.defects())
    failed = sum(1 for s in streams if not s.ok)
    print(f"{len(streams)} streams: {bad} with a defect, {failed} failed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
