"""Issue 50's per-point figures from a real run: the client against the scripted server on
loopback, which refuses some requests for load (503 queue full) and streams the others.
The refusals are counted with their latency, each streamed request's time to 2 s of audio is
the arrival of the chunk that completes it, and the streams in flight (Little's law) stay
within the client's own count."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.scripted_server import Script, ScriptedServer
from thetalker.client import BenchOptions, run_benchmark
from thetalker.data.prompts import Prompt
from thetalker.data.records import read_records
from thetalker.metrics import is_rejection


def test_a_server_that_refuses_for_load_is_counted_and_streams_get_their_usable_start(
    scripted_server: ScriptedServer, tmp_path: Path
) -> None:
    # 24 kHz: 48,000 bytes a second. 1 s, 1 s, then 0.5 s of audio: 2 s with the second chunk.
    scripted_server.default = Script(chunks=((0.0, 48_000), (0.05, 48_000), (0.05, 24_000)))
    scripted_server.add_script("full", Script(mode="http_error", status=503, message="queue full"))
    texts = ["full a", "ok b", "ok c", "full d", "ok e", "ok f"]
    prompts = [Prompt(sample_id=f"p{i}", text=t) for i, t in enumerate(texts)]
    opts = BenchOptions(
        base_url=scripted_server.base_url,
        requests=len(texts),
        warmup=0,
        sample_rate=24000,
        concurrency=2,
    )
    summary = run_benchmark(opts, prompts, tmp_path)
    records = list(read_records(tmp_path / "records.jsonl"))
    refused = [r for r in records if is_rejection(r)]
    assert len(refused) == summary["n_rejected"] == 2
    assert summary["rejected_wall_s"]["n"] == 2
    assert summary["time_to_usable_audio_s"]["n"] == 4 and summary["n_short_of_usable_audio"] == 0
    for r in records:
        if r["ok"]:  # the second chunk completes 2 s; never before the first byte
            assert r["ttfa_s"] <= r["chunk_arrival_s"][1]
    usable = sorted(r["chunk_arrival_s"][1] for r in records if r["ok"])
    assert summary["time_to_usable_audio_s"]["p50"] == pytest.approx((usable[1] + usable[2]) / 2)
    assert 0 < summary["sessions_in_flight"] <= summary["max_in_flight"] <= 2
