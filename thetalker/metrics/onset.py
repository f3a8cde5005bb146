"""Audible onset of one utterance: where the first sound starts in its PCM, or that none does.

The definition is the public cross-server report's (`nari-labs/benchmarks` `tts_bench`,
`AudibleOnsetDetector` version 1), so an audible first audio here stands beside its table:
frames of `frame_s` (20 ms) every `hop_s` (10 ms); each frame scaled to float (/ 32768), its
own mean subtracted (DC removal: an offset is not sound) and its RMS taken; a frame is active
when its RMS reaches `threshold_dbfs` (-45 dBFS, about 0.00562 of full scale); `run_frames`
(2) active frames in a row make the onset, the start of the first of them. Only whole frames
are looked at (a tail shorter than a frame is not).

No onset means *inaudible*: `audible_onset_s` answers None, never 0, so a server that
streams silence never gets a perfect audible first audio. Pure numpy, no I/O.

Those four settings are the default (`DEFAULT_ONSET`); a run may state others (the workflow's
`audible_onset` config key, `thetalker-bench --onset-*`, `BenchOptions.onset`). Every record
names the rule it was measured by (`audible_onset_rule`, `OnsetSettings.label()`), and
`OnsetSettings.from_label` reads that name back, so a record's figures are recomputed by its
own rule. `OnsetSettings.from_spec` builds settings from a mapping of some of the fields (the
others the defaults) and `problem()` says why settings cannot be used (`OnsetError`: the field
and why), each check written once here for the config, the job spec and the options.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

__all__ = [
    "OnsetSettings",
    "OnsetError",
    "DEFAULT_ONSET",
    "ONSET_FIELDS",
    "audible_onset_s",
    "FIRST_BLOCK_FRAMES",
]

_FULL_SCALE = 32768.0


class OnsetError(ValueError):
    """Onset settings that cannot be used: `field` (threshold_dbfs, frame_s, hop_s,
    run_frames; a key of a spec) and `why`; the message is `{field}: {why}`."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field, self.why = field, why


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class OnsetSettings:
    """The detector's settings; `label()` names them in records and summaries."""

    threshold_dbfs: float = -45.0
    frame_s: float = 0.020
    hop_s: float = 0.010
    run_frames: int = 2

    def label(self) -> str:
        """`abs-45dBFS/20ms/10ms/2`: the rule a record's onset was found by."""
        return (
            f"abs{self.threshold_dbfs:g}dBFS/{self.frame_s * 1000:g}ms/"
            f"{self.hop_s * 1000:g}ms/{self.run_frames}"
        )

    def spec(self) -> dict[str, Any]:
        """The four settings by name (what `from_spec` takes)."""
        return asdict(self)

    def to_dict(self) -> dict[str, Any]:
        """The summary's `audible_onset`: the settings, the DC removal and the label."""
        return {**self.spec(), "dc_removal": "per-frame mean", "rule": self.label()}

    def problem(self) -> OnsetError | None:
        """Why these settings cannot be used (the first bad field), or None: every number
        finite, the threshold below full scale (< 0 dBFS), frame and hop above 0 s with the
        hop no longer than the frame (no sample skipped), at least one frame in a row, and
        each value said exactly by `label()` (at most 6 significant digits, in ms for the
        times), so the label a record carries gives these settings back."""
        for name in ("threshold_dbfs", "frame_s", "hop_s"):
            value = getattr(self, name)
            if not _is_number(value) or not math.isfinite(value):
                return OnsetError(name, f"must be a finite number (got {value!r})")
        if isinstance(self.run_frames, bool) or not isinstance(self.run_frames, int):
            return OnsetError("run_frames", f"must be an integer (got {self.run_frames!r})")
        if self.threshold_dbfs >= 0:
            why = f"must be below 0 dBFS, full scale (got {self.threshold_dbfs:g})"
            return OnsetError("threshold_dbfs", why)
        for name in ("frame_s", "hop_s"):
            if getattr(self, name) <= 0:
                return OnsetError(name, f"must be above 0 s (got {getattr(self, name):g})")
        if self.hop_s > self.frame_s:
            why = f"{self.hop_s:g} s is longer than frame_s {self.frame_s:g} s (samples skipped)"
            return OnsetError("hop_s", why)
        if self.run_frames < 1:
            return OnsetError("run_frames", f"must be at least 1 (got {self.run_frames})")
        told = OnsetSettings.from_label(self.label())
        for name, unit in (("threshold_dbfs", "dBFS"), ("frame_s", "ms"), ("hop_s", "ms")):
            value, said = float(getattr(self, name)), float(getattr(told, name))
            if not math.isclose(value, said, rel_tol=1e-9, abs_tol=1e-12):
                why = (
                    f"{value!r} would be labelled {self.label()}, which does not say it "
                    f"exactly; give at most 6 significant digits (in {unit})"
                )
                return OnsetError(name, why)
        return None

    def checked(self) -> OnsetSettings:
        """These settings, or OnsetError naming the first bad field (`problem`)."""
        problem = self.problem()
        if problem is not None:
            raise problem
        return self

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> OnsetSettings:
        """Settings from a mapping of some of the four fields (None or {}: the defaults),
        checked; OnsetError naming an unknown key or the first bad value."""
        spec = dict(spec or {})
        unknown = sorted(str(k) for k in set(spec) - set(ONSET_FIELDS))
        if unknown:
            known = ", ".join(ONSET_FIELDS)
            raise OnsetError(unknown[0], f"unknown onset setting (known: {known})")
        given = cls(**spec).checked()
        # One form whatever the source wrote (YAML's -30 is -30.0), so equal settings give
        # equal JSON.
        return cls(
            float(given.threshold_dbfs), float(given.frame_s), float(given.hop_s), given.run_frames
        )

    @classmethod
    def from_label(cls, label: str) -> OnsetSettings:
        """The settings a `label()` names (`abs-30dBFS/20ms/10ms/2`); ValueError for a
        string that is no such label (the old relative rule's included)."""
        match = _LABEL.fullmatch(str(label))
        if match is None:
            raise ValueError(f"{label!r} is no label of the absolute onset rule")
        threshold, frame_ms, hop_ms, run = match.groups()
        return cls(float(threshold), float(frame_ms) / 1000, float(hop_ms) / 1000, int(run))


