"""Reading back a request's saved audio: the file the client wrote, as float samples.

A run that saves audio writes each scored, successful request's stream to
`{point}/audio/{request_index:05d}_{sample_id}.wav` (thetalker.client.context's
`audio_file_name`; the pipeline's `audio_dir = point_dir / "audio"`), 16-bit PCM. The A/B's
same-audio check (thetalker.metrics.waveform) compares two arms' renderings of one request.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from thetalker.data.wavio import WavError, read_wav

__all__ = ["utterance_path", "read_utterance"]

FULL_SCALE = 32768.0


def utterance_path(audio_dir: str | os.PathLike[str], request_index: int) -> Path:
    """The one saved file of `request_index` in `audio_dir` (its name starts with the
    index, 5 digits, then `_`). FileNotFoundError (one line naming the folder and index)
    when there is none: a failed request, or one past the run's save_audio_count; WavError
    when two files claim the index."""
    folder = Path(audio_dir)
    found = sorted(folder.glob(f"{request_index:05d}_*.wav"))
    if not found:
        raise FileNotFoundError(f"{folder}: no saved audio for request_index {request_index}")
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise WavError(f"{folder}: request_index {request_index} has {len(found)} files: {names}")
    return found[0]


def read_utterance(audio_dir: str | os.PathLike[str], request_index: int) -> tuple[np.ndarray, int]:
    """The saved audio of `request_index` as float samples in [-1, 1) and its sample rate.
    A file that is not 16-bit mono PCM is refused (WavError naming it)."""
    path = utterance_path(audio_dir, request_index)
    pcm, info = read_wav(path)
    if info.bits_per_sample != 16 or info.channels != 1:
        raise WavError(
            f"{path}: {info.bits_per_sample}-bit, {info.channels} channel(s); saved audio is "
            "16-bit mono"
        )
    ints = np.frombuffer(pcm[: len(pcm) - len(pcm) % 2], dtype="<i2")
    return ints.astype(np.float64) / FULL_SCALE, info.sample_rate
