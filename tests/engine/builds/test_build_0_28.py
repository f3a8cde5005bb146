"""vllm-omni 0.28.0's real engine (tests/engine/builds/conftest.py) beside the tier's 0.30.0:
what a two-build comparison must surface rather than hide.

- Its deploy loader drops `model_runner` (0.30.0's key) without a word: the probe of
  thetalker.lifecycle.deploy_reads names it, and only it, for the tier's deploy file.
- It serves the tiny model with the tier's deploy file and CPU platform plugin unchanged, 1
  and 4 streams, chunked as the deploy file sets; and on /v1/audio/speech it serves none of
  the server-side stream figures: registered but never observed (audio_ttfp_s,
  audio_underrun_s), or not exported (speech_stream_completed), as the point's
  server_metrics.json shows them (thetalker.pipeline.server_metrics).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.engine.conftest import DEPLOY, ENGINE_ENV, engine_spec, speak
from tests.engine.test_engine_stream import check_chunks
from thetalker.lifecycle.deploy_reads import (
    NEVER_OBSERVED,
    NOT_EXPORTED,
    deploy_reads,
    unserved_figures,
)
from thetalker.lifecycle.launch import launch_server
from thetalker.pipeline.server_metrics import PointScrape

TEXT = "A short sentence for the older build to speak."


def test_0_28_does_not_read_model_runner(build_0_28: Path) -> None:
    found = deploy_reads(build_0_28, DEPLOY, ENGINE_ENV)
    assert found["reason"] is None
    assert found["unread"] == ["model_runner"]


def test_0_28_streams_and_serves_no_speech_figures(
    build_0_28: Path, tiny_model: Path, tmp_path: Path
) -> None:
    with launch_server(engine_spec(build_0_28, tiny_model, tmp_path / "server.log")) as server:
        assert server.serving_env["packages"]["vllm-omni"] == "0.28.0"
        speak(server.base_url, tiny_model, "A warm up sentence for the engine.")
        scrape = PointScrape(server.base_url)
        scrape.begin(time.perf_counter())
        check_chunks(speak(server.base_url, tiny_model, TEXT), "1 stream")
        with ThreadPoolExecutor(4) as pool:
            streams = list(pool.map(lambda _: speak(server.base_url, tiny_model, TEXT), range(4)))
        for i, sizes in enumerate(streams):
            check_chunks(sizes, f"4 streams, stream {i}")
        scrape.end()
        point = scrape.result()
    assert point["available"], point
    # The requests were answered and counted (vLLM's own finished-request counter)...
    done = sum(row["value"] for row in point["counters"]["requests_success"])
    assert done == 5, point["counters"]["requests_success"]
    # ...and none of the stream figures was observed on the speech route.
    assert unserved_figures(point) == {
        "audio_ttfp_s": NEVER_OBSERVED,
        "audio_underrun_s": NEVER_OBSERVED,
        "speech_stream_completed": NOT_EXPORTED,
    }
