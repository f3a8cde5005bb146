"""What the fake SGLang-Omni engine emits, shared by the server (sglang venv) and the tests.

Pure Python, no third-party imports: `fake_engine_server.py` imports it to drive the fake
pipeline, and the tests import it to compute the records they expect.

Qwen3-TTS on sglang-omni 0.1.9 (sglang-omni.md): 24 kHz, one codec frame is 80 ms (1920
samples). The fake plays the chunk plan the real engine streams, as the engine tier observes
it (tests/engine/sglang/test_sglang_stream.py checks the real engine against CHUNK_RAMP and
CHUNK_STRIDE, and tests/contract_sglang/test_bench.py holds the fake to the same
constants): chunks of 1, 2 and 4 frames (`DEFAULT_QWEN3_TTS_STREAM_CHUNK_RAMP`), then 8 frames
each (the follow-up stride of `models/qwen3_tts/streaming_vocoder.py`), the last one shorter.

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
    "CHUNK_RAMP",
    "CHUNK_STRIDE",
    "DEFAULT_FRAMES",
    "DEFAULT_MAX_QUEUED",
    "DEFAULT_MAX_RUNNING",
    "Directives",
    "QUEUE_FULL_MESSAGE",
    "QWEN3_SPEAKERS",
    "SAMPLES_PER_FRAME",
    "SAMPLE_RATE",
    "TIME_SCALE",
    "chunk_frames",
    "chunk_samples",
    "parse_directives",
]

# Engine time per second of audio; FAKE_ENGINE_TIME_SCALE overrides it (server side).
TIME_SCALE = float(os.environ.get("FAKE_ENGINE_TIME_SCALE", "0.02"))
SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 1920  # 12.5 frames/s at 24 kHz
CHUNK_RAMP = (1, 2, 4)  # the real engine's first chunks, in frames (see the docstring)
CHUNK_STRIDE = 8  # then every chunk, in frames, the last one shorter
DEFAULT_FRAMES = 50  # 4 s: chunks of 1, 2, 4, 8, 8, 8, 8, 8 and 3 frames
QUEUE_FULL_MESSAGE = "The request queue is full."  # sglang_omni/admission.py QueueFullError
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


def chunk_frames(frames: int) -> list[int]:
    """Frames of each chunk the engine streams for an utterance of `frames` frames: the
    ramp, then strides, each cut to what is left."""
    sizes, left, index = [], frames, 0
    while left > 0:
        size = CHUNK_RAMP[index] if index < len(CHUNK_RAMP) else CHUNK_STRIDE
        sizes.append(min(size, left))
        left -= sizes[-1]
        index += 1
    return sizes


def chunk_samples(frames: int = DEFAULT_FRAMES) -> list[int]:
    """Samples of each chunk the fake pipeline streams for an utterance of `frames` frames."""
    return [n * SAMPLES_PER_FRAME for n in chunk_frames(frames)]
