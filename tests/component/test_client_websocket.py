"""The agent mode's client against a scripted WebSocket server on loopback: what a session
sent and received, and each way a session goes wrong, recorded as data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.ws_scripted_server import WsScript, start_ws_scripted_server
from thetalker.client import BenchOptions, OptionsError, run_benchmark, validate_options
from thetalker.client.pacing import (
    TraceError,
    load_trace,
    piece_offsets,
    text_pieces,
    words_per_s,
)
from thetalker.client.websocket import session_config, stream_url
from thetalker.data.prompts import Prompt
from thetalker.data.record_reads import read_records
from thetalker.data.records import ALL_RECORD_FIELDS, ERROR_TYPES

TEXT = "Hello there, friend. This is the second one! And a third"
PROMPTS = [Prompt("s1", TEXT)]


def agent_opts(base_url: str, voice: str = "ok", **kw: object) -> BenchOptions:
    defaults: dict[str, object] = dict(
        base_url=base_url,
        protocol="websocket",
        speaker=voice,
        sample_rate=24000,
        requests=1,
        warmup=0,
        text_pace=200.0,
        timeout_s=20.0,
    )
    defaults.update(kw)
    return BenchOptions(**defaults)  # type: ignore[arg-type]


def one_record(tmp_path: Path, opts: BenchOptions) -> dict:
    run_benchmark(opts, PROMPTS, tmp_path)
    records = list(read_records(tmp_path / "records.jsonl"))
    assert len(records) == 1
    assert set(records[0]) == set(ALL_RECORD_FIELDS)
    return records[0]


def test_a_session_records_text_frames_and_events(tmp_path: Path) -> None:
    with start_ws_scripted_server(WsScript(frames=2, frame_bytes=4800)) as server:
        rec = one_record(tmp_path, agent_opts(server.base_url))
        received = [m for _, m in server.received]
    assert rec["ok"], rec["error"]
    assert rec["protocol"] == "websocket" and rec["split_granularity"] == "sentence"
    # Every word went out as its own piece, and the pieces are the text.
    assert "".join(rec["text_pieces"]) == TEXT
    assert len(rec["text_pieces"]) == len(TEXT.split()) == len(rec["text_piece_s"])
    assert rec["text_piece_s"] == sorted(rec["text_piece_s"])
    assert rec["t_input_done_s"] >= rec["text_piece_s"][-1]
    # The server saw the same: config first, the pieces, input.done, session.close.
    assert received[0]["type"] == "session.config"
    assert received[0]["stream_audio"] is True and received[0]["response_format"] == "pcm"
    assert [m["text"] for m in received if m["type"] == "input.text"] == rec["text_pieces"]
    assert [m["type"] for m in received][-2:] == ["input.done", "session.close"]
    # Three sentences, two frames each, and their events in order.
    types = [e["type"] for e in rec["server_events"]]
    assert types == ["audio.start", "audio.done"] * 3 + ["session.done"]
    assert rec["chunk_bytes"] == [4800] * 6
    assert rec["audio_s"] == pytest.approx(6 * 4800 / 48000)
    assert rec["sample_rate"] == 24000
    starts = [e for e in rec["server_events"] if e["type"] == "audio.start"]
    assert [e["frames_before"] for e in starts] == [0, 2, 4]
    assert [e["sentence_text"] for e in starts] == [
        "Hello there, friend.",
        "This is the second one!",
        "And a third",
    ]
    # First audio after the first piece; each sentence's audio after its last word.
    assert rec["ttfa_first_text_s"] > 0
    assert rec["ttfa_first_text_s"] == pytest.approx(
        rec["chunk_arrival_s"][0] - rec["text_piece_s"][0]
    )
    assert rec["ttfa_input_done_s"] == pytest.approx(
        rec["chunk_arrival_s"][0] - rec["t_input_done_s"]
    )
    assert len(rec["sentence_lag_s"]) == 3 and all(x > 0 for x in rec["sentence_lag_s"])
    assert all(
        h >= lag - 1e-9
        for h, lag in zip(rec["sentence_heard_lag_s"], rec["sentence_lag_s"], strict=True)
    )
    # The last sentence's last word is the last piece.
    assert rec["sentence_lag_s"][2] == pytest.approx(
        rec["chunk_arrival_s"][4] - rec["text_piece_s"][-1]
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["n_ok"] == 1 and summary["options"]["protocol"] == "websocket"
    agent = summary["agent"]
    assert agent["ttfa_first_text_s"]["p50"] == pytest.approx(rec["ttfa_first_text_s"])
    assert agent["sentence_lag_s"]["n"] == 3


def test_late_audio_start_is_recorded_late(tmp_path: Path) -> None:
    with start_ws_scripted_server(WsScript(late_s=0.3)) as server:
        rec = one_record(tmp_path, agent_opts(server.base_url, "late"))
    assert rec["ok"], rec["error"]
    first_start = next(e for e in rec["server_events"] if e["type"] == "audio.start")
    # The server held its first audio.start 0.3 s past the first piece it received, which
    # the client sent before that: nothing earlier than 0.3 s can be recorded.
    assert first_start["t_s"] - rec["text_piece_s"][0] >= 0.3
    assert rec["ttfa_first_text_s"] >= 0.3
    assert rec["chunk_arrival_s"][0] > first_start["t_s"]


def test_an_error_mid_session_fails_the_session_and_keeps_its_audio(tmp_path: Path) -> None:
    with start_ws_scripted_server() as server:
        rec = one_record(tmp_path, agent_opts(server.base_url, "boom"))
    assert not rec["ok"]
    assert rec["error"]["type"] == "ws_error"
    assert "Generation failed" in rec["error"]["message"]
    assert rec["continuity_ok"] is False
    types = [e["type"] for e in rec["server_events"]]
    assert types[:3] == ["audio.start", "error", "audio.done"]
    assert types[-1] == "session.done"  # the session went on to the end
    error = rec["server_events"][1]
    assert error["partial_audio"] is True and error["frames_before"] == 1
    assert rec["server_events"][2]["error"] is True
    assert len(rec["chunk_bytes"]) == 1 + 2 + 2  # what came is kept


def test_a_socket_closed_early_is_recorded(tmp_path: Path) -> None:
    with start_ws_scripted_server() as server:
        rec = one_record(tmp_path, agent_opts(server.base_url, "close"))
    assert not rec["ok"]
    assert rec["error"]["type"] == "closed_early"
    assert len(rec["chunk_bytes"]) == 1
    assert "session.done" not in [e["type"] for e in rec["server_events"]]


def test_a_refused_config_is_recorded(tmp_path: Path) -> None:
    with start_ws_scripted_server() as server:
        rec = one_record(tmp_path, agent_opts(server.base_url, "refuse"))
    assert not rec["ok"]
    assert rec["error"]["type"] == "session_refused"
    assert "Invalid session config" in rec["error"]["message"]
    assert rec["chunk_bytes"] == [] and rec["ttfa_first_text_s"] is None


def test_no_websocket_route_is_an_http_status(tmp_path: Path, scripted_server) -> None:
    rec = one_record(tmp_path, agent_opts(scripted_server.base_url))
    assert not rec["ok"]
    assert rec["error"]["type"] == "http_status" and rec["http_status"] >= 400


def test_error_types_are_declared() -> None:
    for kind in ("ws_error", "closed_early", "session_refused"):
        assert kind in ERROR_TYPES


def test_open_loop_and_several_sessions(tmp_path: Path) -> None:
    prompts = [Prompt(f"s{i}", f"Sentence number {i}. And more.") for i in range(4)]
    with start_ws_scripted_server() as server:
        opts = agent_opts(server.base_url, requests=4, warmup=1, request_rate=20.0)
        summary = run_benchmark(opts, prompts, tmp_path)
    records = list(read_records(tmp_path / "records.jsonl"))
    assert [r["warmup"] for r in records] == [True, False, False, False, False]
    assert all(r["ok"] for r in records), [r["error"] for r in records]
    assert all(r["schedule_lag_s"] is not None for r in records if not r["warmup"])
    assert summary["n_ok"] == 4 and summary["rtfx"] > 0


# --- pacing ---------------------------------------------------------------------------


def test_pieces_are_words_with_their_spaces() -> None:
    assert text_pieces("  Hi  there,\nyou. ") == ["Hi", "  there,", "\nyou."]
    assert text_pieces("Hi there", whole=True) == ["Hi there"]
    assert text_pieces("   ") == []


def test_tokens_convert_to_words() -> None:
    assert words_per_s(40, "tokens") == pytest.approx(30.0)
    assert words_per_s(12, "words") == 12
    with pytest.raises(ValueError, match="text_pace_unit"):
        words_per_s(1, "chars")


def test_offsets_pace_jitter_and_seed() -> None:
    assert piece_offsets(4, 10.0) == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert piece_offsets(3, 0.0) == [0.0, 0.0, 0.0]
    a = piece_offsets(50, 10.0, jitter=0.5, seed=1, request_index=3)
    assert a == piece_offsets(50, 10.0, jitter=0.5, seed=1, request_index=3)
    assert a != piece_offsets(50, 10.0, jitter=0.5, seed=1, request_index=4)
    gaps = [b - a_ for a_, b in zip(a[:-1], a[1:], strict=True)]
    assert all(0.05 - 1e-12 <= g <= 0.15 + 1e-12 for g in gaps)
    assert min(gaps) < 0.09 and max(gaps) > 0.11  # it does jitter


def test_trace_offsets_and_their_continuation(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text('{"t_s": 0.5, "text": "Hi"}\n0.7\n# a comment\n{"t_s": 1.1}\n')
    trace = load_trace(path)
    assert trace == (0.5, 0.7, 1.1)
    assert piece_offsets(5, 99.0, trace=trace) == pytest.approx([0.0, 0.2, 0.6, 0.9, 1.2])
    (tmp_path / "list.json").write_text("[0, 0.25]")
    assert load_trace(tmp_path / "list.json") == (0.0, 0.25)


@pytest.mark.parametrize(
    "content, match",
    [("0.5\n0.2\n", r"trace.txt:2: offset 0.2 s goes back"), ("x\n", r"trace.txt:1: neither")],
)
def test_bad_trace_names_file_and_line(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "trace.txt"
    path.write_text(content)
    with pytest.raises(TraceError, match=match):
        load_trace(path)


def test_options_are_checked(tmp_path: Path) -> None:
    base = agent_opts("http://127.0.0.1:1")
    validate_options(base)
    for change, name in [
        (dict(protocol="grpc"), "protocol"),
        (dict(split_granularity="word"), "split_granularity"),
        (dict(text_pace=-1.0), "text_pace"),
        (dict(text_pace_jitter=1.0), "text_pace_jitter"),
        (dict(response_format="wav"), "response_format"),
        (dict(text_trace=str(tmp_path / "missing")), "text_trace"),
    ]:
        with pytest.raises(OptionsError, match=f"^option field {name}:"):
            validate_options(BenchOptions(**{**base.__dict__, **change}))


def test_session_config_and_url() -> None:
    opts = agent_opts("https://h:1/v1", model="m", split_granularity="clause")
    msg = session_config(opts)
    assert msg == {
        "type": "session.config",
        "task_type": "CustomVoice",
        "model": "m",
        "language": "English",
        "voice": "ok",
        "response_format": "pcm",
        "stream_audio": True,
        "split_granularity": "clause",
    }
    assert stream_url("https://h:1/v1") == "wss://h:1/v1/audio/speech/stream"
    assert stream_url("http://h:1") == "ws://h:1/v1/audio/speech/stream"


def test_a_trace_sets_when_pieces_go(tmp_path: Path) -> None:
    trace = tmp_path / "llm.jsonl"
    offsets = [0.0, 0.05, 0.3, 0.31, 0.6]
    trace.write_text("".join(json.dumps({"t_s": t, "text": "x"}) + "\n" for t in offsets))
    with start_ws_scripted_server() as server:
        rec = one_record(tmp_path, agent_opts(server.base_url, text_trace=str(trace)))
    assert rec["ok"], rec["error"]
    sent = [t - rec["text_piece_s"][0] for t in rec["text_piece_s"]]
    # Never before its slot; past the trace's end the mean gap (0.15 s) goes on.
    slots = offsets + [0.6 + 0.15 * k for k in range(1, len(sent) - len(offsets) + 1)]
    assert all(s >= slot - 1e-6 for s, slot in zip(sent, slots, strict=True))


def test_sessions_over_worker_processes(tmp_path: Path) -> None:
    prompts = [Prompt(f"s{i}", f"Worker sentence {i}. Done.") for i in range(4)]
    with start_ws_scripted_server() as server:
        opts = agent_opts(server.base_url, requests=4, warmup=0, concurrency=2, workers=2)
        summary = run_benchmark(opts, prompts, tmp_path)
    records = list(read_records(tmp_path / "records.jsonl"))
    assert summary["n_ok"] == 4, [r["error"] for r in records]
    assert all(r["protocol"] == "websocket" and len(r["sentence_lag_s"]) == 2 for r in records)


def test_thetalker_bench_protocol_websocket(tmp_path: Path) -> None:
    import subprocess
    import sys

    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"sample_id": "a", "text": "One. Two words."}) + "\n")
    with start_ws_scripted_server() as server:
        result = subprocess.run(
            [
                sys.executable, "-m", "thetalker.cli.bench", "--base-url", server.base_url,
                "--speaker", "ok", "--texts-jsonl", str(prompts), "--requests", "1",
                "--warmup", "0", "--sample-rate", "24000", "--out-dir", str(tmp_path / "out"),
                "--protocol", "websocket", "--text-pace", "60", "--text-pace-unit", "tokens",
                "--split-granularity", "clause",
            ],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    (rec,) = read_records(tmp_path / "out" / "records.jsonl")
    assert rec["ok"] and rec["split_granularity"] == "clause"
    options = json.loads((tmp_path / "out" / "summary.json").read_text())["options"]
    assert options["text_pace"] == 60 and options["text_pace_unit"] == "tokens"


def test_a_session_done_after_one_of_three_sentences_is_not_ok(tmp_path: Path) -> None:
    # The rule: a session is ok only when everything it asked for arrived (every sentence
    # of the text sent), not when the server says it is done.
    with start_ws_scripted_server() as server:
        rec = one_record(tmp_path, agent_opts(server.base_url, voice="short"))
    assert not rec["ok"]
    assert rec["error"]["type"] == "session_incomplete"
    assert "cover 18 of the 46 characters" in rec["error"]["message"]


def test_a_done_event_before_all_the_text_was_sent_is_incomplete_whatever_the_server_says(
    tmp_path: Path,
) -> None:
    # The server names no sentence and states the one it spoke as the total: only the text
    # sent can say the session was cut short. Its done event came before the client sent
    # the rest of the text (one word a second: seconds of text left), so it is not ok.
    with start_ws_scripted_server() as server:
        rec = one_record(tmp_path, agent_opts(server.base_url, voice="early", text_pace=1.0))
    assert not rec["ok"]
    assert rec["error"]["type"] == "session_incomplete"
    assert "before all the text was sent" in rec["error"]["message"]


def test_a_servers_nan_is_written_as_null_and_the_record_is_standard_json(tmp_path: Path) -> None:
    with start_ws_scripted_server() as server:
        rec = one_record(tmp_path, agent_opts(server.base_url, voice="nan"))
    assert rec["ok"], rec["error"]
    dones = [e for e in rec["server_events"] if e["type"] == "audio.done"]
    assert dones and all(e["total_bytes"] is None for e in dones)
    assert "NaN" not in (tmp_path / "records.jsonl").read_text()
