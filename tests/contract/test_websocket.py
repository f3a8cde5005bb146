"""The agent mode (`thetalker-bench --protocol websocket`) against 0.30.0's own WebSocket
handler (`vllm_omni/entrypoints/openai/serving_speech_stream.py`, its real splitter and the
real Qwen3-TTS and VoxCPM2 adapters; only the engine is faked): what the records say is what
the handler and the fake engine's schedule (`schedule.py`) did."""

from __future__ import annotations

import pytest

from tests.contract.helpers import QWEN, QWEN_DEPLOY, QWEN_EXTRA, REF_TEXT, bench
from tests.contract.schedule import PROFILES, chunk_samples
from thetalker.lifecycle.deploy import resolve

# Each sentence says how long its audio is (the fake engine reads `[frames=N]`).
TEXTS = [
    "[frames=20] Hello there, this is the first sentence. [frames=30] And a second one.",
    "[frames=25] Another prompt, with a clause. [frames=10] It ends here!",
]
AGENT = ("--protocol", "websocket", "--text-pace", "400", "--split-granularity", "sentence")


@pytest.fixture(scope="module")
def qwen(server_factory):
    return server_factory(QWEN, QWEN_DEPLOY)


def qwen_bytes(frames: int) -> list[int]:
    return [2 * n for n in chunk_samples(PROFILES[QWEN], QWEN_EXTRA, frames)]


def test_sessions_match_the_handler_and_the_engine_schedule(qwen, tmp_path):
    records, summary, err = bench(
        qwen, tmp_path, TEXTS, *AGENT,
        "--speaker", "ryan", "--model", QWEN, "--concurrency", "2", "--requests", "4",
        "--warmup", "1",
    )  # fmt: skip
    assert summary["n_ok"] == 4, err
    assert summary["sample_rate"] == 24000 and summary["sample_rate_source"] == "auto"
    for r in records:
        assert r["ok"], r["error"]
        assert r["protocol"] == "websocket" and r["http_status"] == 101
        assert "".join(r["text_pieces"]) == r["text"]
        events = r["server_events"]
        starts = [e for e in events if e["type"] == "audio.start"]
        # 0.30.0's splitter cut the text into its two sentences, as the client sent it.
        assert " ".join(e["sentence_text"] for e in starts) == r["text"]
        assert [e["type"] for e in events] == ["audio.start", "audio.done"] * 2 + ["session.done"]
        assert events[-1]["total_sentences"] == 2
        frames = [int(e["sentence_text"].split("]")[0].split("=")[1]) for e in starts]
        # One binary frame per engine chunk, sentence after sentence.
        assert r["chunk_bytes"] == qwen_bytes(frames[0]) + qwen_bytes(frames[1])
        assert starts[1]["frames_before"] == len(qwen_bytes(frames[0]))
        dones = [e for e in events if e["type"] == "audio.done"]
        assert [d["total_bytes"] for d in dones] == [sum(qwen_bytes(f)) for f in frames]
        assert r["audio_s"] == pytest.approx(sum(frames) / 12.5)
        assert r["ttfa_first_text_s"] > 0 and len(r["sentence_lag_s"]) == 2
        assert all(lag > 0 for lag in r["sentence_lag_s"])


def test_a_wrong_model_is_a_refused_session(qwen, tmp_path):
    records, summary, _ = bench(
        qwen, tmp_path, TEXTS[:1], *AGENT,
        "--speaker", "ryan", "--model", "nope", "--requests", "1", "--warmup", "0",
        "--sample-rate", "24000",
    )  # fmt: skip
    assert summary["n_ok"] == 0
    error = records[0]["error"]
    assert error["type"] == "session_refused"
    assert "nope" in error["message"]


def test_an_unknown_voice_fails_each_sentence_and_the_session_goes_on(qwen, tmp_path):
    records, summary, _ = bench(
        qwen, tmp_path, TEXTS[:1], *AGENT,
        "--speaker", "joe", "--requests", "1", "--warmup", "0", "--sample-rate", "24000",
    )  # fmt: skip
    r = records[0]
    assert r["error"]["type"] == "ws_error" and "Invalid voice" in r["error"]["message"]
    types = [e["type"] for e in r["server_events"]]
    assert types == ["audio.start", "error", "audio.done"] * 2 + ["session.done"]
    assert r["chunk_bytes"] == []


