"""`thetalker-bench` against 0.30.0's real speech layer, records checked against the fake
engine's schedule (`schedule.py`): chunk count and sizes, sample rate, first-audio order, and
the type each failure is filed under."""

from __future__ import annotations

import pytest

from tests.contract.conftest import thetalker_cli
from tests.contract.helpers import (
    QWEN,
    QWEN_BASE,
    QWEN_DEPLOY,
    REF_TEXT,
    bench,
    expected_bytes,
    prompts,
)
from tests.contract.schedule import PROFILES, chunk_samples
from thetalker.lifecycle.deploy import resolve


@pytest.fixture(scope="module")
def qwen(server_factory):
    return server_factory(QWEN, QWEN_DEPLOY)


TEXTS = ["Hello there, this is the first sentence.", "A second one, a bit longer than that."]


@pytest.mark.parametrize("stream", ["audio", "sse"])
@pytest.mark.parametrize("fmt", ["pcm", "wav"])
def test_closed_loop_records_match_the_engine_schedule(qwen, tmp_path, stream, fmt):
    records, summary, err = bench(
        qwen, tmp_path, TEXTS,
        "--speaker", "ryan", "--model", QWEN, "--concurrency", "2", "--requests", "4",
        "--warmup", "1", "--stream-format", stream, "--response-format", fmt,
    )  # fmt: skip
    assert summary["sample_rate"] == 24000 and summary["sample_rate_source"] == "auto"
    assert summary["n_ok"] == 4, err
    for r in records:
        assert r["ok"], r["error"]
        assert r["chunk_bytes"] == expected_bytes(QWEN), "one record chunk per engine chunk"
        assert r["sample_rate"] == 24000
        assert r["audio_s"] == pytest.approx(166 / 12.5)
        assert r["http_status"] == 200


def test_open_loop_sends_on_schedule_and_records_the_lag(qwen, tmp_path):
    records, summary, err = bench(
        qwen, tmp_path, TEXTS,
        "--speaker", "ryan", "--request-rate", "20", "--requests", "4", "--warmup", "0",
    )  # fmt: skip
    assert summary["concurrency"] is None and summary["request_rate"] == 20
    assert summary["n_ok"] == 4, err
    assert all(r["schedule_lag_s"] is not None and r["schedule_lag_s"] >= 0 for r in records)
    assert all(r["chunk_bytes"] == expected_bytes(QWEN) for r in records)


@pytest.mark.parametrize(
    ("stream", "after", "error_type", "kept"),
    [
        # 0.30.0 sends the 200 before the first audio: a failing engine cuts the body (raw)
        # or ends the stream with a speech.audio.error event (SSE), never a JSON 500.
        ("audio", 1, "truncated", 1),
        ("sse", 1, "sse_error", 1),
        ("audio", 0, "truncated", 0),
        ("sse", 0, "sse_error", 0),
    ],
)
def test_engine_failure_is_filed_by_what_the_client_saw(
    qwen, tmp_path, stream, after, error_type, kept
):
    texts = [f"A request that fails on the way. [fail-after={after}]"]
    records, summary, _ = bench(
        qwen, tmp_path, texts,
        "--speaker", "ryan", "--requests", "2", "--warmup", "0", "--stream-format", stream,
        "--sample-rate", "24000",  # the sample-rate request would hit the failure first
    )  # fmt: skip
    assert summary["n_ok"] == 0 and summary["errors_by_type"] == {error_type: 2}
    for r in records:
        assert r["error"]["type"] == error_type and r["http_status"] == 200
        assert r["chunk_bytes"] == expected_bytes(QWEN)[:kept], "the audio before the cut is kept"
        if stream == "sse":
            assert "scheduled failure" in r["error"]["message"]


