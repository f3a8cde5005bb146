"""The stream scheduler and the piece planner, over `FakeEngine` (set timings, no Piper).

Under overload the two kinds of policy fail differently, as real streaming servers do: `fifo`
keeps each admitted stream's chunks back to back and lets first audio grow; the fair policies
(`round_robin`, `deadline`) start every stream at once and stretch every stream's gaps alike.
Assertions are on the order the one worker rendered the pieces in (the scheduler's own order,
logged at the backend, never a clock), so they hold on any machine, busy or idle.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from thetalker.server import scheduler as scheduler_module
from thetalker.server.app import make_app
from thetalker.server.engine import FakeEngine
from thetalker.server.pieces import (
    MAX_SENTENCE_CHARS,
    ChunkPlan,
    bound_sentence,
    piece_sizes,
    split_sentences,
)
from thetalker.server.settings import STOCK, DeployConfigError, engine_settings, load_deploy_config

STREAM = {"stream": True, "stream_format": "audio", "response_format": "pcm"}

# --- the piece planner --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "plan", "first", "sizes"),
    [
        (9, ChunkPlan(0, 0), True, [9]),
        (9, ChunkPlan(2, 3), True, [2, 3, 3, 1]),
        (9, ChunkPlan(2, 3, min_chunk_words=2), True, [2, 3, 4]),
        (9, ChunkPlan(2, 3), False, [3, 3, 3]),
        (9, ChunkPlan(0, 4), True, [4, 4, 1]),
        (9, ChunkPlan(1, 4, min_chunk_words=3), True, [3, 6]),
        (2, ChunkPlan(3, 8), True, [2]),
        (0, ChunkPlan(3, 8), True, []),
        (7, ChunkPlan(3, 0), True, [3, 4]),
    ],
)
def test_piece_sizes(n: int, plan: ChunkPlan, first: bool, sizes: list[int]) -> None:
    assert piece_sizes(n, plan, first) == sizes


def test_piece_sizes_never_below_the_minimum() -> None:
    for n in range(1, 40):
        for plan in (ChunkPlan(1, 2, 3), ChunkPlan(2, 5, 2), ChunkPlan(4, 4, 4)):
            got = piece_sizes(n, plan, True)
            assert sum(got) == n
            assert len(got) == 1 or min(got) >= plan.min_chunk_words, (n, plan, got)


def test_sentences_are_bounded_whatever_arrives() -> None:
    unpunctuated = " ".join(["word"] * 2000)
    parts = split_sentences(unpunctuated)
    assert all(len(p) <= MAX_SENTENCE_CHARS for p in parts)
    assert " ".join(parts) == unpunctuated
    one_word = "x" * 1000
    assert [len(p) for p in bound_sentence(one_word)] == [300, 300, 300, 100]
    assert split_sentences("One. Two! Three? Four") == ["One.", "Two!", "Three?", "Four"]


def test_deploy_streaming_keys_and_stock() -> None:
    stock = engine_settings()
    assert stock.chunks == ChunkPlan(0, 0, 1) and stock.scheduling_policy == "fifo"
    assert stock.max_active_streams == 0 and STOCK["chunk_words"] == 0


def test_deploy_streaming_keys_read_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text(
        "initial_chunk_words: 2\nchunk_words: 6\nmin_chunk_words: 2\n"
        "scheduling_policy: deadline\nmax_active_streams: 8\n"
    )
    settings = engine_settings(path)
    assert settings.chunks == ChunkPlan(2, 6, 2)
    assert (settings.scheduling_policy, settings.max_active_streams) == ("deadline", 8)
    for text, key in (
        ("scheduling_policy: lifo\n", "scheduling_policy"),
        ("chunk_words: -1\n", "chunk_words"),
        ("min_chunk_words: 0\n", "min_chunk_words"),
        ("max_active_streams: 1.5\n", "max_active_streams"),
    ):
        path.write_text(text)
        with pytest.raises(DeployConfigError, match=key):
            load_deploy_config(path)
    path.write_bytes(b"workers: \xff\xfe\n")
    with pytest.raises(DeployConfigError, match="UTF-8"):
        load_deploy_config(path)


# --- the scheduler ------------------------------------------------------------------------

N_WORDS = 8  # 8 words: 4 pieces of 2


def words(stream: int, n: int = N_WORDS) -> str:
    """The text of stream `stream`: its number in every word, so a piece names its stream."""
    return " ".join(f"s{stream}w{i}" for i in range(n))


class VirtualClock:
    """The scheduler's clock (`time.perf_counter`) moved only by the fake backend's set work
    times: the deadline policy then decides from those, not from how fast this machine runs
    them, so its order is the same on any machine."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> VirtualClock:
    virtual = VirtualClock()
    monkeypatch.setattr(scheduler_module, "time", virtual)  # the scheduler's clock only
    return virtual


