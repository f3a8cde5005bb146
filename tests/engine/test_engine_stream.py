"""What only a real engine shows, on one engine for the module (started by TheTalker's
launcher from the engine venv, tests/engine/conftest.py):

- chunks come as the engine's async-chunk scheduler makes them, sized as the deploy file sets
  (`initial_codec_chunk_frames: 1`, then `codec_chunk_frames: 25`, the rest at the end);
- TheTalker's client streams at several concurrencies, every request in more than one chunk;
- concurrency changes batching, and the engine's own metrics say so (vLLM's per-step token
  histogram of the talker stage: one token a step at one stream, several at four);
- `/metrics`, from the stages' real timings, reconciles with the client (issue 23's table:
  thetalker.report.server.reconcile): no request lost, the audio the server counted is the
  audio the client received, its first audio inside the client's.

No length is assumed (random weights may sample the codec EOS at any frame past the
deploy's `min_tokens: 2`), and no speed.
"""

from __future__ import annotations

import re
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.engine.conftest import FRAME_BYTES, PROMPTS, RATE, SPEAKER, speak
from thetalker.client import BenchOptions, run_benchmark
from thetalker.data.prompts import load_prompts
from thetalker.data.record_reads import read_records
from thetalker.pipeline.server_metrics import PointScrape
from thetalker.report.server import reconcile

FIRST_FRAMES = 1  # the deploy file's initial_codec_chunk_frames
CHUNK_FRAMES = 25  # its codec_chunk_frames


def check_chunks(sizes: list[int], where: str) -> None:
    """The stream's chunks as the deploy file sets them: one frame, then 25-frame chunks,
    then what is left (1 to 25 frames), each a whole number of frames."""
    assert len(sizes) > 1, f"{where}: one chunk ({sizes}): not streamed"
    assert sizes[0] == FIRST_FRAMES * FRAME_BYTES, f"{where}: first chunk {sizes}"
    for size in sizes[1:-1]:
        assert size == CHUNK_FRAMES * FRAME_BYTES, f"{where}: middle chunk {sizes}"
    assert sizes[-1] % FRAME_BYTES == 0 and 0 < sizes[-1] <= CHUNK_FRAMES * FRAME_BYTES, sizes


def test_chunks_come_as_the_deploy_file_sets(engine):
    for text in ("The light danced across the lake.", "Do you know what they're up to?"):
        check_chunks(speak(engine.base_url, engine.model, text), text)


_STEP = re.compile(
    r'^vllm:iteration_tokens_total_bucket\{le="([^"]+)",[^}]*stage="0"[^}]*\} (\S+)$', re.M
)


def talker_steps(base_url: str) -> dict[str, float]:
    """vLLM's histogram of tokens per engine step of stage 0 (the talker): cumulative
    counts by bucket bound. TheTalker's scrape keeps only the vllm_omni: families."""
    with urllib.request.urlopen(base_url + "/metrics", timeout=30) as response:
        text = response.read().decode()
    steps = {le: float(n) for le, n in _STEP.findall(text)}
    assert steps, "no vllm:iteration_tokens_total of stage 0 in /metrics"
    return steps


def batched_decode_steps(before: dict[str, float], after: dict[str, float]) -> float:
    """Steps of 2 to 8 tokens in between: several streams' decode steps run as one (every
    prefill here is longer than 8 tokens: the prompt's role and codec tags alone are 9)."""
    return (after["8.0"] - before["8.0"]) - (after["1.0"] - before["1.0"])


def window(scraper: PointScrape) -> Callable[[str, float], None]:
    def mark(phase: str, t_origin: float) -> None:
        scraper.begin(t_origin) if phase == "begin" else scraper.end()

    return mark


def run_point(engine, concurrency: int, requests: int, out: Path) -> tuple[list[dict], dict]:
    """One point of TheTalker's client, its scored window scraped as a bench job does; no
    warm-up and a stated rate (no probe), so every request the server sees is scored."""
    opts = BenchOptions(
        base_url=engine.base_url,
        model=str(engine.model),
        speaker=SPEAKER,
        language="English",
        concurrency=concurrency,
        requests=requests,
        warmup=0,
        sample_rate=RATE,
        timeout_s=300.0,
        max_error_rate=0.0,
    )
    scraper = PointScrape(engine.base_url, interval_s=0.5)
    prompts = load_prompts(PROMPTS)[20:60]  # sentences of 5 to 20 words
    run_benchmark(opts, prompts, out, scored_window=window(scraper))
    return list(read_records(out / "records.jsonl")), scraper.result()


@pytest.mark.parametrize("concurrency", [1, 4])
def test_the_client_streams_and_the_metrics_reconcile(engine, tmp_path, concurrency):
    requests = 2 * concurrency
    before = talker_steps(engine.base_url)
    records, server = run_point(engine, concurrency, requests, tmp_path)
    after = talker_steps(engine.base_url)

    assert len(records) == requests
    for record in records:
        assert record["ok"], record.get("error")
        check_chunks(record["chunk_bytes"], f"request {record['request_index']}")

    batched = batched_decode_steps(before, after)
    if concurrency == 1:
        assert batched == 0, "one stream at a time, yet a decode step carried several tokens"
    else:
        assert batched > 0, "four streams, yet every talker step decoded one token"

    assert server["available"] and server["prefix"] == "vllm_omni:"
    row = reconcile(records, [server])
    assert row["lost"] == 0 and row["server_streams_completed"] == requests
    assert not row["server_streams_aborted"]  # no series at all while none was aborted
    assert row["server_ttfp_n"] == requests
    # The server's first audio lies inside the client's request: the gap is transport.
    assert row["gap_mean_s"] is not None and row["gap_mean_s"] >= 0
    # The audio the stages counted is the audio that arrived, sample for sample.
    samples = sum(sum(r["chunk_bytes"]) for r in records) // 2
    frames = sum(r["value"] for r in server["counters"]["audio_frames"])
    assert frames == samples


_RUNNING = re.compile(r'^vllm:num_requests_running\{[^}]*stage="0"[^}]*\} (\S+)$', re.M)


def test_admission_never_runs_more_than_max_num_seqs(engine, tmp_path):
    """Ten streams against `max_num_seqs: 8`: the talker stage's own running gauge, sampled
    through the point, never shows more than 8; all ten are served (the rest queue)."""
    peaks: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            with urllib.request.urlopen(engine.base_url + "/metrics", timeout=30) as response:
                peaks.extend(float(v) for v in _RUNNING.findall(response.read().decode()))
            stop.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        records, _ = run_point(engine, 10, 10, tmp_path)
    finally:
        stop.set()
        sampler.join(timeout=60)
    assert len(records) == 10 and all(r["ok"] for r in records)
    assert peaks and max(peaks) <= 8
