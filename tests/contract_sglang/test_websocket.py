"""The agent mode (`thetalker-bench --server sglang-omni --protocol websocket`) against
sglang-omni 0.1.9's own WebSocket handler (`sglang_omni/serve/speech_ws.py`, its real
sentence splitter; only the pipeline is faked): what the records say is what the handler
and the fake pipeline's schedule (`schedule.py`) did."""

from __future__ import annotations

import pytest

from tests.contract_sglang.schedule import parse_directives
from tests.contract_sglang.test_bench import bench, bench_cli, expected_bytes

# Each sentence says how long its audio is (the fake pipeline reads `[frames=N]`).
TEXTS = [
    "[frames=20] Hello there, this is the first sentence. [frames=30] And a second one.",
    "[frames=25] Another prompt, with a clause. [frames=10] It ends here!",
]
AGENT = ("--protocol", "websocket", "--text-pace", "400")


@pytest.fixture(scope="module")
def qwen(server_factory):
    return server_factory()


@pytest.mark.parametrize("granularity", ["sentence", "clause"])
def test_sessions_match_the_handler_and_the_schedule(qwen, tmp_path, granularity):
    records, summary, err = bench(
        qwen, tmp_path, TEXTS, *AGENT, "--split-granularity", granularity,
        "--speaker", "ryan", "--concurrency", "2", "--requests", "4", "--warmup", "1",
    )  # fmt: skip
    assert summary["n_ok"] == 4, err
    assert summary["sample_rate"] == 24000
    for r in records:
        assert r["ok"], r["error"]
        assert r["protocol"] == "websocket" and r["http_status"] == 101
        assert "".join(r["text_pieces"]) == r["text"]
        starts = [e for e in r["server_events"] if e["type"] == "audio.start"]
        assert " ".join(e["sentence_text"] for e in starts) == r["text"]
        # The handler's splitter cut each text into 2 sentences, or 3 clauses (a comma in
        # the first sentence); a unit without a directive plays the default length.
        assert len(starts) == (2 if granularity == "sentence" else 3)
        frames = [parse_directives(e["sentence_text"]).frames for e in starts]
        want = [b for f in frames for b in expected_bytes(f)]
        assert r["chunk_bytes"] == want, "one binary frame per pipeline chunk, unit by unit"
        dones = [e for e in r["server_events"] if e["type"] == "audio.done"]
        assert [d["total_bytes"] for d in dones] == [sum(expected_bytes(f)) for f in frames]
        assert r["audio_s"] == pytest.approx(sum(frames) / 12.5)
        assert r["server_events"][-1]["type"] == "session.done"
        assert r["server_events"][-1]["total_sentences"] == len(starts)


def test_split_granularity_none_is_refused_before_a_session_opens(qwen, tmp_path):
    result = bench_cli(
        qwen, tmp_path, TEXTS, *AGENT, "--split-granularity", "none", "--speaker", "ryan"
    )
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert "split-granularity" in line or "split_granularity" in line
    assert "sentence, clause" in line
    assert not (tmp_path / "out" / "records.jsonl").exists()
