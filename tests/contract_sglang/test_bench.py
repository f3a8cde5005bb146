"""`thetalker-bench --server sglang-omni` against sglang-omni 0.1.9's real HTTP layer (the real
`sgl-omni serve` with only its pipeline faked), records checked against the fake pipeline's
schedule (`schedule.py`): chunk count and sizes, the rate from `X-Sample-Rate`, and the type
each failure is filed under (a cut body, the SSE `error` event with its message, a synthesis
failure before audio, a full queue)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.contract_sglang.schedule import DEFAULT_FRAMES, chunk_samples
from tests.support.paths import REPO
from thetalker.data.record_reads import read_records

SERVER = ("--server", "sglang-omni")
TEXTS = ["Hello there, this is the first sentence.", "A second one, a bit longer than that."]


def expected_bytes(frames: int = DEFAULT_FRAMES) -> list[int]:
    return [2 * n for n in chunk_samples(frames)]


def prompts(tmp: Path, texts: list[str]) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "prompts.jsonl"
    with path.open("w") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"sample_id": f"s{i}", "text": text}) + "\n")
    return path


def bench_cli(server, tmp: Path, texts: list[str], *args: str) -> subprocess.CompletedProcess:
    """`thetalker-bench --server sglang-omni`, run as a user would (main environment)."""
    return subprocess.run(
        [sys.executable, "-m", "thetalker.cli.bench", *SERVER, "--base-url", server.base_url,
         "--texts-jsonl", str(prompts(tmp, texts)), "--out-dir", str(tmp / "out"),
         "--max-error-rate", "1.0", "--timeout", "60", *args],
        capture_output=True, text=True, timeout=240, cwd=REPO,
    )  # fmt: skip


def bench(server, tmp: Path, texts: list[str], *args: str) -> tuple[list[dict], dict, str]:
    result = bench_cli(server, tmp, texts, *args)
    out = tmp / "out"
    assert (out / "summary.json").is_file(), result.stderr[-2000:]
    records = list(read_records(out / "records.jsonl"))
    summary = json.loads((out / "summary.json").read_text())
    return records, summary, result.stderr


@pytest.fixture(scope="module")
def qwen(server_factory):
    return server_factory()


@pytest.mark.parametrize("stream", ["audio", "sse"])
def test_closed_loop_records_match_the_engine_schedule(qwen, tmp_path, stream):
    records, summary, err = bench(
        qwen, tmp_path, TEXTS,
        "--speaker", "ryan", "--concurrency", "2", "--requests", "4", "--warmup", "1",
        "--stream-format", stream,
    )  # fmt: skip
    # The rate came from the X-Sample-Rate header of one streamed request.
    assert summary["sample_rate"] == 24000 and summary["sample_rate_source"] == "auto"
    assert summary["n_ok"] == 4, err
    for r in records:
        assert r["ok"], r["error"]
        assert r["chunk_bytes"] == expected_bytes(), "one record chunk per pipeline chunk"
        # The real engine's plan (tests/engine/sglang/test_sglang_stream.py observes it).
        assert [n // 3840 for n in r["chunk_bytes"]] == [1, 2, 4, 8, 8, 8, 8, 8, 3]
        assert r["sample_rate"] == 24000 and r["http_status"] == 200
        assert r["audio_s"] == pytest.approx(DEFAULT_FRAMES / 12.5)


def test_open_loop_sends_on_schedule_and_records_the_lag(qwen, tmp_path):
    records, summary, err = bench(
        qwen, tmp_path, TEXTS,
        "--speaker", "ryan", "--request-rate", "20", "--requests", "4", "--warmup", "0",
    )  # fmt: skip
    assert summary["n_ok"] == 4, err
    assert all(r["schedule_lag_s"] is not None and r["schedule_lag_s"] >= 0 for r in records)
    assert all(r["chunk_bytes"] == expected_bytes() for r in records)


def test_streaming_wav_is_refused_before_anything_is_sent(qwen, tmp_path):
    result = bench_cli(qwen, tmp_path, TEXTS, "--speaker", "ryan", "--response-format", "wav")
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert "response" in line and "wav" in line and "sglang-omni" in line and "pcm" in line
    assert not (tmp_path / "out" / "records.jsonl").exists()


@pytest.mark.parametrize(
    ("stream", "after", "error_type", "status", "kept"),
    [
        # After the first audio the 200 is out: the raw body is cut, SSE ends with
        # {"type": "error", ...} whose message the record keeps.
        ("audio", 1, "truncated", 200, 1),
        ("sse", 2, "sse_error", 200, 2),
        # Before it, the route has sent no header yet: a real 500 (a synthesis failure).
        ("audio", 0, "http_status", 500, 0),
        ("sse", 0, "http_status", 500, 0),
    ],
)
def test_pipeline_failure_is_filed_by_what_the_client_saw(
    qwen, tmp_path, stream, after, error_type, status, kept
):
    texts = [f"A request that fails on the way. [fail-after={after}]"]
    records, summary, _ = bench(
        qwen, tmp_path, texts,
        "--speaker", "ryan", "--requests", "2", "--warmup", "0", "--stream-format", stream,
        "--sample-rate", "24000", "--trust-sample-rate",  # a rate request would fail first
    )  # fmt: skip
    assert summary["n_ok"] == 0 and summary["errors_by_type"] == {error_type: 2}
    for r in records:
        assert r["error"]["type"] == error_type and r["http_status"] == status
        assert r["chunk_bytes"] == expected_bytes()[:kept], "the audio before the cut is kept"
        if error_type != "truncated":  # the server's own words survive into the record
            assert f"scheduled failure after {after} chunks" in r["error"]["message"]


def test_slow_first_chunk_comes_last_in_first_audio_order(qwen, tmp_path):
    texts = ["Quick one.", "Slow to start. [first-delay=1.0]", "Quick again."]
    records, summary, err = bench(
        qwen, tmp_path, texts,
        "--speaker", "ryan", "--requests", "3", "--warmup", "0", "--seed", "1",
        "--sample-rate", "24000", "--trust-sample-rate",
    )  # fmt: skip
    assert summary["n_ok"] == 3, err
    slow = [r for r in records if "first-delay" in r["text"]]
    quick = [r for r in records if "first-delay" not in r["text"]]
    # An ordering with a 1 s floor, not a speed figure: sglang-omni holds the headers until
    # the first audio, so the delayed request's first audio cannot come before its delay.
    assert all(s["ttfa_s"] >= 1.0 for s in slow)
    assert min(s["ttfa_s"] for s in slow) > max(q["ttfa_s"] for q in quick)


def test_a_stream_at_another_rate_than_its_header_says_for_the_run_fails(qwen, tmp_path):
    texts = ["This one comes at 16 kHz. [rate=16000]"]
    records, summary, _ = bench(
        qwen, tmp_path, texts,
        "--speaker", "ryan", "--requests", "1", "--warmup", "0",
        "--sample-rate", "24000", "--trust-sample-rate",
    )  # fmt: skip
    error = records[0]["error"]
    assert error["type"] == "content_type"
    assert "X-Sample-Rate: 16000 Hz" in error["message"] and "24000" in error["message"]


def test_auto_rate_reads_the_header_of_a_16k_stream(qwen, tmp_path):
    records, summary, err = bench(
        qwen, tmp_path, ["All at 16 kHz. [rate=16000]"],
        "--speaker", "ryan", "--requests", "1", "--warmup", "0",
    )  # fmt: skip
    assert summary["sample_rate"] == 16000 and summary["n_ok"] == 1, err
    assert records[0]["audio_s"] == pytest.approx(sum(expected_bytes()) / 2 / 16000)


def test_unknown_voice_stops_at_the_sample_rate_request(qwen, tmp_path):
    result = bench_cli(qwen, tmp_path, TEXTS, "--speaker", "joe", "--requests", "1")
    assert result.returncode == 2, result.stderr
    assert "Unknown voice 'joe'" in result.stderr and "ryan" in result.stderr


@pytest.fixture(scope="module")
def small_queue(server_factory):
    # 1 running + 1 queued: the third request in flight is refused (sglang-omni.md, Serving).
    return server_factory(
        "--tts_engine.engine.max_running_requests", "1",
        "--tts_engine.engine.max_queued_requests", "1",
    )  # fmt: skip


def test_a_full_queue_is_overloaded_not_a_synthesis_failure(small_queue, tmp_path):
    # The dotted flags reached the engine stage's config, as the real CLI reads them.
    assert "FAKE_ENGINE_CEILING=2" in small_queue.log()
    # Three requests sent at once, each held 4 s after its audio: two are admitted, one is
    # refused, whichever arrives last (a count, not an order).
    texts = ["Held a while. [hold=4]"]
    records, summary, err = bench(
        small_queue, tmp_path, texts,
        "--speaker", "ryan", "--concurrency", "3", "--requests", "3", "--warmup", "0",
        "--sample-rate", "24000", "--trust-sample-rate",
    )  # fmt: skip
    assert summary["n_ok"] == 2 and summary["errors_by_type"] == {"overloaded": 1}, err
    refused = [r for r in records if not r["ok"]]
    assert refused[0]["http_status"] == 503 and refused[0]["chunk_bytes"] == []
    assert refused[0]["error"]["message"] == "The request queue is full."
    assert all(r["chunk_bytes"] == expected_bytes() for r in records if r["ok"])


@pytest.fixture(scope="module")
def ref_clip(tmp_path_factory) -> Path:
    import numpy as np

    from thetalker.data.wavio import write_wav

    path = tmp_path_factory.mktemp("clip") / "ref.wav"
    t = np.arange(int(16000 * 2.0)) / 16000
    pcm = (0.3 * np.sin(2 * np.pi * 180 * t) * 32767).astype("<i2").tobytes()
    write_wav(path, pcm, 16000)
    return path


@pytest.fixture(scope="module")
def qwen_base(server_factory):
    return server_factory(model_id="Qwen/Qwen3-TTS-12Hz-1.7B-Base")


def test_base_with_an_inline_clip_then_a_registered_voice(qwen_base, ref_clip, tmp_path):
    clone = ("--task-type", "Base", "--ref-audio", str(ref_clip), "--ref-text", "A tone.")
    records, summary, err = bench(
        qwen_base, tmp_path / "inline", TEXTS, *clone, "--requests", "2", "--warmup", "0"
    )
    assert summary["n_ok"] == 2, err
    assert all(r["chunk_bytes"] == expected_bytes() for r in records)
    records, summary, err = bench(
        qwen_base, tmp_path / "register", TEXTS, *clone, "--register-voice", "narrator",
        "--requests", "2", "--warmup", "0",
    )  # fmt: skip
    assert summary["n_ok"] == 2, err
    # sglang-omni keeps the upload in its voice store, the folder the launcher gave it.
    store = qwen_base.voices_dir
    assert any("narrator" in p.name.lower() for p in store.rglob("*")), list(store.rglob("*"))
