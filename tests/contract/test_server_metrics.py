"""The bench job's `/metrics` scrape (`thetalker.pipeline.server_metrics`) against 0.30.0's own
metrics code (`vllm_omni/metrics/modality.py`), fed by 0.30.0's real serving layer with the
fake engine: what the scrape reads over a point is what the engine's schedule (`schedule.py`)
implies. The server runs the schedule at half real time (FAKE_ENGINE_TIME_SCALE=0.5), so a
chunk comes 0.5 s after each second of its audio; a `[first-delay=S]` adds S before the first.
The assertions are bounds the schedule sets (a chunk cannot come before its sleep ends), not
measured speeds."""

from __future__ import annotations

import http.client
import json
import time
import urllib.request
from urllib.parse import urlparse

import pytest

from tests.contract.test_bench import QWEN, QWEN_DEPLOY
from thetalker.pipeline.server_metrics import (
    PointScrape,
    counter_deltas,
    histogram_quantile,
    merge_histograms,
    parse_metrics,
    scrape,
)

SCALE = 0.5
FRAME_S = 1 / 12.5  # Qwen3: 12.5 codec frames a second


@pytest.fixture(scope="module")
def qwen(server_factory):
    return server_factory(QWEN, QWEN_DEPLOY, FAKE_ENGINE_TIME_SCALE=str(SCALE))


def body(text: str) -> bytes:
    return json.dumps(
        {
            "model": QWEN,
            "input": text,
            "voice": "ryan",
            "stream": True,
            "stream_format": "audio",
            "response_format": "pcm",
        }
    ).encode()


def speak(server, text: str) -> int:
    request = urllib.request.Request(
        server.base_url + "/v1/audio/speech",
        data=body(text),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return len(response.read())


def hist(data: dict, stem: str) -> dict:
    merged = merge_histograms(data["histograms"][stem])
    assert merged is not None, f"{stem}: not in the scrape"
    return merged


def cumulative(merged: dict) -> dict[str, float]:
    return {le: n for le, n in merged["buckets"]}


def counter(data: dict, stem: str, **labels: str) -> float:
    rows = data["counters"].get(stem) or []
    return sum(r["value"] for r in rows if all(r["labels"].get(k) == v for k, v in labels.items()))


def test_ttfp_underrun_and_continuity_match_the_schedule(qwen):
    scraper = PointScrape(qwen.base_url, interval_s=0.2)
    scraper.begin(time.perf_counter())
    # One chunk of 10 frames after 0.8 s more: first audio at >= 0.8 + 10 x 0.08 x 0.5 = 1.2 s;
    # a single chunk cannot run its player dry.
    assert speak(qwen, "[frames=10][first-delay=0.8] One chunk, late.") == 10 * 1920 * 2
    # 16 then 75 frames: the second chunk comes >= 75 x 0.08 x 0.5 = 3 s after the first,
    # whose 1.28 s of audio ran out long before: an underrun of >= 1.7 s.
    assert speak(qwen, "[frames=91] A slow stream.") == 91 * 1920 * 2
    scraper.end()
    data = scraper.result()
    assert data["available"] and data["prefix"] == "vllm_omni:"

    ttfp = hist(data, "audio_ttfp_s")
    assert ttfp["count"] == 2
    late = cumulative(ttfp)
    assert late["1.0"] <= 1  # the late one's first audio is past the 1 s bound...
    # ... and the slow stream's first chunk (16 frames: >= 0.64 s) past 0.5 s: none below.
    assert late["0.5"] == 0

    underrun = hist(data, "audio_underrun_s")
    assert underrun["count"] == 2
    below = cumulative(underrun)
    assert below["0.001"] == 1  # the one-chunk stream: no deficit at all
    assert below["1.0"] == 1  # the slow stream: more than a second
    assert counter(data, "audio_continuity_ok", threshold_ms="100") == 1
    assert counter(data, "speech_stream_completed") == 2
    assert counter(data, "speech_stream_aborted") == 0
    found = histogram_quantile(1.0, underrun["buckets"])
    assert found is not None and found.lower >= 1.0  # the slow one's bucket, stated


def test_a_stream_the_client_leaves_is_counted_aborted(qwen):
    before = scrape(qwen.base_url)
    url = urlparse(qwen.base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    conn.request("POST", "/v1/audio/speech", body(
        "[frames=166] A long one, left after its first chunk."
    ), {"Content-Type": "application/json"})  # fmt: skip
    response = conn.getresponse()
    assert response.status == 200
    assert response.read1(65536)  # the first chunk came...
    conn.close()  # ... and the client leaves
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        after = scrape(qwen.base_url)
        ended = after.of("speech_stream_aborted")
        if ended and sum(s.value for s in ended[1]) > sum(
            s.value for s in (before.of("speech_stream_aborted") or ("", []))[1]
        ):
            break
        time.sleep(0.2)
    counters, _ = counter_deltas(before, after)
    aborted = {r["labels"]["reason"]: r["value"] for r in counters["speech_stream_aborted"]}
    assert sum(aborted.values()) == 1
    assert set(k for k, v in aborted.items() if v) <= {"closed", "cancelled"}
    completed = sum(r["value"] for r in counters.get("speech_stream_completed", []))
    assert completed == 0


def test_the_prefix_variants_of_the_real_text_parse_alike(qwen):
    with urllib.request.urlopen(qwen.base_url + "/metrics", timeout=30) as response:
        text = response.read().decode()
    assert "vllm_omni:audio_ttfp_s_bucket" in text  # 0.30.0's own spelling
    real = parse_metrics(text)
    docs = parse_metrics(text.replace("vllm_omni:", "vllm:omni_"))
    assert docs.prefix == "vllm:omni_" and real.prefix == "vllm_omni:"
    assert docs.families == real.families
    assert {"audio_ttfp_s", "audio_underrun_s", "speech_stream_completed"} <= set(real.families)
