"""The embedded server's vllm-omni families (`thetalker.server.prom`), after known requests,
read back the way the bench job reads every server: `/metrics` over HTTP, parsed by
`thetalker.pipeline.server_metrics` (prometheus_client's parser)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from thetalker.pipeline.server_metrics import merge_histograms, parse_metrics
from thetalker.server.app import make_app
from thetalker.server.engine import FakeEngine

STREAM = {"stream": True, "stream_format": "audio", "response_format": "pcm"}


async def speech(client: Any, text: str, **body: Any) -> bytes:
    resp = await client.post("/v1/audio/speech", json={"input": text, **STREAM, **body})
    assert resp.status == 200
    return await resp.read()


async def scrape(client: Any):
    return parse_metrics(await (await client.get("/metrics")).text())


def total(snapshot, stem: str, **labels: str) -> float:
    _, samples = snapshot.of(stem) or ("", [])
    return sum(
        s.value for s in samples if all(dict(s.labels).get(k) == v for k, v in labels.items())
    )


def histogram(snapshot, stem: str) -> dict:
    kind, samples = snapshot.of(stem)
    assert kind == "histogram"
    buckets = [[dict(s.labels)["le"], s.value] for s in samples if s.suffix == "_bucket"]
    count = next(s.value for s in samples if s.suffix == "_count")
    return {"buckets": buckets, "count": count}


async def test_families_after_known_requests(aiohttp_client: Any, tmp_path) -> None:
    # One sentence a piece; a slow engine between pieces: 0.3 s per sentence of 12 ms audio.
    engine = FakeEngine(workers=1, chars_s=0.001, first_delay_s=0.0, sentence_delay_s=0.3)
    client = await aiohttp_client(
        make_app(engine, voices_dir=tmp_path), server_kwargs={"handler_cancellation": True}
    )
    await speech(client, "One sentence only.")  # one chunk: nothing to run dry
    await speech(client, "First one. Second one. Third one.")  # 0.3 s gaps: an underrun
    resp = await client.post("/v1/audio/speech", json={"input": "Quick.", "response_format": "wav"})
    assert resp.status == 200 and await resp.read()  # a whole file: not a stream
    snap = await scrape(client)

    assert total(snap, "speech_stream_completed") == 2
    assert total(snap, "speech_stream_aborted") == 0
    ttfp = histogram(snap, "audio_ttfp_s")
    assert ttfp["count"] == 3  # every request's first audio, file included
    underrun = merge_histograms(
        [{"labels": {}, "buckets": histogram(snap, "audio_underrun_s")["buckets"]}]
    )
    assert underrun["buckets"][-1][1] == 2  # the two streams
    # The slow stream starved its player for longer than 0.2 s, the other not at all.
    below = {le: n for le, n in underrun["buckets"]}
    assert below["0.001"] == 1 and below["0.2"] == 1
    assert total(snap, "audio_continuity_ok", threshold_ms="100") == 1
    assert histogram(snap, "request_queue_wait_s")["count"] == 3
    assert histogram(snap, "stage_gen_time_s")["count"] == 3
    assert histogram(snap, "e2e_request_latency_s")["count"] == 3
    assert total(snap, "requests_success", finished_reason="stop") == 3
    assert total(snap, "num_requests_running") == 0
    assert total(snap, "num_requests_waiting") == 0


async def test_abort_and_failure_are_counted_by_reason(aiohttp_client: Any, tmp_path) -> None:
    engine = FakeEngine(workers=1, chars_s=0.01, sentence_delay_s=0.2)
    client = await aiohttp_client(
        make_app(engine, voices_dir=tmp_path), server_kwargs={"handler_cancellation": True}
    )
    long_text = " ".join(f"Sentence {i}." for i in range(200))
    resp = await client.post("/v1/audio/speech", json={"input": long_text, **STREAM})
    await resp.content.readany()
    resp.close()  # the client leaves mid-stream
    for _ in range(200):
        snap = await scrape(client)
        if total(snap, "speech_stream_aborted"):
            break
        await asyncio.sleep(0.05)
    assert total(snap, "speech_stream_aborted") == 1
    assert total(snap, "speech_stream_completed") == 0
    assert total(snap, "requests_failed") == 1

    failing = FakeEngine(workers=1, fail_after=1)
    client = await aiohttp_client(make_app(failing, voices_dir=tmp_path / "b"))
    resp = await client.post("/v1/audio/speech", json={"input": "One. Two. Three.", **STREAM})
    with pytest.raises(aiohttp.ClientPayloadError):  # a cut raw body: an engine failure
        await resp.read()
    snap = await scrape(client)
    assert total(snap, "speech_stream_aborted", reason="error") == 1
    assert total(snap, "requests_failed", reason="stage_error") == 1
    assert histogram(snap, "audio_ttfp_s")["count"] == 1  # its first audio did go out


async def test_queue_wait_is_the_scheduler_queue(aiohttp_client: Any, tmp_path) -> None:
    # One worker, two streams at once: the second waits in the queue for the first.
    engine = FakeEngine(workers=1, chars_s=0.001, first_delay_s=0.3, sentence_delay_s=0.0)
    client = await aiohttp_client(make_app(engine, voices_dir=tmp_path))
    await asyncio.gather(speech(client, "First."), speech(client, "Second."))
    wait = histogram(await scrape(client), "request_queue_wait_s")
    below = {le: n for le, n in wait["buckets"]}
    assert wait["count"] == 2
    assert below["0.2"] <= 1  # the second waited for the first's whole 0.3 s synthesis
