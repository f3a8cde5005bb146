"""`PointScrape` over real HTTP servers on loopback: the embedded server's families as deltas
over a point and gauge series on the run's clock; servers with no metrics TheTalker reads
(no /metrics, other families only, nothing listening) written as "no server metrics"."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

from aiohttp import web

from thetalker.pipeline.server_metrics import PointScrape
from thetalker.server.app import make_app
from thetalker.server.engine import FakeEngine

STREAM = {"stream": True, "stream_format": "audio", "response_format": "pcm"}


async def point(client: Any, n: int) -> None:
    for _ in range(n):
        resp = await client.post("/v1/audio/speech", json={"input": "Hello there.", **STREAM})
        assert resp.status == 200 and await resp.read()


async def test_deltas_cover_the_point_only(aiohttp_client: Any, tmp_path) -> None:
    client = await aiohttp_client(make_app(FakeEngine(workers=1), voices_dir=tmp_path))
    base = str(client.make_url("/"))
    await point(client, 2)  # before the point: the server's lifetime, not the point's
    scraper = PointScrape(base, interval_s=0.05)
    origin = time.perf_counter()
    await asyncio.to_thread(scraper.begin, origin)
    await point(client, 3)
    await asyncio.sleep(0.2)  # a few gauge samples
    await asyncio.to_thread(scraper.end)
    data = scraper.result()
    assert data["available"] and data["prefix"] == "thetalker:"
    assert data["counters"]["speech_stream_completed"][0]["value"] == 3
    (ttfp,) = data["histograms"]["audio_ttfp_s"]
    assert ttfp["count"] == 3 and ttfp["buckets"][-1] == ["+Inf", 3.0]
    (running,) = data["gauges"]["num_requests_running"]
    times = [t for t, _ in running["series"]]
    assert len(times) >= 2 and times == sorted(times)
    assert data["t_before_s"] <= times[0] and times[-1] <= data["t_after_s"]
    assert data["resets"] == []


async def test_servers_without_metrics_are_no_server_metrics(aiohttp_client: Any) -> None:
    async def other(_: web.Request) -> web.Response:
        return web.Response(text="# TYPE sglang:num_running gauge\nsglang:num_running 1\n")

    bare = await aiohttp_client(web.Application())
    app = web.Application()
    app.router.add_get("/metrics", other)
    sglang = await aiohttp_client(app)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    cases = {
        str(bare.make_url("/")): "HTTP 404",
        str(sglang.make_url("/")): "no vllm_omni:, vllm:omni_ or thetalker: families",
        closed: "GET /metrics failed",
    }
    for base, reason in cases.items():
        scraper = PointScrape(base, timeout_s=2)
        await asyncio.to_thread(scraper.begin, time.perf_counter())
        await asyncio.to_thread(scraper.end)
        data = scraper.result()
        assert data["available"] is False and reason in data["reason"], data
        assert scraper.note(["vllm-omni", "serve", "m", "--omni", "--log-stats"])["log_stats"]
        assert scraper.note(["python", "-m", "thetalker.server"])["log_stats"] is None


def test_a_server_kind_without_metrics_is_not_asked() -> None:
    from thetalker.pipeline.serve_and_sweep import metrics_path

    assert metrics_path("nari") is None and metrics_path("external") is None
    assert metrics_path("vllm-omni") == metrics_path("local") == "/metrics"
    scraper = PointScrape("http://127.0.0.1:9", path=None)  # nothing listens there either
    scraper.begin(time.perf_counter())
    scraper.end()
    assert scraper.result() == {
        "version": 1,
        "available": False,
        "reason": "the server kind exports no /metrics",
    }