def test_slow_first_chunk_is_never_heard_before_its_delay(qwen, tmp_path):
    texts = ["Quick one.", "Slow to start. [first-delay=1.0]", "Quick again."]
    records, summary, err = bench(
        qwen, tmp_path, texts,
        "--speaker", "ryan", "--requests", "3", "--warmup", "0", "--seed", "1",
    )  # fmt: skip
    assert summary["n_ok"] == 3, err
    slow = [r for r in records if "first-delay" in r["text"]]
    quick = [r for r in records if "first-delay" not in r["text"]]
    assert slow and quick
    # A causal floor, not a speed figure: the delayed request's first audio cannot come
    # sooner than its scheduled delay. (That it comes after the quick ones' would hold only
    # while no quick request is held up for a second: a load-dependent order, not asserted.)
    assert all(s["ttfa_s"] >= 1.0 for s in slow)
    assert all(q["ttfa_s"] > 0 for q in quick)


def test_unknown_speaker_stops_at_the_sample_rate_request(qwen, tmp_path):
    result = thetalker_cli(
        "thetalker-bench", "--base-url", qwen.base_url,
        "--texts-jsonl", str(prompts(tmp_path, TEXTS)), "--out-dir", str(tmp_path / "o"),
        "--speaker", "joe", "--requests", "1", "--warmup", "0",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "Invalid voice 'joe'" in result.stderr and "ryan" in result.stderr


def test_custom_voice_without_speaker_exits_2_naming_the_option(qwen, tmp_path):
    result = thetalker_cli(
        "thetalker-bench", "--base-url", qwen.base_url,
        "--texts-jsonl", str(prompts(tmp_path, TEXTS)), "--out-dir", str(tmp_path / "o"),
        "--task-type", "CustomVoice", "--requests", "1", "--warmup", "0",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert "--speaker" in line and "/v1/audio/voices" in line


@pytest.fixture(scope="module")
def qwen_base(server_factory):
    return server_factory(QWEN_BASE, QWEN_DEPLOY)


def test_base_with_inline_clip(qwen_base, ref_clip, tmp_path):
    records, summary, err = bench(
        qwen_base, tmp_path, TEXTS,
        "--task-type", "Base", "--ref-audio", str(ref_clip), "--ref-text", REF_TEXT,
        "--requests", "2", "--warmup", "0",
    )  # fmt: skip
    assert summary["n_ok"] == 2, err
    assert all(r["chunk_bytes"] == expected_bytes(QWEN_BASE) for r in records)


def test_register_voice_then_use_it(qwen_base, ref_clip, tmp_path):
    records, summary, err = bench(
        qwen_base, tmp_path, TEXTS,
        "--task-type", "Base", "--ref-audio", str(ref_clip), "--ref-text", REF_TEXT,
        "--register-voice", "Narrator", "--requests", "2", "--warmup", "0",
    )  # fmt: skip
    assert summary["n_ok"] == 2, err
    # The server stored it (0.30.0 keeps the name as given and reloads it at each start).
    assert any(p.name.lower().startswith("narrator_") for p in qwen_base.voices_dir.iterdir())
    again, summary, err = bench(
        qwen_base, tmp_path / "again", TEXTS,
        "--task-type", "Base", "--voice", "narrator", "--requests", "2", "--warmup", "0",
    )  # fmt: skip
    assert summary["n_ok"] == 2, err
    assert all(r["chunk_bytes"] == expected_bytes(QWEN_BASE) for r in again)


def test_a_registered_voice_on_a_custom_voice_checkpoint_is_refused(qwen, ref_clip, tmp_path):
    # 0.30.0 forces task Base for an uploaded voice, and the CustomVoice checkpoint refuses Base.
    records, summary, _ = bench(
        qwen, tmp_path, TEXTS,
        "--task-type", "Base", "--ref-audio", str(ref_clip), "--ref-text", REF_TEXT,
        "--register-voice", "clip", "--requests", "1", "--warmup", "0", "--sample-rate", "24000",
    )  # fmt: skip
    assert summary["n_ok"] == 0
    assert records[-1]["error"]["type"] == "http_status"
    assert (
        "CustomVoice checkpoint does not support task_type='Base'"
        in records[-1]["error"]["message"]
    )


def test_voxcpm2_streams_small_steps_at_48k_with_an_inline_clip(server_factory, ref_clip, tmp_path):
    deploy = resolve("voxcpm2").path
    server = server_factory("openbmb/VoxCPM2", deploy)
    records, summary, err = bench(
        server, tmp_path, TEXTS,
        "--task-type", "Base", "--ref-audio", str(ref_clip), "--ref-text", REF_TEXT,
        "--requests", "2", "--warmup", "0", "--deploy", "voxcpm2",
    )  # fmt: skip
    assert summary["sample_rate"] == 48000 and summary["n_ok"] == 2, err
    extra = {"vae_decode_every": 3, "audio_emit_every": 1}  # voxcpm2.yaml's runtime config
    want = [2 * n for n in chunk_samples(PROFILES["openbmb/VoxCPM2"], extra, 166)]
    assert all(r["chunk_bytes"] == want for r in records)
    assert len(want) == 56 and all(r["sample_rate"] == 48000 for r in records)


def test_moss_gives_one_chunk_at_the_end_for_a_registered_voice(server_factory, ref_clip, tmp_path):
    server = server_factory("OpenMOSS-Team/MOSS-TTS", resolve("moss").path)
    records, summary, err = bench(
        server, tmp_path, TEXTS,
        "--task-type", "Base", "--ref-audio", str(ref_clip), "--ref-text", REF_TEXT,
        "--register-voice", "ref", "--requests", "2", "--warmup", "0",
    )  # fmt: skip
    assert summary["n_ok"] == 2, err
    assert all(r["chunk_bytes"] == [166 * 1920 * 2] for r in records)


@pytest.fixture(scope="module")
def omnivoice(server_factory):
    return server_factory("k2-fsa/OmniVoice", resolve("omnivoice").path)


def test_omnivoice_raw_audio_is_one_body(omnivoice, ref_clip, tmp_path):
    records, summary, err = bench(
        omnivoice, tmp_path, TEXTS,
        "--task-type", "Base", "--ref-audio", str(ref_clip), "--ref-text", REF_TEXT,
        "--register-voice", "ref", "--requests", "2", "--warmup", "0",
    )  # fmt: skip
    assert summary["n_ok"] == 2, err
    # The diffusion path ignores stream and stream_format: one plain body, so one chunk.
    assert all(r["chunk_bytes"] == [166 * 1920 * 2] for r in records)


def test_omnivoice_sse_stops_at_the_probe_with_the_servers_answer(omnivoice, ref_clip, tmp_path):
    """Issue 36: the diffusion path answers a whole audio body where SSE was asked, as it
    will for every stream; the streamed request sent once before the warmup stops the run
    in one line (exit 2), with nothing recorded, instead of measuring 100 % errors."""
    out = tmp_path / "o"
    result = thetalker_cli(
        "thetalker-bench", "--base-url", omnivoice.base_url, "--model", "k2-fsa/OmniVoice",
        "--texts-jsonl", str(prompts(tmp_path, TEXTS)), "--out-dir", str(out),
        "--task-type", "Base", "--ref-audio", str(ref_clip), "--ref-text", REF_TEXT,
        "--stream-format", "sse", "--requests", "2", "--warmup", "0",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert "HTTP 200 audio/pcm, not the text/event-stream (stream_format sse)" in line, line
    assert not (out / "records.jsonl").exists() and not (out / "summary.json").exists()


def test_omnivoice_sse_is_refused_before_sending(omnivoice, tmp_path):
    result = thetalker_cli(
        "thetalker-bench", "--base-url", omnivoice.base_url, "--deploy", "omnivoice",
        "--texts-jsonl", str(prompts(tmp_path, TEXTS)), "--out-dir", str(tmp_path / "o"),
        "--task-type", "Base", "--voice", "ref", "--stream-format", "sse",
        "--requests", "1", "--warmup", "0",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip().splitlines()[-1].lower()
    assert "omnivoice" in line and "stream" in line
    assert not (tmp_path / "o" / "records.jsonl").exists()
