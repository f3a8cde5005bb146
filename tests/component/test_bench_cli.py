"""`thetalker-bench` end to end against the scripted server: files, exit statuses, one-line
errors."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.scripted_server import Script, ScriptedServer
from thetalker.cli.bench import exit_status, main
from thetalker.data.record_reads import read_json, read_records
from thetalker.lifecycle.launch import free_port


@pytest.fixture
def prompts_file(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    lines = [f'{{"sample_id": "s{i}", "text": "sentence number {i}"}}' for i in range(4)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_run_writes_records_and_summary(
    scripted_server: ScriptedServer, prompts_file: Path, tmp_path: Path, capsys
):
    scripted_server.sample_rate = 22050
    out = tmp_path / "out"
    argv = [
        "--base-url", scripted_server.base_url + "/v1/", "--texts-jsonl", str(prompts_file),
        "--concurrency", "2", "--requests", "5", "--warmup", "1", "--out-dir", str(out),
        "--speaker", "ryan", "--save-audio", str(out / "audio"),
    ]  # fmt: skip
    assert main(argv) == 0
    records = list(read_records(out / "records.jsonl"))
    assert len(records) == 6 and sum(r["warmup"] for r in records) == 1
    summary = read_json(out / "summary.json")
    assert summary["n_scored"] == 5 and summary["n_ok"] == 5
    assert summary["sample_rate"] == 22050 and summary["concurrency"] == 2
    assert summary["options"]["speaker"] == "ryan"
    assert len(list((out / "audio").glob("*.wav"))) == 5
    assert "5/5 ok" in capsys.readouterr().err


def test_error_rate_above_the_limit_exits_1(
    scripted_server: ScriptedServer, prompts_file: Path, tmp_path: Path
):
    scripted_server.default = Script(mode="http_error", status=500)
    argv = ["--port", str(scripted_server.port), "--texts-jsonl", str(prompts_file),
            "--requests", "2", "--warmup", "0", "--sample-rate", "24000",
            "--speaker", "scripted", "--out-dir", str(tmp_path / "o")]  # fmt: skip
    assert main(argv) == 1
    assert len(list(read_records(tmp_path / "o" / "records.jsonl"))) == 2  # written anyway


def test_expected_sample_rate_mismatch_exits_2(
    scripted_server: ScriptedServer, prompts_file: Path, tmp_path: Path, capsys
):
    argv = ["--base-url", scripted_server.base_url, "--texts-jsonl", str(prompts_file),
            "--expected-sample-rate", "48000", "--speaker", "scripted",
            "--out-dir", str(tmp_path / "o")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "24000 Hz" in err and "48000 Hz" in err


def test_deploy_name_gives_the_expected_rate(
    scripted_server: ScriptedServer, prompts_file: Path, tmp_path: Path, capsys
):
    # voxcpm2 streams at 48 kHz; the scripted server answers at 24 kHz
    argv = ["--base-url", scripted_server.base_url, "--texts-jsonl", str(prompts_file),
            "--deploy", "batch32", "--speaker", "scripted",
            "--out-dir", str(tmp_path / "o")]  # fmt: skip
    assert main(argv) == 2
    assert "48000 Hz" in capsys.readouterr().err
    argv[argv.index("batch32")] = "no-such-model"
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "no-such-model" in err and "qwen3tts17b" in err and err.count("\n") == 1


def test_unreachable_server_exits_1(prompts_file: Path, tmp_path: Path, capsys):
    argv = ["--port", str(free_port()), "--texts-jsonl", str(prompts_file),
            "--out-dir", str(tmp_path / "o"), "--timeout", "5", "--speaker", "x"]  # fmt: skip
    assert main(argv) == 1
    assert "sample-rate request" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--concurrency", "0"], "concurrency: must be at least 1"),
        (["--sample-rate", "fast"], "--sample-rate"),
        (["--task-type", "Base"], "Base needs ref_audio"),
        (["--response-format", "mp3"], "--response-format"),
        (["--request-rate", "-1"], "request_rate"),
        (["--progress-interval", "0"], "--progress-interval"),
        (["--onset-threshold-dbfs", "3"], "option field onset.threshold_dbfs: must be below 0"),
        (["--onset-hop-s", "0.05"], "option field onset.hop_s: 0.05 s is longer than frame_s"),
        (["--onset-run-frames", "0"], "option field onset.run_frames: must be at least 1"),
        (["--onset-frame-s", "nan"], "option field onset.frame_s: must be a finite number"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    prompts_file: Path, tmp_path: Path, capsys, extra: list[str], needle: str
):
    argv = ["--texts-jsonl", str(prompts_file), "--out-dir", str(tmp_path), *extra]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_broken_prompts_file_exits_2_naming_the_line(tmp_path: Path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"sample_id": "a", "text": "ok"}\n{"sample_id": "b"}\n', encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        main(["--texts-jsonl", str(bad), "--out-dir", str(tmp_path / "o")])
    assert exc.value.code == 2
    assert f"{bad}:2: missing 'text'" in capsys.readouterr().err


def test_exit_policy():
    assert exit_status({"n_ok": 0, "error_rate": 0.0}, 0.05) == 1
    assert exit_status({"n_ok": 95, "error_rate": 0.05}, 0.05) == 0  # at the limit: fine
    assert exit_status({"n_ok": 94, "error_rate": 0.06}, 0.05) == 1


@pytest.mark.parametrize(
    ("stop", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
def test_ctrl_c_keeps_finished_records(
    scripted_server: ScriptedServer, prompts_file: Path, tmp_path: Path, stop: int, code: int
):
    # SIGTERM (a supervisor, scancel) as Ctrl-C: records kept, the in-flight one cancelled,
    # summary.json written (issue 36: SIGTERM left neither).
    # "sentence number 3" stalls for 30 s; the other prompts finish at once.
    scripted_server.script_for = lambda body: (
        Script(chunks=((0, 4800), (30.0, 4800))) if body["input"].endswith("3") else None
    )
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "thetalker.cli.bench", "--base-url", scripted_server.base_url,
           "--texts-jsonl", str(prompts_file), "--requests", "4", "--warmup", "0",
           "--concurrency", "4", "--sample-rate", "24000", "--speaker", "scripted",
           "--out-dir", str(out)]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(300):  # until the slow one has its first chunk out
            time.sleep(0.05)
            slow = scripted_server.logs_for("sentence number 3")
            if (
                slow
                and slow[0].send_times
                and sum(r.finished for r in scripted_server.requests) == 3
            ):
                break
        time.sleep(0.3)
        proc.send_signal(stop)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, err
    records = {r["text"]: r for r in read_records(out / "records.jsonl")}
    assert len(records) == 4
    assert records["sentence number 3"]["error"]["type"] == "cancelled"
    assert all(r["ok"] for t, r in records.items() if t != "sentence number 3")
    assert read_json(out / "summary.json")["complete"] is False


# --- CustomVoice needs a speaker (no default only the local server has) --------------------


@pytest.mark.parametrize("deploy", [None, "voxcpm2"], ids=["no-deploy", "deploy-without-speaker"])
def test_custom_voice_without_a_speaker_exits_2_naming_the_flag(
    prompts_file: Path, tmp_path: Path, capsys, deploy: str | None
):
    argv = ["--port", "9", "--texts-jsonl", str(prompts_file), "--out-dir", str(tmp_path / "o")]
    argv += ["--deploy", deploy] if deploy else []
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--speaker" in err and "GET /v1/audio/voices" in err
    assert not (tmp_path / "o").exists()  # refused before anything was sent or written


@pytest.mark.parametrize("stream_format", ["sse", "audio"])
def test_sse_for_a_model_served_without_streaming_is_refused_before_sending(
    prompts_file: Path, tmp_path: Path, capsys, stream_format: str
):
    # OmniVoice on 0.30.0 answers one whole audio body whatever is asked: SSE would record
    # every request as a content_type failure (vllm-omni-030.md #2). Port 9 is never reached.
    argv = ["--port", "9", "--texts-jsonl", str(prompts_file), "--out-dir", str(tmp_path / "o")]
    argv += ["--deploy", "omnivoice", "--task-type", "Base", "--voice", "ref"]
    argv += ["--stream-format", stream_format, "--requests", "1", "--warmup", "0"]
    if stream_format == "audio":  # allowed: only the refusal is under test here
        from thetalker.cli.bench import (
            build_parser,
            options_from_args,
            refuse_sse_without_streaming,
        )

        opts = options_from_args(build_parser().parse_args(argv))
        refuse_sse_without_streaming("omnivoice", opts)
        return
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--stream-format" in err and "omnivoice" in err and "non-streaming" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("extra", "speaker"),
    [
        (["--deploy", "piper-joe"], "joe"),  # the local model documents its speaker
        (["--deploy", "qwen3tts17b", "--expected-sample-rate", "24000"], "ryan"),
        (["--deploy", "qwen3tts17b", "--speaker", "Vivian", "--expected-sample-rate", "24000"],
         "Vivian"),
    ],
)  # fmt: skip
def test_speaker_comes_from_the_flag_or_the_deploys_model(
    scripted_server: ScriptedServer, prompts_file: Path, tmp_path: Path, extra, speaker
):
    scripted_server.sample_rate = 24000
    out = tmp_path / "o"
    argv = ["--base-url", scripted_server.base_url, "--texts-jsonl", str(prompts_file),
            "--requests", "1", "--warmup", "0", "--out-dir", str(out), *extra]  # fmt: skip
    if "piper-joe" in extra:
        scripted_server.sample_rate = 22050
    assert main(argv) == 0
    assert read_json(out / "summary.json")["options"]["speaker"] == speaker
    assert scripted_server.requests[-1].body["speaker"] == speaker


# --- progress during a point ---------------------------------------------------------------


def test_progress_lines_appear_during_a_point(
    scripted_server: ScriptedServer, prompts_file: Path, tmp_path: Path
):
    # Each request takes ~0.6 s; with reports every 0.1 s some come before the last is done.
    scripted_server.default = Script(chunks=((0, 4800), (0.3, 4800), (0.3, 4800)))
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "thetalker.cli.bench", "--base-url", scripted_server.base_url,
           "--texts-jsonl", str(prompts_file), "--requests", "4", "--warmup", "0",
           "--concurrency", "1", "--sample-rate", "24000", "--speaker", "scripted",
           "--progress-interval", "0.1", "--out-dir", str(out)]  # fmt: skip
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    progress = [line for line in lines if " done, " in line]
    assert any("/4 done" in line and not line.startswith("thetalker-bench: c1: 4/4")
               for line in progress), lines  # fmt: skip
    assert all(line.startswith("thetalker-bench: c1: ") for line in progress)
    assert all(" s elapsed, " in line for line in progress)
    end = lines[-1]
    assert end.startswith("thetalker-bench: c1: 4/4 ok, error rate 0.0 %, RTFx ")
    # 0.1 s of audio every 0.3 s: slower than real time, so every stream stalls
    assert ", TTFA p50 " in end and end.endswith(", continuity 0.0 %")


def test_flag_defaults_are_the_bench_options_defaults():
    """One owner of each default: no flag given gives BenchOptions() field for field."""
    from dataclasses import fields

    from thetalker.cli.bench import build_parser, options_from_args
    from thetalker.client import BenchOptions

    args = build_parser().parse_args(["--texts-jsonl", "p.jsonl", "--out-dir", "out"])
    opts, default = options_from_args(args), BenchOptions()
    assert [
        f.name for f in fields(BenchOptions) if getattr(opts, f.name) != getattr(default, f.name)
    ] == []


def test_onset_flags_reach_the_options():
    from thetalker.cli.bench import build_parser, options_from_args
    from thetalker.metrics import OnsetSettings

    argv = ["--texts-jsonl", "p.jsonl", "--out-dir", "out", "--onset-threshold-dbfs", "-30",
            "--onset-frame-s", "0.04", "--onset-hop-s", "0.02",
            "--onset-run-frames", "3"]  # fmt: skip
    opts = options_from_args(build_parser().parse_args(argv))
    assert opts.onset == OnsetSettings(threshold_dbfs=-30.0, frame_s=0.04, hop_s=0.02, run_frames=3)
    assert opts.onset.label() == "abs-30dBFS/40ms/20ms/3"


def test_a_run_with_an_onset_flag_records_its_rule(
    scripted_server: ScriptedServer, prompts_file: Path, tmp_path: Path
):
    out = tmp_path / "out"
    argv = ["--base-url", scripted_server.base_url, "--texts-jsonl", str(prompts_file),
            "--requests", "2", "--warmup", "0", "--sample-rate", "24000", "--speaker", "ryan",
            "--onset-threshold-dbfs=-30", "--out-dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert {r["audible_onset_rule"] for r in read_records(out / "records.jsonl")} == {
        "abs-30dBFS/20ms/10ms/2"
    }
    assert read_json(out / "summary.json")["audible_onset"]["threshold_dbfs"] == -30.0


@pytest.mark.parametrize(
    ("streamed", "said"),
    [
        (
            Script(mode="http_error", status=400, message="sse is not supported for this model"),
            "HTTP 400: sse is not supported for this model",
        ),
        (
            Script(mode="json_200", message="whole"),
            "HTTP 200 application/json, not the text/event-stream (stream_format sse)",
        ),
    ],
)
def test_a_stream_the_server_refuses_stops_the_run_before_its_warmup(
    scripted_server: ScriptedServer,
    prompts_file: Path,
    tmp_path: Path,
    capsys,
    streamed: Script,
    said: str,
):
    """Issue 36: the sample-rate probe (not streamed) passes, but the server refuses every
    SSE request (a 4xx, or an answer that is not the stream asked for). The streamed request
    sent once before the warmup stops the run: one line with the server's reason, exit 2,
    no records, nothing more sent."""
    scripted_server.script_for = lambda body: streamed if body.get("stream") else None
    out = tmp_path / "o"
    argv = ["--port", str(scripted_server.port), "--texts-jsonl", str(prompts_file),
            "--requests", "3", "--warmup", "2", "--speaker", "scripted",
            "--stream-format", "sse", "--out-dir", str(out)]  # fmt: skip
    assert main(argv) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("thetalker-bench: error: streamed request to http://127.0.0.1:")
    assert said in line
    assert [r.body.get("stream") for r in scripted_server.requests] == [None, True]
    assert not (out / "records.jsonl").exists() and not (out / "summary.json").exists()


def test_a_sample_rate_request_the_server_refuses_exits_2_as_a_refused_stream(
    scripted_server: ScriptedServer, prompts_file: Path, tmp_path: Path, capsys
):
    """The sample-rate request is the run's body as one `wav`: a 4xx to it (an unknown voice)
    is the request refused for every stream, so the run stops as `check_stream` stops it
    (exit 2, the server's reason in one line), whichever request a server refuses it at."""
    refused = Script(mode="http_error", status=400, message="Invalid voice 'joe'")
    scripted_server.script_for = lambda body: refused
    argv = ["--port", str(scripted_server.port), "--texts-jsonl", str(prompts_file),
            "--requests", "2", "--warmup", "0", "--speaker", "joe",
            "--out-dir", str(tmp_path / "o")]  # fmt: skip
    assert main(argv) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("thetalker-bench: error: sample-rate request to http://127.0.0.1:")
    assert "HTTP 400: Invalid voice 'joe'" in line
    assert len(scripted_server.requests) == 1