_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_LABEL = re.compile(rf"abs{_NUMBER}dBFS/{_NUMBER}ms/{_NUMBER}ms/(-?\d+)")
ONSET_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(OnsetSettings))
DEFAULT_ONSET = OnsetSettings()


def _as_int16(pcm: bytes | np.ndarray) -> np.ndarray:
    if isinstance(pcm, np.ndarray):
        return pcm.astype(np.int16, copy=False)
    usable = len(pcm) - len(pcm) % 2
    return np.frombuffer(pcm[:usable], dtype="<i2")


def audible_onset_s(
    pcm: bytes | np.ndarray, sample_rate: int, settings: OnsetSettings = DEFAULT_ONSET
) -> float | None:
    """Seconds of audio before the audible onset, or None when the utterance is inaudible
    (no `run_frames` active frames in a row, an empty or all-silent stream included).

    Frames are judged in blocks from the start, each twice the last, and the search stops
    at the first run: an onset near the start (the common case) costs a few frames, not
    the whole utterance (the record writer runs beside the receive loop on a shared CPU).
    Each frame's figure is computed as it would be over the whole stream at once."""
    if sample_rate <= 0:
        return None
    ints = _as_int16(pcm)
    frame = max(1, int(round(settings.frame_s * sample_rate)))
    hop = max(1, int(round(settings.hop_s * sample_rate)))
    if ints.size < frame:
        return None
    n_frames = (ints.size - frame) // hop + 1
    run = max(1, int(settings.run_frames))
    if n_frames < run:
        return None
    level = 10.0 ** (settings.threshold_dbfs / 20.0)
    tail = 0  # active frames in a row at the end of the blocks judged so far (< run)
    first, size = 0, FIRST_BLOCK_FRAMES
    while first < n_frames:
        last = min(n_frames, first + size)
        active = _active_frames(ints, first, last, frame, hop, level)
        flags = np.concatenate([np.ones(tail, np.int32), active.astype(np.int32)])
        if flags.size >= run:
            runs = np.convolve(flags, np.ones(run, np.int32), "valid")
            hits = np.flatnonzero(runs == run)
            if hits.size:
                return float((first - tail + int(hits[0])) * hop / sample_rate)
        tail = _trailing_true(active, tail, run - 1)
        first, size = last, size * 2
    return None


# The search judges the first 32 frames, then blocks twice as long each time: a stream with an
# early onset is decided from its first frames (tests pin a run across a block boundary).
FIRST_BLOCK_FRAMES = 32


def _active_frames(
    ints: np.ndarray, first: int, last: int, frame: int, hop: int, level: float
) -> np.ndarray:
    """Whether frames `first` to `last` (exclusive) reach `level` RMS, each with its own
    mean removed."""
    samples = ints[first * hop : (last - 1) * hop + frame].astype(np.float64) / _FULL_SCALE
    starts = np.arange(0, (last - first - 1) * hop + 1, hop)
    frames = np.lib.stride_tricks.sliding_window_view(samples, frame)[starts]
    centred = frames - frames.mean(axis=1, keepdims=True)
    return np.sqrt((centred**2).mean(axis=1)) >= level


def _trailing_true(active: np.ndarray, before: int, cap: int) -> int:
    """Active frames in a row at the end, counting `before` ones ahead of `active` when it
    is active throughout; at most `cap` (a run that long would have been found)."""
    if active.size and active.all():
        return min(cap, before + active.size)
    inactive = np.flatnonzero(~active)
    return min(cap, active.size - 1 - int(inactive[-1])) if inactive.size else before
