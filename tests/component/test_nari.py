"""Nari's Qwen3-TTS server, as the stand-in tests/standins/nari-qwen3-tts-server speaks it
(docs/servers/nari.md), driven by the real client (`thetalker-bench --server nari`, HTTP and
the nari.speech.v1 socket) and started by the real lifecycle (its launcher, /ready).

The stand-in logs every request it answered (its body, its seed, the chunk sizes it sent),
so each record is checked against what was really sent: ok, its chunks exactly the
stand-in's, and no field Nari's strict schema refuses (the stand-in would have said 422).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.nari_standin import MODEL, Standin
from tests.support.nari_standin import get as _get
from tests.support.paths import REPO, STANDINS
from tests.support.processes import pid_alive
from thetalker.cli import bench
from thetalker.client import websocket as client_ws
from thetalker.client.nari_socket import MAX_APPENDS, batch_pieces
from thetalker.data.records import read_records
from thetalker.lifecycle.launch import ServerSpec, launch_server
from thetalker.lifecycle.processes import group_alive

PROMPTS = REPO / "prompts" / "seed_tts_eval_en_100.jsonl"
FORBIDDEN = ("task_type", "speaker", "stream_format", "sample_rate", "ref_audio", "ref_text")


@pytest.fixture
def nari(tmp_path: Path) -> Iterator[Standin]:
    server = Standin(tmp_path, {"STANDIN_WARMUP_S": "0"})
    server.wait_ready()
    yield server
    server.stop()


def _bench(base_url: str, out: Path, *extra: str) -> int:
    return bench.main(
        [
            "--server", "nari", "--base-url", base_url, "--model", MODEL, "--speaker", "ryan",
            "--texts-jsonl", str(PROMPTS), "--requests", "6", "--warmup", "1",
            "--concurrency", "3", "--out-dir", str(out), "--progress-interval", "60", *extra,
        ]
    )  # fmt: skip


def _check_bodies(entries: list[dict]) -> None:
    for entry in entries:
        sent = entry.get("body") or entry.get("start") or {}
        assert not set(sent) & set(FORBIDDEN), sent
        assert entry.get("status", 200) == 200, entry


def test_http_stream_every_record_ok_with_the_chunks_as_sent(nari: Standin, tmp_path: Path):
    assert _bench(nari.base_url, tmp_path / "out") == 0
    records = list(read_records(tmp_path / "out" / "records.jsonl"))
    entries = nari.entries()
    _check_bodies(entries)
    probe, *streamed = entries
    assert "stream" not in probe["body"]  # not streamed: the whole wav, its header exact
    assert probe["body"]["response_format"] == "wav"
    by_seed = {e["seed"]: e for e in streamed}
    assert len(by_seed) == len(streamed) == len(records) == 7  # a seed per request
    for record in records:
        assert record["ok"], record["error"]
        assert record["sample_rate"] == 24000  # from the probe's exact wav header
        sent = by_seed[42 + record["request_index"]]
        assert record["chunk_bytes"] == sent["chunks"]
        body = sent["body"]
        assert body["stream"] is True and body["non_streaming_mode"] is False
        assert body["voice"] == "ryan" and body["model"] == MODEL
        assert body["response_format"] == "pcm"
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["options"]["server"] == "nari"


def test_wav_stream_with_unknown_sizes_is_parsed(nari: Standin, tmp_path: Path):
    assert _bench(nari.base_url, tmp_path / "out", "--response-format", "wav") == 0
    records = list(read_records(tmp_path / "out" / "records.jsonl"))
    by_seed = {e["seed"]: e for e in nari.entries()[1:]}
    for record in records:
        assert record["ok"], record["error"]
        assert sum(record["chunk_bytes"]) == sum(by_seed[42 + record["request_index"]]["chunks"])


def test_agent_mode_over_nari_speech_v1(nari: Standin, tmp_path: Path):
    out = tmp_path / "ws"
    assert _bench(nari.base_url, out, "--protocol", "websocket", "--text-pace", "200") == 0
    records = list(read_records(out / "records.jsonl"))
    entries = nari.entries()
    _check_bodies(entries)
    sockets = {e["start"]["seed"]: e for e in entries if e.get("socket")}
    assert len(sockets) == len(records) == 7
    for record in records:
        assert record["ok"], record["error"]
        sent = sockets[42 + record["request_index"]]
        assert record["chunk_bytes"] == sent["chunks"]
        assert "".join(record["text_pieces"]) == sent["text"]
        assert sent["start"]["type"] == "request.start"
        kinds = [e["type"] for e in record["server_events"]]
        assert kinds[:2] == ["session.created", "request.configured"]
        assert kinds.count("response.started") == 1 and kinds[-1] == "response.done"
        acks = [e for e in record["server_events"] if e["type"] == "input_text.ack"]
        assert [a["sequence"] for a in acks] == list(range(len(record["text_pieces"]) + 1))
        assert record["server_events"][-1]["audio_chunks"] == len(record["chunk_bytes"])
        assert record["split_granularity"] == "none"  # the text streams into one request
        assert record["ttfa_first_text_s"] is not None


def test_vllm_omni_body_is_rejected_naming_the_field(nari: Standin, tmp_path: Path):
    """What the wrong dialect gets: 422s naming the field (typed as the server kind it was
    told, vllm-omni: `http_status`). `--server nari` sends none of these fields."""
    out = tmp_path / "wrong"
    code = bench.main(
        [
            "--server", "vllm-omni", "--base-url", nari.base_url, "--speaker", "ryan",
            "--texts-jsonl", str(PROMPTS), "--requests", "2", "--warmup", "0",
            "--sample-rate", "24000", "--trust-sample-rate", "--out-dir", str(out),
        ]
    )  # fmt: skip
    assert code == 1
    for record in read_records(out / "records.jsonl"):
        assert record["error"]["type"] == "http_status"
        assert record["error"]["status"] == 422
        assert "body.task_type: Extra inputs are not permitted" in record["error"]["message"]
        assert "body.speaker" in record["error"]["message"]


def test_cut_stream_is_truncated(tmp_path: Path):
    server = Standin(tmp_path, {"STANDIN_WARMUP_S": "0", "STANDIN_CUT_AFTER": "2"})
    try:
        server.wait_ready()
        assert _bench(server.base_url, tmp_path / "cut") == 1
    finally:
        server.stop()
    records = list(read_records(tmp_path / "cut" / "records.jsonl"))
    assert records and all(r["error"]["type"] == "truncated" for r in records)
    assert all(len(r["chunk_bytes"]) == 2 for r in records)


def test_a_failed_engine_is_a_failure_of_the_run(tmp_path: Path):
    """An engine that fails after it was ready answers every POST 503 `... not ready:
    service_failed` and never recovers: `server_failed`, and the point fails even where
    `--max-error-rate 1.0` accepts any error rate (not a start-up wait, `not_ready`)."""
    server = Standin(tmp_path, {"STANDIN_WARMUP_S": "0", "STANDIN_FAIL_AFTER": "4"})
    try:
        server.wait_ready()
        out = tmp_path / "failed"
        code = _bench(server.base_url, out, "--concurrency", "1", "--max-error-rate", "1.0")
        health, ready = _get(server.base_url + "/health"), _get(server.base_url + "/ready")
        # Validation comes before readiness: a bad body is still a 422, a good one a 503.
        bad = server.speech({"input": "Hi", "task_type": "CustomVoice"})
        good = server.speech({"input": "Hi"})
    finally:
        server.stop()
    assert code == 1
    assert health == (503, {"alive": False, "phase": "failed"})
    assert ready[0] == 503 and ready[1]["reason"] == "service_failed"
    assert bad[0] == 422 and bad[1]["detail"][0]["type"] == "extra_forbidden"
    assert good == (503, {"detail": "Qwen3-TTS service is not ready: service_failed"})
    records = list(read_records(out / "records.jsonl"))
    kinds = [r["error"]["type"] if r["error"] else "ok" for r in records]
    # probe, warmup, requests 0-1 served; request 2 admitted as the engine failed (cut).
    assert kinds == ["ok"] * 3 + ["truncated"] + ["server_failed"] * 3
    for record in records[4:]:
        assert record["error"]["status"] == 503
        assert "service_failed" in record["error"]["message"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors_by_type"]["server_failed"] == 3


def test_the_socket_fails_the_same_way(tmp_path: Path):
    """On the socket too: the session streaming as the engine fails is cut
    (`generation_failed`), and every later start is refused with the failed service's words:
    `server_failed`, and the point fails though `--max-error-rate 1.0` accepts any rate."""
    server = Standin(tmp_path, {"STANDIN_WARMUP_S": "0", "STANDIN_FAIL_AFTER": "4"})
    try:
        server.wait_ready()
        out = tmp_path / "ws"
        code = _bench(server.base_url, out, "--protocol", "websocket", "--text-pace", "200",
                      "--concurrency", "1", "--max-error-rate", "1.0")  # fmt: skip
    finally:
        server.stop()
    assert code == 1
    records = list(read_records(out / "records.jsonl"))
    kinds = [r["error"]["type"] if r["error"] else "ok" for r in records]
    # The HTTP probe, then warmup and requests 0-1 served; request 2 streams as it fails.
    assert kinds == ["ok"] * 3 + ["ws_error"] + ["server_failed"] * 3
    assert "generation_failed" in records[3]["error"]["message"]
    assert all("service_failed" in r["error"]["message"] for r in records[4:])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors_by_type"]["server_failed"] == 3


def test_over_capacity_is_overloaded(tmp_path: Path):
    env = {"STANDIN_WARMUP_S": "0", "STANDIN_CHUNK_DELAY_S": "0.2"}  # each request holds its slot
    server = Standin(tmp_path, env, "ttfa", "--max-active-requests", "1")
    try:
        server.wait_ready()
        _bench(server.base_url, tmp_path / "busy", "--concurrency", "4", "--requests", "8")
    finally:
        server.stop()
    errors = [r["error"] for r in read_records(tmp_path / "busy" / "records.jsonl") if r["error"]]
    assert errors and all(e["type"] == "overloaded" and e["status"] == 429 for e in errors)
    assert all("active request capacity exceeded" in e["message"] for e in errors)


def test_launcher_waits_for_ready_and_keeps_the_profile_sha(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PATH", f"{STANDINS}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_WARMUP_S", "1.0")
    spec = ServerSpec(
        launcher="nari",
        model_id=MODEL,
        profile="throughput",
        log_path=tmp_path / "server.log",
        health_timeout_s=60,
    )
    with launch_server(spec) as server:
        assert _get(server.base_url + "/ready")[0] == 200  # /health was 200 a second before
        assert "--profile" in server.command
        assert server.command[server.command.index("--profile") + 1] == "throughput"
        assert len(server.startup["execution_config_sha256"]) == 64
        # The real line's source: the packaged profile (or the --engine-config path).
        assert server.as_record()["startup"]["source"] == "packaged-profile"
        pid = server.pid
    assert not group_alive(pid) and not pid_alive(pid)


def test_launcher_refuses_a_missing_profile(tmp_path: Path):
    missing = ServerSpec(launcher="nari", model_id=MODEL)
    with (
        pytest.raises(ValueError, match="ServerSpec.profile: None is not one of ttfa"),
        launch_server(missing),
    ):
        pass
    stray = ServerSpec(launcher="local", model_id="x", profile="ttfa")
    with pytest.raises(ValueError, match="server local has no profiles"), launch_server(stray):
        pass


def test_a_kind_with_a_fixed_rate_sends_no_probe(nari: Standin, tmp_path: Path, monkeypatch):
    """`ServerApi.sample_rate` as an int (nari.md: Nari's is fixed at 24 kHz) replaces the
    wav probe: nothing but the streamed requests reach the server."""
    import dataclasses

    from thetalker import backends

    real_api = backends.api
    fixed = dataclasses.replace(real_api("nari"), sample_rate=24000)
    monkeypatch.setattr(backends, "api", lambda name: fixed if name == "nari" else real_api(name))
    assert _bench(nari.base_url, tmp_path / "fixed") == 0
    assert all(e["body"]["stream"] is True for e in nari.entries())
    summary = json.loads((tmp_path / "fixed" / "summary.json").read_text())
    assert summary["sample_rate"] == 24000 and summary["sample_rate_source"] == "server"


def test_batch_pieces_keeps_the_text_and_no_piece_goes_early():
    pieces = [f" w{i}" for i in range(2050)]
    offsets = [i * 0.01 for i in range(2050)]
    batched, times = batch_pieces(pieces, offsets)
    assert len(batched) == 684 <= MAX_APPENDS  # groups of ceil(2050 / 1024) = 3
    assert "".join(batched) == "".join(pieces)
    assert times[0] == offsets[2] and times[-1] == offsets[-1]  # each at its last piece's time
    assert batch_pieces(pieces[:1024], offsets[:1024]) == (pieces[:1024], offsets[:1024])


def test_a_long_text_at_token_pace_stays_under_the_append_cap(nari: Standin, tmp_path: Path):
    """A 1,100-word text streamed a word a piece would be 1,100 appends; Nari closes the
    socket past 1,024 (`too_many_input_events`, 1008). The client batches instead."""
    words = " ".join(f"word{i}" for i in range(1100)) + "."
    prompts = tmp_path / "long.jsonl"
    prompts.write_text(json.dumps({"sample_id": "long", "text": words}) + "\n")
    out = tmp_path / "long"
    code = bench.main(
        [
            "--server", "nari", "--base-url", nari.base_url, "--model", MODEL, "--speaker", "ryan",
            "--texts-jsonl", str(prompts), "--requests", "1", "--warmup", "0",
            "--protocol", "websocket", "--text-pace", "4000", "--text-pace-unit", "tokens",
            "--max-new-tokens", "32768", "--sample-rate", "24000", "--trust-sample-rate",
            "--out-dir", str(out),
        ]
    )  # fmt: skip
    (record,) = read_records(out / "records.jsonl")
    assert record["ok"], record["error"]
    assert code == 0
    assert len(record["text_pieces"]) <= MAX_APPENDS
    assert "".join(record["text_pieces"]) == words
    (sent,) = [e for e in nari.entries() if e.get("socket")]
    assert sent["text"] == words and record["chunk_bytes"] == sent["chunks"]


def test_empty_frames_on_the_socket_are_no_audio(tmp_path: Path):
    """A frame with no bytes is not audio: it sets no first byte and is no chunk."""
    server = Standin(tmp_path, {"STANDIN_WARMUP_S": "0", "STANDIN_EMPTY_FRAMES": "3"})
    try:
        server.wait_ready()
        out = tmp_path / "empty"
        assert _bench(server.base_url, out, "--protocol", "websocket", "--text-pace", "200") == 0
    finally:
        server.stop()
    sent = {e["start"]["seed"]: e["chunks"] for e in server.entries() if e.get("socket")}
    for record in read_records(out / "records.jsonl"):
        assert record["ok"], record["error"]
        assert 0 not in record["chunk_bytes"]
        assert record["chunk_bytes"] == sent[42 + record["request_index"]]


@pytest.mark.parametrize("hostile", ["deep", "digits"])
def test_an_event_json_cannot_take_fails_its_session_and_every_record_is_written(
    tmp_path: Path, hostile: str
):
    """An event nested 200,000 deep (read on the receive loop: its type is `error`) or with
    an integer of 5,000 digits (read when the record is built) ended the run in an
    ExceptionGroup, its request unrecorded: now each session fails `bad_event`."""
    server = Standin(tmp_path, {"STANDIN_WARMUP_S": "0", "STANDIN_HOSTILE_EVENT": hostile})
    try:
        server.wait_ready()
        out = tmp_path / "hostile"
        code = _bench(server.base_url, out, "--protocol", "websocket", "--text-pace", "200")
    finally:
        server.stop()
    assert code == 1  # every session failed: past the error-rate bound, said in one line
    records = list(read_records(out / "records.jsonl"))
    assert len(records) == 7  # 1 warmup + 6 scored: none lost
    for record in records:
        assert record["error"]["type"] == "bad_event", record["error"]


def test_the_nari_socket_bounds_a_frame(nari: Standin, tmp_path: Path, monkeypatch):
    """The agent sockets share one frame bound (MAX_FRAME_BYTES, 64 MiB); lowered here below
    one chunk of the stand-in, the session fails instead of buffering it."""
    monkeypatch.setattr(client_ws, "MAX_FRAME_BYTES", 4 * 1920 * 2)  # 4 frames; chunks reach 12
    out = tmp_path / "bounded"
    assert _bench(nari.base_url, out, "--protocol", "websocket", "--text-pace", "200") == 1
    for record in read_records(out / "records.jsonl"):
        assert record["error"]["type"] == "closed_early", record["error"]
