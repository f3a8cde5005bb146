"""What only SGLang-Omni's real engine shows, on one engine for the module (started by
TheTalker's `sglang-omni` launcher from the venv, tests/engine/sglang/conftest.py):

- the stream's chunk plan as the engine emits it: 1, 2 and 4 frames, then 8 each, the last
  one shorter; the same constants the contract tier's fake engine plays
  (tests/contract_sglang/schedule.py), so the fake cannot drift from the engine;
- TheTalker's client streams at several concurrencies, and the engine batches the streams
  (its own scheduler log: `#running-req` above 1 only when streams overlap);
- records reconcile with what was sent: one per request, each prompt's text, every chunk a
  whole number of frames and no request longer than its `max_new_tokens`;
- a burst past `max_running_requests + max_queued_requests` is refused with the engine's
  503 `The request queue is full.`, recorded as `overloaded`, and never more than the ceiling
  served.

No length is assumed (random weights may sample the codec end at any frame), and no speed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.contract_sglang.schedule import (
    CHUNK_RAMP,
    CHUNK_STRIDE,
    QUEUE_FULL_MESSAGE,
    chunk_frames,
)
from tests.engine.sglang.conftest import (
    FRAME_BYTES,
    MAX_NEW_TOKENS,
    MAX_QUEUED,
    MAX_RUNNING,
    RATE,
    SPEAKER,
    speak,
)
from thetalker.client import BenchOptions, run_benchmark
from thetalker.data.prompts import load_prompts
from thetalker.data.record_reads import read_records

PROMPTS = Path(__file__).resolve().parents[3] / "prompts" / "seed_tts_eval_en_100.jsonl"
_RUNNING = re.compile(r"#running-req: (\d+)")


def check_plan(sizes: list[int], where: str) -> None:
    """Whole frames, in the engine's plan for the stream's own length."""
    assert sizes and all(s % FRAME_BYTES == 0 for s in sizes), f"{where}: {sizes}"
    frames = [s // FRAME_BYTES for s in sizes]
    assert sum(frames) <= MAX_NEW_TOKENS, f"{where}: longer than max_new_tokens: {frames}"
    assert frames == chunk_frames(sum(frames)), f"{where}: chunks of {frames} frames"


def test_the_constants_are_the_engines_plan():
    assert (CHUNK_RAMP, CHUNK_STRIDE) == ((1, 2, 4), 8)
    assert chunk_frames(40) == [1, 2, 4, 8, 8, 8, 8, 1]


def test_chunks_come_as_the_engine_plans_them(sglang_engine):
    for text in ("The light danced across the lake.", "Do you know what they're up to?"):
        reply = speak(sglang_engine.base_url, text)
        assert reply.status == 200, reply.body[:500]
        check_plan(reply.chunks, text)


def log_running(log: Path, start: int) -> list[int]:
    """`#running-req` of every scheduler log line written after byte `start`."""
    with open(log, "rb") as handle:
        handle.seek(start)
        text = handle.read().decode(errors="replace")
    return [int(n) for n in _RUNNING.findall(text)]


def run_point(engine, concurrency: int, requests: int, out: Path, **more) -> list[dict]:
    """One point of TheTalker's client against the engine: no warm-up, a stated rate."""
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
        max_new_tokens=MAX_NEW_TOKENS,
        server="sglang-omni",
        **more,
    )
    run_benchmark(opts, load_prompts(PROMPTS)[20:60], out)
    return list(read_records(out / "records.jsonl"))


@pytest.mark.parametrize("concurrency", [1, 4])
def test_the_client_streams_batched_and_the_records_reconcile(sglang_engine, tmp_path, concurrency):
    requests = 2 * concurrency
    start = sglang_engine.log_path.stat().st_size
    records = run_point(sglang_engine, concurrency, requests, tmp_path)
    running = log_running(sglang_engine.log_path, start)

    given = {p.text for p in load_prompts(PROMPTS)[20:60]}
    assert sorted(r["request_index"] for r in records) == list(range(requests))
    assert all(r["text"] in given and not r["warmup"] for r in records)
    for record in records:
        assert record["ok"], record.get("error")
        assert record["sample_rate"] == RATE
        check_plan(record["chunk_bytes"], f"request {record['request_index']}")

    assert running, "the engine logged no scheduler step"
    if concurrency == 1:
        assert max(running) <= 1, f"one stream at a time, yet the engine ran {max(running)}"
    else:
        assert max(running) >= 2, f"four streams, yet the engine never ran two at once: {running}"
    assert max(running) <= MAX_RUNNING


def test_a_burst_past_the_ceiling_is_refused_with_503(sglang_engine, tmp_path):
    ceiling = MAX_RUNNING + MAX_QUEUED
    burst = 2 * ceiling
    records = run_point(sglang_engine, burst, burst, tmp_path, max_error_rate=1.0)
    assert len(records) == burst
    served = [r for r in records if r["ok"]]
    refused = [r for r in records if not r["ok"]]
    for record in served:
        check_plan(record["chunk_bytes"], f"request {record['request_index']}")
    for record in refused:
        assert record["http_status"] == 503, record["error"]
        assert record["error"]["type"] == "overloaded", record["error"]
        assert QUEUE_FULL_MESSAGE in record["error"]["message"], record["error"]
    # The coordinator admits at most running + queued at once: the rest of the burst is
    # refused. (Its scheduler may refuse more of a burst: requests that arrive together wait
    # in its queue, which holds MAX_QUEUED, until a step moves them to running.)
    assert 1 <= len(served) <= ceiling, [r["http_status"] for r in records]
    assert len(refused) >= burst - ceiling
    # The engine is fine afterwards.
    assert speak(sglang_engine.base_url, "One more sentence after the burst.").status == 200


def test_the_servers_own_warm_up_was_capped_by_the_engine(sglang_engine):
    # SGLANG_MAX_NEW_TOKENS_LIMIT reached the scheduler: the built-in warm-up, which asks for
    # sglang-omni's default 2048 frames, was capped to the tier's MAX_NEW_TOKENS.
    log = sglang_engine.log_path.read_text(errors="replace")
    assert "Server warmup of 1 request(s) finished" in log
    cap = f"to SGLANG_MAX_NEW_TOKENS_LIMIT={MAX_NEW_TOKENS} (requested: 2048)"
    assert cap in log, "the warm-up ran uncapped"