def log_render_order(engine: FakeEngine, clock: VirtualClock | None = None) -> list[int]:
    """The stream of each piece in the order the backend rendered it (one worker: the
    scheduler's dispatch order); the list grows as the engine runs. With `clock`, each piece
    advances it by the work time the fake backend is set to (one worker: no overlap)."""
    order: list[int] = []
    render = engine.fake.render

    def logged(worker: Any, piece: Any, speed: float, index: int) -> bytes:
        order.append(int(str(piece.payload).split("w", 1)[0][1:]))  # "s3w0 s3w1" -> 3
        pcm = render(worker, piece, speed, index)
        if clock is not None:  # before the scheduler hears the piece is done
            fake = engine.fake
            clock.now += fake.first_delay_s if index == 0 else fake.sentence_delay_s
        return pcm

    engine.fake.render = logged  # type: ignore[method-assign]
    return order


def positions(order: list[int], n: int) -> list[list[int]]:
    """Per stream, the places of its pieces in the render order."""
    return [[i for i, s in enumerate(order) if s == k] for k in range(n)]


async def run_streams(
    engine: FakeEngine, n: int, clock: VirtualClock | None = None
) -> list[list[int]]:
    """Open `n` streams at once (stream k reads `words(k)`); per stream, the places of its
    pieces in the order the engine rendered them."""
    order = log_render_order(engine, clock)
    await engine.start()

    async def one(k: int) -> int:
        return len([pcm async for pcm in engine.stream(words(k))])

    try:
        received = await asyncio.gather(*(one(k) for k in range(n)))
    finally:
        await engine.close()
    places = positions(order, n)
    assert received == [len(p) for p in places]  # every rendered piece reached its stream
    return places


def overloaded(policy: str, **kw: Any) -> FakeEngine:
    # Each piece: 0.2 s of audio for 0.04 s of work on the only worker, 5x real time for one
    # stream; 8 streams need 1.6 workers: overload (the deadline policy reads these times).
    return FakeEngine(
        workers=1,
        chars_s=0.2 / len("s0w0 s0w1"),
        first_delay_s=0.04,
        sentence_delay_s=0.04,
        chunks=ChunkPlan(2, 2),
        scheduling_policy=policy,
        **kw,
    )


def gaps(times: list[int]) -> list[int]:
    return [b - a for a, b in zip(times, times[1:], strict=False)]


async def test_fifo_keeps_gaps_short_and_lets_first_audio_grow() -> None:
    streams = await run_streams(overloaded("fifo"), 8)
    assert all(len(t) == 4 for t in streams)
    # One stream at a time: each starts only after the one before it has ended.
    for before, after in zip(streams, streams[1:], strict=False):
        assert after[0] > before[-1]
    # So first audio grows with the queue: stream k waits for the 4 pieces of each before it.
    assert [t[0] for t in streams] == [4 * k for k in range(8)]
    assert all(gaps(t) == [1, 1, 1] for t in streams)  # back to back


