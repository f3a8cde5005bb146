"""One scheduler for every active stream on the worker pool.

A stream is an async source of sentences (a whole request's text today; text arriving in pieces
from a WebSocket later) and a queue of audio out. The scheduler cuts each sentence into pieces
(`pieces.ChunkPlan`) on a worker and synthesizes one piece at a time per stream, so a worker is
never held by a stream between pieces: whenever a worker is free it takes the next piece of the
stream the policy picks.

Policies (`POLICIES`):
- `fifo`: the oldest stream first. A stream keeps its worker from its first piece to its last
  (the server's stock behaviour, a request holds a worker until it ends); under overload first
  audio grows and every admitted stream plays without a gap.
- `round_robin`: the stream served longest ago first, a new stream before all of them.
- `deadline`: earliest playback deadline first. A started stream's deadline is the moment its
  player runs dry (first audio + the audio it has been given); a new stream's is its arrival,
  so it is served at once. Under overload every stream's gaps stretch alike and first audio
  stays low.

`max_active_streams` (0: no limit) is admission: beyond it a stream waits, in arrival order,
until an active one ends. Cancelling a stream (its consumer leaves) drops its queued sentences
and pieces at once; a piece already on a worker finishes and is thrown away.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from thetalker.server.pieces import ChunkPlan

__all__ = ["POLICIES", "Piece", "Backend", "StreamObserver", "Scheduler", "SchedulerStats"]

POLICIES = ("fifo", "round_robin", "deadline")

_DONE = object()


@dataclass(frozen=True)
class Piece:
    """One unit of synthesis: backend-specific `payload` (phoneme ids, text), its word count,
    and where it sits in its sentence (edges of a sentence keep their silence)."""

    payload: Any
    words: int
    sentence_start: bool = True
    sentence_end: bool = True


class Backend(Protocol):
    """What a synthesizer gives the scheduler; `split` and `render` run on a worker thread."""

    sample_rate: int

    def load_worker(self) -> Any: ...

    def split(self, worker: Any, sentence: str, plan: ChunkPlan, first: bool) -> list[Piece]: ...

    def render(self, worker: Any, piece: Piece, speed: float, index: int) -> bytes: ...


class StreamObserver(Protocol):
    """Who hears each stream's timings (the server's /metrics, `prom.ServerMetrics`)."""

    def observe_queue_wait(self, seconds: float) -> None:
        """Arrival to its first piece on a worker (admission wait included)."""

    def observe_generation(self, seconds: float) -> None:
        """Its first piece on a worker to its last piece done (streams that finish)."""


@dataclass(frozen=True)
class SchedulerStats:
    """Gauges for /metrics."""

    active: int
    waiting: int
    pieces_queued: int
    sentences_queued: int
    workers_busy: int


@dataclass(eq=False)
class _Stream:
    seq: int
    arrival: float
    speed: float
    plan: ChunkPlan
    sentences: deque[str]
    out: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    pieces: deque[Piece] = field(default_factory=deque)
    source_done: bool = True
    in_flight: bool = False
    cancelled: bool = False
    retired: bool = False
    split_any: bool = False
    rendered: int = 0
    first_audio_at: float | None = None
    started_at: float | None = None  # its first piece went to a worker
    audio_s: float = 0.0
    last_tick: int = -1
    feeder: asyncio.Task[None] | None = None

    def has_work(self) -> bool:
        return not self.in_flight and bool(self.pieces or self.sentences)

    def finished(self) -> bool:
        return self.source_done and not self.in_flight and not self.pieces and not self.sentences


class Scheduler:
    """Streams in, audio pieces out, `workers` worker threads each with its own state."""

    def __init__(
        self,
        backend: Backend,
        workers: int,
        policy: str = "fifo",
        max_active_streams: int = 0,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"scheduling_policy must be one of {', '.join(POLICIES)}: {policy!r}")
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.backend = backend
        self.workers = workers
        self.policy = policy
        self.max_active_streams = max_active_streams
        self._executor: ThreadPoolExecutor | None = None
        self._idle: list[Any] = []
        self._active: list[_Stream] = []
        self._waiting: deque[_Stream] = deque()
        self._seq = 0
        self._tick = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self.observer: StreamObserver | None = None

    # --- lifetime -------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self._executor is not None

    async def start(self) -> None:
        """Build every worker's state side by side, in the worker threads."""
        self._loop = asyncio.get_running_loop()
        self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="synth")
        states = await asyncio.gather(
            *(
                self._loop.run_in_executor(self._executor, self.backend.load_worker)
                for _ in range(self.workers)
            )
        )
        self._idle = list(states)

    async def close(self) -> None:
        executor, self._executor = self._executor, None
        for stream in [*self._active, *self._waiting]:
            self._cancel(stream)
        if executor is not None:
            # A running piece ends on its own; wait off the event loop.
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)

    # --- gauges ---------------------------------------------------------------------------

    def stats(self) -> SchedulerStats:
        return SchedulerStats(
            active=len(self._active),
            waiting=len(self._waiting),
            pieces_queued=sum(len(s.pieces) for s in self._active),
            sentences_queued=sum(len(s.sentences) for s in (*self._active, *self._waiting)),
            workers_busy=self.workers - len(self._idle) if self.ready else 0,
        )

    # --- streams --------------------------------------------------------------------------

    async def stream(
        self,
        sentences: Iterable[str] | AsyncIterator[str],
        plan: ChunkPlan,
        speed: float = 1.0,
    ) -> AsyncIterator[bytes]:
        """PCM pieces of `sentences` in order, each as soon as it is synthesized."""
        if self._executor is None or self._loop is None:
            raise RuntimeError("engine not started")
        self._seq += 1
        stream = _Stream(self._seq, time.perf_counter(), speed, plan, deque())
        if isinstance(sentences, AsyncIterator):
            stream.source_done = False
            stream.feeder = asyncio.ensure_future(self._feed(stream, sentences))
        else:
            stream.sentences.extend(s for s in sentences if s.strip())
        self._admit(stream)
        try:
            while True:
                item = await stream.out.get()
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self._cancel(stream)

    async def _feed(self, stream: _Stream, source: AsyncIterator[str]) -> None:
        try:
            async for sentence in source:
                if sentence.strip():
                    stream.sentences.append(sentence)
                    self._dispatch()
        except Exception as exc:  # the source failed: the stream ends with its error
            stream.out.put_nowait(exc)
        finally:
            stream.source_done = True
            self._maybe_finish(stream)

    def _admit(self, stream: _Stream) -> None:
        if self.max_active_streams and len(self._active) >= self.max_active_streams:
            self._waiting.append(stream)
        else:
            self._active.append(stream)
        self._maybe_finish(stream)
        self._dispatch()

    def _retire(self, stream: _Stream) -> None:
        if stream.retired:
            return
        stream.retired = True
        if stream in self._active:
            self._active.remove(stream)
        elif stream in self._waiting:
            self._waiting.remove(stream)
        while self._waiting and (
            not self.max_active_streams or len(self._active) < self.max_active_streams
        ):
            self._active.append(self._waiting.popleft())

    def _cancel(self, stream: _Stream) -> None:
        """The consumer left (or the stream ended): free everything it still holds."""
        if stream.feeder is not None and not stream.feeder.done():
            stream.feeder.cancel()
        if not stream.retired:
            stream.cancelled = True
            stream.sentences.clear()
            stream.pieces.clear()
            self._retire(stream)
            self._dispatch()

    def _maybe_finish(self, stream: _Stream) -> None:
        if not stream.retired and stream.finished():
            if self.observer is not None and stream.started_at is not None:
                self.observer.observe_generation(time.perf_counter() - stream.started_at)
            stream.out.put_nowait(_DONE)
            self._retire(stream)
            self._dispatch()

    # --- dispatch -------------------------------------------------------------------------

    def _priority(self, stream: _Stream) -> tuple[float, int]:
        if self.policy == "round_robin":
            return (stream.last_tick, stream.seq)
        if self.policy == "deadline":
            if stream.first_audio_at is None:
                return (stream.arrival, stream.seq)
            return (stream.first_audio_at + stream.audio_s, stream.seq)
        return (stream.seq, 0)

    def _dispatch(self) -> None:
        executor, loop = self._executor, self._loop
        if executor is None or loop is None:
            return
        while self._idle:
            ready = [s for s in self._active if s.has_work()]
            if not ready:
                return
            stream = min(ready, key=self._priority)
            worker = self._idle.pop()
            stream.in_flight = True
            if stream.started_at is None:  # the end of its wait in the queue
                stream.started_at = time.perf_counter()
                if self.observer is not None:
                    self.observer.observe_queue_wait(stream.started_at - stream.arrival)
            self._tick += 1
            stream.last_tick = self._tick
            sentence = None if stream.pieces else stream.sentences.popleft()
            piece = stream.pieces.popleft() if stream.pieces else None
            first = not stream.split_any
            stream.split_any = True
            index = stream.rendered
            stream.rendered += 1
            try:
                future = loop.run_in_executor(
                    executor, self._job, worker, stream, sentence, piece, first, index
                )
            except RuntimeError:  # the executor is shutting down
                self._idle.append(worker)
                return
            future.add_done_callback(lambda f, w=worker, s=stream: self._job_done(w, s, f))

    def _job(
        self,
        worker: Any,
        stream: _Stream,
        sentence: str | None,
        piece: Piece | None,
        first: bool,
        index: int,
    ) -> tuple[list[Piece], bytes]:
        """On a worker thread: split the next sentence when needed, synthesize one piece."""
        rest: list[Piece] = []
        if piece is None:
            assert sentence is not None
            pieces = self.backend.split(worker, sentence, stream.plan, first)
            if not pieces:
                return [], b""
            piece, rest = pieces[0], pieces[1:]
        return rest, self.backend.render(worker, piece, stream.speed, index)

    def _job_done(self, worker: Any, stream: _Stream, future: asyncio.Future[Any]) -> None:
        self._idle.append(worker)
        stream.in_flight = False
        if not stream.cancelled and not stream.retired:
            if future.cancelled():
                stream.out.put_nowait(RuntimeError("engine stopped"))
                self._retire(stream)
            elif (exc := future.exception()) is not None:
                stream.out.put_nowait(exc)
                self._retire(stream)
            else:
                rest, pcm = future.result()
                stream.pieces.extend(rest)
                if pcm:
                    if stream.first_audio_at is None:
                        stream.first_audio_at = time.perf_counter()
                    stream.audio_s += len(pcm) / (2 * self.backend.sample_rate)
                    stream.out.put_nowait(pcm)
                self._maybe_finish(stream)
        self._dispatch()