def test_an_engine_failure_mid_sentence_keeps_the_audio_before_it(qwen, tmp_path):
    text = "[frames=20] First sentence is fine. [frames=100] [fail-after=1] Second one fails."
    records, _, _ = bench(
        qwen, tmp_path, [text], *AGENT,
        "--speaker", "ryan", "--requests", "1", "--warmup", "0", "--sample-rate", "24000",
    )  # fmt: skip
    r = records[0]
    assert r["error"]["type"] == "ws_error"
    error = next(e for e in r["server_events"] if e["type"] == "error")
    assert error["partial_audio"] is True
    assert error["message"].startswith("Generation failed for utterance 0, sentence 1")
    assert r["chunk_bytes"] == qwen_bytes(20) + qwen_bytes(100)[:1]
    assert r["server_events"][-1]["type"] == "session.done"


def test_voxcpm2s_rate_comes_from_the_probe_not_audio_start(server_factory, ref_clip, tmp_path):
    server = server_factory("openbmb/VoxCPM2", resolve("voxcpm2").path)
    records, summary, err = bench(
        server, tmp_path, TEXTS[:1], *AGENT,
        "--task-type", "Base", "--ref-audio", str(ref_clip), "--ref-text", REF_TEXT,
        "--requests", "1", "--warmup", "0", "--deploy", "voxcpm2",
    )  # fmt: skip
    assert summary["n_ok"] == 1, err
    r = records[0]
    starts = [e for e in r["server_events"] if e["type"] == "audio.start"]
    assert len(starts) == 2
    # audio.start's raw message says 24000 (0.30.0's nominal rate); the record is 48 kHz.
    assert {e["sample_rate"] for e in starts} == {24000}
    assert r["sample_rate"] == 48000 and summary["sample_rate"] == 48000
    extra = {"vae_decode_every": 3, "audio_emit_every": 1}
    want = [2 * n for f in (20, 30) for n in chunk_samples(PROFILES["openbmb/VoxCPM2"], extra, f)]
    assert r["chunk_bytes"] == want
    assert r["audio_s"] == pytest.approx(sum(want) / (2 * 48000))


SPLIT_CASES = [
    ["Hello", " Dr.", " Smith,", " it", " costs", " 3.50.", " Next", " one!", " Wait...", '" ok'],
    ["One, two; three.", " Four? Five!", " e.g. six", " J. R. R. Tolkien wrote.", " End"],
    ["No", " terminator", " at", " all"],
    ["A.B. c. ", "d", "... (e).", " f"],
    ["你好。", "今天天气", "很好，", "对吗？", "「是的。」", "好"],
    ["...no. way", " U.S. troops", " 1,000 and 2.5", "x. Done."],
]


def test_the_local_servers_splitter_follows_0300s(contract_python, tmp_path):
    """thetalker.server.units against 0.30.0's own SpeechTextSplitter, piece by piece."""
    import json
    import subprocess

    from thetalker.server.units import UnitSplitter

    script = (
        "import json, sys\n"
        "from vllm_omni.entrypoints.openai.speech_text_splitter import SpeechTextSplitter\n"
        "out = {}\n"
        "for g in ('none', 'sentence', 'clause'):\n"
        "    out[g] = []\n"
        "    for case in json.load(open(sys.argv[1])):\n"
        "        s = SpeechTextSplitter(g)\n"
        "        out[g].append([s.feed(p) for p in case] + [s.flush()])\n"
        "json.dump(out, open(sys.argv[2], 'w'))\n"
    )
    cases, answers = tmp_path / "cases.json", tmp_path / "answers.json"
    cases.write_text(json.dumps(SPLIT_CASES))
    run = subprocess.run(
        [str(contract_python), "-c", script, str(cases), str(answers)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    upstream = json.loads(answers.read_text())
    for granularity, results in upstream.items():
        for case, want in zip(SPLIT_CASES, results, strict=True):
            s = UnitSplitter(granularity)
            got = [s.feed(p) for p in case] + [s.flush()]
            assert got == want, (granularity, case)