@pytest.mark.parametrize("policy", ["round_robin", "deadline"])
async def test_fair_policy_starts_everyone_and_stretches_gaps_evenly(
    policy: str, clock: VirtualClock
) -> None:
    fair = await run_streams(overloaded(policy), 8, clock)
    fifo = await run_streams(overloaded("fifo"), 8, clock)
    # First audio stays low: every stream's first piece comes first, in arrival order, so
    # stream k waits for k pieces (under fifo, for 4k: the whole of each stream before it).
    assert [t[0] for t in fair] == list(range(8))
    assert [t[0] for t in fifo] == [4 * k for k in range(8)]
    if policy == "round_robin":  # its order needs no clock: one piece per stream in turn
        assert fair == [[k, k + 8, k + 16, k + 24] for k in range(8)]
    # Gaps (pieces of other streams in between) stretch alike for every stream, and are
    # longer than fifo's.
    mean_gaps = [statistics.mean(gaps(t)) for t in fair]
    assert max(mean_gaps) < 2 * min(mean_gaps)
    assert statistics.median(g for t in fair for g in gaps(t)) > 3 * statistics.median(
        g for t in fifo for g in gaps(t)
    )


async def test_admission_beyond_max_active_streams_waits() -> None:
    engine = overloaded("deadline", max_active_streams=2)
    order = log_render_order(engine)
    await engine.start()
    seen: list[tuple[int, int, int]] = []

    async def one(k: int) -> None:
        async for _pcm in engine.stream(words(k)):
            stats = engine.stats()
            seen.append((stats.active, stats.waiting, stats.pieces_queued))

    try:
        await asyncio.gather(*(one(k) for k in range(4)))
    finally:
        await engine.close()
    streams = positions(order, 4)
    assert max(active for active, _, _ in seen) == 2
    assert max(waiting for _, waiting, _ in seen) == 2
    # The two admitted first finish before either waiting one starts.
    first_two_end = min(streams[0][-1], streams[1][-1])
    assert min(streams[2][0], streams[3][0]) > first_two_end
    assert engine.stats().active == engine.stats().waiting == 0


async def test_cancelled_stream_frees_its_pieces_at_once() -> None:
    engine = FakeEngine(workers=1, chars_s=0.001, sentence_delay_s=0.05, chunks=ChunkPlan(1, 1))
    await engine.start()
    try:
        stream = engine.stream(" ".join(f"w{i}" for i in range(60)))
        await anext(stream)
        assert engine.stats().pieces_queued > 50
        await stream.aclose()
        stats = engine.stats()
        assert (stats.active, stats.pieces_queued, stats.sentences_queued) == (0, 0, 0)
        # The worker comes back once its piece (already running) is done.
        for _ in range(1000):  # a wait, not a limit: up to 10 s on a busy machine
            if engine.stats().workers_busy == 0:
                break
            await asyncio.sleep(0.01)
        assert engine.stats().workers_busy == 0
    finally:
        await engine.close()


async def test_sentences_arriving_over_time_are_one_stream() -> None:
    engine = FakeEngine(workers=1, chars_s=0.01, chunks=ChunkPlan(0, 0))
    await engine.start()

    async def arriving() -> Any:
        for sentence in ("One.", "Two words.", "Three more words."):
            await asyncio.sleep(0.02)
            yield sentence

    try:
        pieces = [p async for p in engine.stream_sentences(arriving())]
    finally:
        await engine.close()
    expected = [engine.sentence_pcm(s) for s in ("One.", "Two words.", "Three more words.")]
    assert pieces == expected


# --- through HTTP -------------------------------------------------------------------------


