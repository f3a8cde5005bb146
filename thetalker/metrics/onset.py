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
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["OnsetSettings", "DEFAULT_ONSET", "audible_onset_s"]

_FULL_SCALE = 32768.0


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

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "dc_removal": "per-frame mean", "rule": self.label()}


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
    (no `run_frames` active frames in a row, an empty or all-silent stream included)."""
    if sample_rate <= 0:
        return None
    samples = _as_int16(pcm).astype(np.float64) / _FULL_SCALE
    frame = max(1, int(round(settings.frame_s * sample_rate)))
    hop = max(1, int(round(settings.hop_s * sample_rate)))
    if samples.size < frame:
        return None
    starts = np.arange(0, samples.size - frame + 1, hop)
    frames = np.lib.stride_tricks.sliding_window_view(samples, frame)[starts]
    centred = frames - frames.mean(axis=1, keepdims=True)
    rms = np.sqrt((centred**2).mean(axis=1))
    active = rms >= 10.0 ** (settings.threshold_dbfs / 20.0)
    run = max(1, int(settings.run_frames))
    if active.size < run:
        return None
    runs = np.convolve(active.astype(np.int32), np.ones(run, np.int32), "valid")
    hits = np.flatnonzero(runs == run)
    return float(starts[hits[0]] / sample_rate) if hits.size else None
