"""What the fake SGLang-Omni engine emits, shared by the server (sglang venv) and the tests.

Pure Python, no third-party imports: `fake_engine_server.py` imports it to drive the fake
pipeline, and the tests import it to compute the records they expect.

Qwen3-TTS on sglang-omni 0.1.9 (sglang-omni.md): 24 kHz, one codec frame is 80 ms (1920
samples). The vocoder's chunking knobs (ramp `(1, 2, 4)`, initial chunk 8 frames, stream
stride 16) were read but how they combine for one request was not traced, so the fake plays
a plan of its own, named here and asserted by the tests: a first chunk of FIRST_FRAMES, then
REST_FRAMES each, the last one shorter.

A chunk is emitted after the time its audio lasts, times TIME_SCALE (so a test does not wait
real time). Directives in the request text change one request's schedule: `[frames=N]` the
utterance's length in frames, `[first-delay=S]` S more seconds before the first chunk,
`[fail-after=K]` the pipeline fails after K chunks (0: before any audio), `[hold=S]` S more
seconds after the last chunk (keeps the request admitted, for the queue-full test),
`[rate=N]` the audio comes at N Hz instead (the server states it in `X-Sample-Rate`).

Admission: a request is refused with sglang-omni's own `QueueFullError` once the requests in
flight reach running + queued (`--tts_engine.engine.max_running_requests` and
`max_queued_requests`, whose 0.1.9 defaults for Qwen3-TTS are 64 and 64), as its scheduler
does; the fake counts them itself, since the scheduler is what it replaces.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

__all__ = [
    "DEFAULT_FRAMES",
    "DEFAULT_MAX_QUEUED",
    "DEFAULT_MAX_RUNNING",
    "Directives",
    "FIRST_FRAMES",
    "QWEN3_SPEAKERS",
    "REST_FRAMES",
    "SAMPLES_PER_FRAME",
    "SAMPLE_RATE",
    "TIME_SCALE",
    "chunk_samples",
    "parse_directives",
]

# Engine time per second of audio; FAKE_ENGINE_TIME_SCALE overrides it (server side).
TIME_SCALE = float(os.environ.get("FAKE_ENGINE_TIME_SCALE", "0.02"))
SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 1920  # 12.5 frames/s at 24 kHz
FIRST_FRAMES = 8  # the fake's plan (see the module docstring)
REST_FRAMES = 16
DEFAULT_FRAMES = 50  # 4 s: chunks of 8, 16, 16 and 10 frames
DEFAULT_MAX_RUNNING = 64  # sglang_omni/models/qwen3_tts/engine_builder.py generation_defaults
DEFAULT_MAX_QUEUED = 64
# The built-in speakers of the Qwen3-TTS CustomVoice checkpoints (their config.json spk_id).
QWEN3_SPEAKERS = (
    "aiden", "dylan", "eric", "ono_anna", "ryan", "serena", "sohee", "uncle_fu", "vivian",
)  # fmt: skip


@dataclass(frozen=True)
class Directives:
    frames: int = DEFAULT_FRAMES
    first_delay_s: float = 0.0
    fail_after: int | None = None
    hold_s: float = 0.0
    sample_rate: int = SAMPLE_RATE


_DIRECTIVE = re.compile(r"\[(frames|first-delay|fail-after|hold|rate)=([0-9.]+)\]")


def parse_directives(text: str) -> Directives:
    """The schedule directives written in a request's text (see the module docstring)."""
    found = dict(_DIRECTIVE.findall(text))
    return Directives(
        frames=int(found.get("frames", DEFAULT_FRAMES)),
        first_delay_s=float(found.get("first-delay", 0.0)),
        fail_after=int(found["fail-after"]) if "fail-after" in found else None,
        hold_s=float(found.get("hold", 0.0)),
        sample_rate=int(found.get("rate", SAMPLE_RATE)),
    )


def chunk_samples(frames: int = DEFAULT_FRAMES) -> list[int]:
    """Samples of each chunk the fake pipeline streams for an utterance of `frames` frames."""
    sizes, left, size = [], frames, FIRST_FRAMES
    while left > 0:
        sizes.append(min(size, left))
        left -= sizes[-1]
        size = REST_FRAMES
    return [n * SAMPLES_PER_FRAME for n in sizes]