def metric_values(text: str) -> dict[str, float]:
    return {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


async def test_client_disconnect_frees_pieces_in_metrics(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    engine = FakeEngine(workers=1, chars_s=0.001, sentence_delay_s=0.05, chunks=ChunkPlan(1, 2))
    client = await aiohttp_client(
        make_app(engine, voices_dir=tmp_path), server_kwargs={"handler_cancellation": True}
    )
    long_sentence = " ".join(f"word{i}" for i in range(200))
    resp = await client.post("/v1/audio/speech", json={"input": long_sentence, **STREAM})
    await resp.content.readany()
    during = metric_values(await (await client.get("/metrics")).text())
    assert during["thetalker:streams_active"] == 1
    # The 200 words are cut into sentences of at most MAX_SENTENCE_CHARS, the first into pieces.
    assert during["thetalker:pieces_queued"] > 10
    assert during["thetalker:sentences_queued"] > 1
    resp.close()
    for _ in range(500):  # a wait, not a limit: up to 10 s on a busy machine
        after = metric_values(await (await client.get("/metrics")).text())
        if after["thetalker:streams_active"] == 0:
            break
        await asyncio.sleep(0.02)
    assert after["thetalker:streams_active"] == 0
    assert after["thetalker:pieces_queued"] == after["thetalker:sentences_queued"] == 0
    assert after["thetalker:requests_cancelled_total"] == 1


async def test_pieces_are_http_chunks(aiohttp_client: Any, tmp_path: Path) -> None:
    engine = FakeEngine(workers=1, chars_s=0.01, chunks=ChunkPlan(1, 3))
    client = await aiohttp_client(make_app(engine, voices_dir=tmp_path))
    text = "a b c d e f g. h i"
    async with client.post("/v1/audio/speech", json={"input": text, **STREAM}) as resp:
        chunks = []
        current = b""
        async for data, end in resp.content.iter_chunks():
            current += data
            if end:
                chunks.append(current)
                current = b""
    expected = [engine.sentence_pcm(p) for p in ("a", "b c d", "e f g.", "h i")]
    assert chunks == expected


async def test_api_key_guards_v1_but_not_health(aiohttp_client: Any, tmp_path: Path) -> None:
    app = make_app(FakeEngine(), voices_dir=tmp_path, api_key="s3cret")
    client = await aiohttp_client(app)
    body = {"input": "Hi.", "response_format": "pcm"}
    assert (await client.post("/v1/audio/speech", json=body)).status == 401
    wrong = {"Authorization": "Bearer nope"}
    assert (await client.post("/v1/audio/speech", json=body, headers=wrong)).status == 401
    assert (await client.get("/v1/models")).status == 401
    assert (await client.get("/v1/audio/voices")).status == 401
    right = {"Authorization": "Bearer s3cret"}
    assert (await client.post("/v1/audio/speech", json=body, headers=right)).status == 200
    assert (await client.get("/health")).status == 200
    assert (await client.get("/metrics")).status == 200


async def test_idle_and_half_sent_connections_are_closed() -> None:
    """A slowloris: connections that send nothing or half the headers are closed."""
    from aiohttp import web

    from thetalker.server.guard import ServerLimits, guard_connections

    limits = ServerLimits(idle_timeout_s=0.5, body_timeout_s=0.5, write_timeout_s=0.5)
    app = make_app(FakeEngine(), limits=limits)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    guard = asyncio.ensure_future(guard_connections(runner.server, limits, period_s=0.1))
    try:
        silent = await asyncio.open_connection("127.0.0.1", port)
        half = await asyncio.open_connection("127.0.0.1", port)
        half[1].write(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\n")
        body_slow = await asyncio.open_connection("127.0.0.1", port)
        body_slow[1].write(
            b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n{"
        )
        for reader, _writer in (silent, half):
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
        answer = await asyncio.wait_for(body_slow[0].read(), 5)
        assert answer.startswith(b"HTTP/1.1 408")
        # The server still serves.
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/health") as resp,
        ):
            assert resp.status == 200
    finally:
        guard.cancel()
        await runner.cleanup()


async def test_a_client_that_stops_reading_is_cut_after_the_write_timeout(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    from thetalker.server.guard import ServerLimits

    # 4 MB of audio a piece: the socket buffers fill long before the stream ends.
    engine = FakeEngine(workers=1, chars_s=10.0, sentence_delay_s=0.0, chunks=ChunkPlan(1, 1))
    limits = ServerLimits(write_timeout_s=0.5)
    client = await aiohttp_client(make_app(engine, voices_dir=tmp_path, limits=limits))
    body = json.dumps({"input": " ".join(["abcdefghij"] * 100), **STREAM}).encode()
    reader, writer = await asyncio.open_connection(client.host, client.port)
    writer.write(
        b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()  # ...and never read the answer
    for _ in range(100):
        await asyncio.sleep(0.1)
        values = metric_values(await (await client.get("/metrics")).text())
        if values["thetalker:requests_cancelled_total"] == 1:
            break
    assert values["thetalker:requests_cancelled_total"] == 1
    assert values["thetalker:streams_active"] == 0
    writer.close()
