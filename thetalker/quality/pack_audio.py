"""The audio a listening pack keeps and plays, bounded: one cut copy of each picked stream,
a render of a stalled stream as the pausing player heard it, and the page's embed budget.

A runaway model (one that never emits its stop token) streams minutes; three such 30 MiB
streams once made 513 MB of pack for one point. So each picked stream is kept once (every
figure that picks it shares the file) and only its first KEEP_S seconds; a stalled one gets
a second file with the pausing zero-buffer player's stalls (thetalker.metrics.players) as
silence at the samples where it waited, at most STALL_SILENCE_MAX_S of silence in all; the
page embeds WAVs up to EMBED_MAX_BYTES and links the rest. Bounds stated in docs/quality.md.
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from thetalker.data.wavio import read_wav, write_wav

__all__ = [
    "KEEP_S",
    "STALL_SILENCE_MAX_S",
    "EMBED_MAX_BYTES",
    "Kept",
    "keep_stream",
    "stalls_as_silence",
    "EmbedBudget",
]

# A sentence of speech is far shorter; a runaway is heard for what it is within 30 s.
KEEP_S = 30.0
# The silence a stalled render may hold in all (a timeout's stall can be minutes long).
STALL_SILENCE_MAX_S = 30.0
# WAV bytes a page embeds (as base64, 4/3 of it); a later player links its file. The
# default point's pack (2 picks x 10 figures of 3-5 s Piper sentences) is about 4 MB.
EMBED_MAX_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Kept:
    """One stream kept in the pack: its file name, the seconds kept of the seconds there
    were, and the file of its stalls rendered as silence ("" when it never stalled)."""

    file: str
    kept_s: float
    audio_s: float
    stalled_file: str = ""
    stalls_rendered_s: float = 0.0


def keep_stream(
    src: Path, out_dir: Path, stall_points: Sequence[tuple[int, float]], keep_s: float = KEEP_S
) -> Kept:
    """Copy `src` into `out_dir` under its own name, cut to its first `keep_s` seconds (a
    shorter one copied byte for byte), and where `stall_points` (byte offset, seconds) are
    given, `{stem}_stalls.wav`: the kept audio with those stalls as silence."""
    pcm, info = read_wav(src)
    frame = 2 * info.channels
    bps = info.sample_rate * frame
    keep = int(keep_s * info.sample_rate) * frame
    dst = out_dir / src.name
    if len(pcm) <= keep:
        shutil.copyfile(src, dst)
        kept = pcm
    else:
        kept = pcm[:keep]
        write_wav(dst, kept, info.sample_rate, info.channels)
    stalled, rendered = "", 0.0
    if stall_points:
        audio, silence = stalls_as_silence(kept, info.sample_rate, frame, stall_points)
        stalled = f"{src.stem}_stalls.wav"
        write_wav(out_dir / stalled, audio, info.sample_rate, info.channels)
        rendered = silence / bps
    return Kept(dst.name, len(kept) / bps, len(pcm) / bps, stalled, rendered)


def stalls_as_silence(
    pcm: bytes,
    rate: int,
    frame: int,
    points: Sequence[tuple[int, float]],
    most_s: float = STALL_SILENCE_MAX_S,
) -> tuple[bytes, int]:
    """`pcm` with each stall (bytes played before it, seconds) as that much silence at its
    place (a place cut to a whole frame; stalls past the end of `pcm` are not heard), at
    most `most_s` of silence in all; and the bytes of silence inserted."""
    parts, at, budget = [], 0, int(most_s * rate) * frame
    for offset, seconds in points:
        if offset >= len(pcm):
            break  # the stall came after the kept audio: not heard
        place = offset - offset % frame
        gap = min(budget, int(round(seconds * rate)) * frame)
        parts += [pcm[at:place], bytes(gap)]
        at, budget = place, budget - gap
    parts.append(pcm[at:])
    audio = b"".join(parts)
    return audio, len(audio) - len(pcm)


class EmbedBudget:
    """What a player's `src` is: the WAV as a data URI while the page's embedded WAV bytes
    stay within `most` bytes, else a link relative to the page."""

    def __init__(self, page: Path, out_dir: Path, most: int = EMBED_MAX_BYTES) -> None:
        self.page, self.out_dir, self.left = page, out_dir, most

    def src(self, name: str) -> str:
        path = self.out_dir / name
        size = path.stat().st_size
        if size <= self.left:
            self.left -= size
            return "data:audio/wav;base64," + base64.b64encode(path.read_bytes()).decode()
        return quote(Path(os.path.relpath(path, self.page.parent)).as_posix())
