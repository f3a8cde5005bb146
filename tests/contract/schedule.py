"""What the fake engine emits, shared by the server (contract venv) and the tests (main env).

Pure Python, no third-party imports: `fake_engine_server.py` imports it to drive the engine,
and the tests import it to compute the records they expect.

Each model's chunks have its real frame size and rate (vllm-omni-030.md, "Chunking" and
"Sample rates"):

- Qwen3-TTS: 12.5 codec frames/s, 1920 samples a frame at 24 kHz; a first chunk of the
  deploy's `initial_codec_chunk_frames`, then `codec_chunk_frames` each.
- VoxCPM2: 48 kHz, small steps: one chunk every `vae_decode_every` steps. The samples of one
  step come from the checkpoint's patch size and VAE rates, which the wheel does not hold;
  VOXCPM2_SAMPLES_PER_STEP is an assumption (80 ms).
- MOSS-TTS (delay model): 12.5 frames/s at 24 kHz, the whole utterance as one chunk at the end.
- OmniVoice: one non-streamed body at 24 kHz.

A chunk is emitted after the time its audio lasts, times TIME_SCALE (so a test does not wait
real time). Directives in the request text change one request's schedule:
`[frames=N]` the utterance's length in frames (steps for VoxCPM2), `[first-delay=S]` S more
seconds before the first chunk, `[fail-after=K]` the engine fails after K chunks (0: before
any audio).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

__all__ = [
    "DEFAULT_FRAMES",
    "Directives",
    "ModelProfile",
    "PROFILES",
    "QWEN3_SPEAKERS",
    "TIME_SCALE",
    "chunk_samples",
    "parse_directives",
]

# Engine time per second of audio; FAKE_ENGINE_TIME_SCALE overrides it (server side).
TIME_SCALE = float(os.environ.get("FAKE_ENGINE_TIME_SCALE", "0.02"))
DEFAULT_FRAMES = 166  # Qwen3 with the project's deploy: 16 + 75 + 75 frames (13.28 s)
VOXCPM2_SAMPLES_PER_STEP = 3840  # an assumption: not derivable from the wheel (see above)
# The built-in speakers of the Qwen3-TTS CustomVoice checkpoints, as 0.30.0 lists them.
QWEN3_SPEAKERS = (
    "aiden", "dylan", "eric", "ono_anna", "ryan", "serena", "sohee", "uncle_fu", "vivian",
)  # fmt: skip
QWEN3_LANGUAGES = (
    "chinese", "english", "german", "italian", "portuguese", "spanish", "japanese", "korean",
    "french", "russian",
)  # fmt: skip


@dataclass(frozen=True)
class ModelProfile:
    """One served model as the fake engine plays it."""

    model_id: str
    pipeline: str  # the key of vllm_omni.config.pipeline_registry.OMNI_PIPELINES
    stock_deploy: str  # the bundled file in vllm_omni/deploy/
    sample_rate: int
    kind: str  # qwen3 | voxcpm2 | moss | omnivoice
    checkpoint_task: str | None = None  # Qwen3: the checkpoint's tts_model_type


PROFILES: dict[str, ModelProfile] = {
    p.model_id: p
    for p in (
        ModelProfile(
            "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice",
            "qwen3_tts",
            "qwen3_tts.yaml",
            24000,
            "qwen3",
            "custom_voice",
        ),
        ModelProfile(
            "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice",
            "qwen3_tts",
            "qwen3_tts.yaml",
            24000,
            "qwen3",
            "custom_voice",
        ),
        ModelProfile(
            "Qwen/Qwen3-TTS-12Hz-1.7B-Base", "qwen3_tts", "qwen3_tts.yaml", 24000, "qwen3", "base"
        ),
        ModelProfile("openbmb/VoxCPM2", "voxcpm2", "voxcpm2.yaml", 48000, "voxcpm2"),
        ModelProfile("OpenMOSS-Team/MOSS-TTS", "moss_tts_delay", "moss_tts.yaml", 24000, "moss"),
        ModelProfile("k2-fsa/OmniVoice", "omnivoice", "omnivoice.yaml", 24000, "omnivoice"),
    )  # fmt: skip
}


@dataclass(frozen=True)
class Directives:
    frames: int = DEFAULT_FRAMES
    first_delay_s: float = 0.0
    fail_after: int | None = None


_DIRECTIVE = re.compile(r"\[(frames|first-delay|fail-after)=([0-9.]+)\]")


def parse_directives(text: str) -> Directives:
    """The schedule directives written in a request's text (see the module docstring)."""
    found = dict(_DIRECTIVE.findall(text))
    return Directives(
        frames=int(found.get("frames", DEFAULT_FRAMES)),
        first_delay_s=float(found.get("first-delay", 0.0)),
        fail_after=int(found["fail-after"]) if "fail-after" in found else None,
    )


def _split(total: int, first: int, rest: int) -> list[int]:
    sizes, left = [], total
    size = first if first > 0 else rest
    while left > 0:
        sizes.append(min(size, left))
        left -= sizes[-1]
        size = rest
    return sizes


def chunk_samples(profile: ModelProfile, extra: dict, frames: int) -> list[int]:
    """Samples of each chunk the engine emits for an utterance of `frames` frames (steps).

    `extra` is the deploy's connector `extra` (Qwen3, MOSS) or the stage-0 VoxCPM2 runtime
    config (`engine_extras.hf_overrides.voxcpm2_runtime_config`).
    """
    if profile.kind == "qwen3":
        per_frame = profile.sample_rate * 2 // 25  # 12.5 frames/s: 1920 at 24 kHz
        first = int(extra.get("initial_codec_chunk_frames", 1))
        rest = int(extra.get("codec_chunk_frames", 25))
        return [n * per_frame for n in _split(frames, first, rest)]
    if profile.kind == "voxcpm2":
        every = max(int(extra.get("vae_decode_every", 1)), int(extra.get("audio_emit_every", 1)))
        return [n * VOXCPM2_SAMPLES_PER_STEP for n in _split(frames, every, every)]
    # MOSS (one chunk at the end) and OmniVoice (one body): the whole utterance at once.
    return [frames * (profile.sample_rate * 2 // 25)]
