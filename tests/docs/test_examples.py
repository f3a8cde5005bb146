"""The examples, run as a user runs them, against real servers on loopback.

A real `thetalker-serve-local` (deterministic Piper, free port, module-scoped) for the
happy paths; the scripted stand-in (`tests/support/scripted_server.py`) where a test needs a server
that fails one request or stalls on cue; the `vllm-omni` and MPS stand-ins
(`tests/standins/`) for `serve.sh`. Every process started here is stopped here.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import wave
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.support.paths import REPO
from tests.support.processes import (
    cmdline,
    pid_alive,
    port_open,
    session_pids,
    stop_group,
    wait_healthy,
)
from tests.support.scripted_server import Script, start_scripted_server
from tests.support.server_fixtures import start_local_server
from thetalker.lifecycle.launch import free_port
from thetalker.util.text import split_sentences

ROOT = REPO
EXAMPLES = ROOT / "examples"
STANDINS = ROOT / "tests" / "standins"
REF_WAV = ROOT / "reference" / "ref.wav"
REF_TXT = ROOT / "reference" / "ref.txt"
PIPER_RATE = 22050


# -- helpers ------------------------------------------------------------------------------


def run(args: list[str], timeout: float = 120, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )


def python_example(name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run([sys.executable, str(EXAMPLES / name), *args], timeout=timeout)


def read_wav(path: Path) -> tuple[bytes, int, int, int]:
    with wave.open(str(path), "rb") as w:
        return w.readframes(w.getnframes()), w.getframerate(), w.getnchannels(), w.getsampwidth()


def speak_pcm(base_url: str, text: str) -> bytes:
    """A non-streamed pcm request: the reference audio for `text`."""
    body = json.dumps({"input": text, "speaker": "joe", "response_format": "pcm"}).encode()
    request = urllib.request.Request(
        base_url + "/v1/audio/speech", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as r:
        return r.read()


# -- the real local server ------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A deterministic two-worker server for this module; its base URL."""
    args = ["--workers", "2", "--threads-per-worker", "1", "--deterministic"]
    with start_local_server(args, log_dir=tmp_path_factory.mktemp("serve-local")) as server:
        yield server.base_url


# -- the reference clip -----------------------------------------------------------------------


def test_reference_clip_is_mono_16bit_24k_and_4_to_6_seconds() -> None:
    pcm, rate, channels, width = read_wav(REF_WAV)
    assert (rate, channels, width) == (24000, 1, 2)
    assert 4.0 <= len(pcm) / (2 * rate) <= 6.0
    samples = np.frombuffer(pcm, "<i2")
    assert np.abs(samples).max() > 8000  # speech, not silence
    transcript = REF_TXT.read_text(encoding="utf-8")
    assert transcript.endswith("\n") and transcript.count("\n") == 1 and len(transcript) > 20


@pytest.mark.slow
def test_regenerating_the_reference_gives_the_committed_clip(tmp_path: Path) -> None:
    result = python_example("make_reference.py", "--out-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "ref.txt").read_bytes() == REF_TXT.read_bytes()
    new, committed = (tmp_path / "ref.wav").read_bytes(), REF_WAV.read_bytes()
    if new != committed:  # another CPU: floating point may move the last bit, nothing more
        a = np.frombuffer(read_wav(tmp_path / "ref.wav")[0], "<i2").astype(int)
        b = np.frombuffer(read_wav(REF_WAV)[0], "<i2").astype(int)
        assert a.shape == b.shape and np.abs(a - b).max() <= 4


# -- request.sh -------------------------------------------------------------------------------


def test_request_sh_preset_streams_pcm_to_a_file(local_server: str, tmp_path: Path) -> None:
    out = tmp_path / "preset.pcm"
    env = {**os.environ, "BASE_URL": local_server, "TEXT": 'He said "hello"\\ and left.'}
    result = run(["bash", str(EXAMPLES / "request.sh"), "preset", str(out)], env=env)
    assert result.returncode == 0, result.stderr
    assert "first byte" in result.stderr
    pcm = out.read_bytes()
    assert len(pcm) % 2 == 0 and len(pcm) / (2 * PIPER_RATE) > 0.5


def test_request_sh_clone_pipes_the_clip_as_a_data_uri(tmp_path: Path) -> None:
    out = tmp_path / "clone.pcm"
    with start_scripted_server(Script(chunks=((0.0, 4800), (0.05, 4800)))) as server:
        env = {**os.environ, "BASE_URL": server.base_url}
        result = run(["bash", str(EXAMPLES / "request.sh"), "clone", str(out)], env=env)
        bodies = [r.body for r in server.requests]
    assert result.returncode == 0, result.stderr
    assert len(bodies) == 1
    body = bodies[0]
    assert body["task_type"] == "Base"
    assert (body["stream"], body["stream_format"], body["response_format"]) == (
        True,
        "audio",
        "pcm",
    )
    assert body["ref_text"] == REF_TXT.read_text(encoding="utf-8").strip()
    prefix = "data:audio/wav;base64,"
    assert body["ref_audio"].startswith(prefix)
    assert base64.b64decode(body["ref_audio"][len(prefix) :]) == REF_WAV.read_bytes()
    assert out.stat().st_size == 9600


def test_request_sh_reports_the_servers_error(local_server: str, tmp_path: Path) -> None:
    # The Piper voice cannot clone: the server refuses Base with a JSON error body.
    env = {**os.environ, "BASE_URL": local_server}
    result = run(["bash", str(EXAMPLES / "request.sh"), "clone", str(tmp_path / "x.pcm")], env=env)
    assert result.returncode == 22
    assert '"error"' in result.stderr and "task_type" in result.stderr


def test_request_sh_sends_an_uploaded_voice_as_voice(tmp_path: Path) -> None:
    with start_scripted_server(Script(chunks=((0.0, 4800),))) as server:
        env = {**os.environ, "PORT": str(server.port), "VOICE": "thetalker_ref"}
        result = run(
            ["bash", str(EXAMPLES / "request.sh"), "preset", str(tmp_path / "v.pcm")], env=env
        )
        bodies = [r.body for r in server.requests]
    assert result.returncode == 0, result.stderr
    assert [(b["voice"], b["task_type"], "speaker" in b) for b in bodies] == [
        ("thetalker_ref", "CustomVoice", False)
    ]


def test_request_sh_rejects_an_unknown_mode() -> None:
    result = run(["bash", str(EXAMPLES / "request.sh"), "sing"])
    assert result.returncode == 2 and "usage" in result.stderr


# -- run_streaming.py -------------------------------------------------------------------------


def _figure(stdout: str, label: str) -> float:
    match = re.search(rf"^{label}\s*:\s+([0-9.]+) s", stdout, re.M)
    assert match, f"no '{label}' line in:\n{stdout}"
    return float(match.group(1))


def test_run_streaming_writes_the_wav_and_what_a_player_heard(
    local_server: str, tmp_path: Path
) -> None:
    out = tmp_path / "stream.wav"
    text = "Hello there. This is a streamed answer in two sentences."
    result = python_example(
        "run_streaming.py", "--base-url", local_server, "--text", text, "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    pcm, rate, channels, _ = read_wav(out)
    assert (rate, channels) == (PIPER_RATE, 1)
    wrote = re.search(
        r"^wrote (\S+) \(([0-9.]+) s of audio at (\d+) Hz in (\d+) chunks?", result.stdout
    )
    assert wrote, result.stdout
    assert (wrote.group(1), int(wrote.group(3))) == (str(out), rate)
    assert float(wrote.group(2)) == pytest.approx(len(pcm) / (2 * rate), abs=0.01)
    assert int(wrote.group(4)) >= 1
    first_byte = _figure(result.stdout, "TTFA first byte")
    assert _figure(result.stdout, "TTFA audible") >= first_byte > 0
    assert "(leading silence " in result.stdout
    assert re.search(r"^longest gap\s*: ", result.stdout, re.M)
    assert ("no stall" in result.stdout) != ("WOULD HAVE STALLED" in result.stdout)


@pytest.mark.parametrize(
    ("chunks", "verdict"),
    [
        # One chunk of 0.1 s (one write, one read on loopback): the player starts with all
        # the audio there is, so no stall is possible, however late it came.
        (((0.0, 4800),), "no stall"),
        # 0.1 s of audio, then 1.5 s of nothing: about 1.4 s behind. The server enforces
        # the gap between its writes (the second cannot be read sooner); the verdict also
        # needs the example (another process) to read the first chunk within ~1.4 s of its
        # write, which only a process starved that long would miss.
        (((0.0, 4800), (1.5, 4800)), "WOULD HAVE STALLED"),
    ],
)
def test_run_streaming_says_whether_a_player_would_have_stalled(
    tmp_path: Path, chunks: tuple, verdict: str
) -> None:
    with start_scripted_server(Script(chunks=chunks)) as server:
        result = python_example(
            "run_streaming.py", "--base-url", server.base_url, "--text", "Hi.",
            "--out", str(tmp_path / "s.wav"),
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert verdict in result.stdout
    if verdict == "WOULD HAVE STALLED":
        underrun = float(re.search(r"worst underrun ([0-9.]+) s", result.stdout).group(1))
        assert underrun > 0.5
    assert read_wav(tmp_path / "s.wav")[1] == 24000  # the rate came from the WAV header


@pytest.mark.parametrize(
    ("args", "voice_fields"),
    [
        ((), {"speaker": "joe", "task_type": "CustomVoice"}),  # nothing given: the local voice
        (("--voice", "thetalker_ref"), {"voice": "thetalker_ref", "task_type": "CustomVoice"}),
        (("--speaker", "Ryan"), {"speaker": "Ryan", "task_type": "CustomVoice"}),
        (("--ref-audio", str(REF_WAV), "--ref-text", "Hi."), {"task_type": "Base"}),
    ],
)
def test_run_streaming_host_port_and_the_voice_in_the_body(
    tmp_path: Path, args: tuple[str, ...], voice_fields: dict[str, str]
) -> None:
    with start_scripted_server(Script(chunks=((0.0, 4800),))) as server:
        result = python_example(
            "run_streaming.py", "--host", "127.0.0.1", "--port", str(server.port),
            "--text", "Hi.", "--out", str(tmp_path / "s.wav"), *args,
        )  # fmt: skip
        bodies = [r.body for r in server.requests]
    assert result.returncode == 0, result.stderr
    assert len(bodies) == 1
    body = bodies[0]
    for key, value in voice_fields.items():
        assert body[key] == value, body
    assert {"voice", "speaker", "ref_audio"} & set(body) == (
        {"ref_audio"} if "--ref-audio" in args else set(voice_fields) - {"task_type"}
    )


def test_run_streaming_pcm_needs_a_sample_rate() -> None:
    result = python_example("run_streaming.py", "--text", "Hi.", "--format", "pcm")
    assert result.returncode == 2 and "--sample-rate" in result.stderr


def test_run_streaming_failed_request_exits_1(tmp_path: Path) -> None:
    with start_scripted_server(Script(mode="http_error", status=503)) as server:
        result = python_example(
            "run_streaming.py", "--base-url", server.base_url, "--text", "Hi.",
            "--out", str(tmp_path / "s.wav"),
        )  # fmt: skip
    assert result.returncode == 1
    assert "HTTP 503" in result.stderr and not (tmp_path / "s.wav").exists()


# -- run_long_text.py -------------------------------------------------------------------------

CHAPTER = (
    'Dr. Smith arrived at 3.30 sharp. "Is it ready?" she asked.\n\n'
    "The results, e.g. the figures in table two, were fine... Everyone left."
)


@pytest.mark.slow
def test_run_long_text_joins_the_parts_in_text_order(local_server: str, tmp_path: Path) -> None:
    chapter = tmp_path / "chapter.txt"
    chapter.write_text(CHAPTER, encoding="utf-8")
    out = tmp_path / "chapter.wav"
    result = python_example(
        "run_long_text.py", "--base-url", local_server, "--text-file", str(chapter),
        "--concurrency", "2", "--out", str(out), "--compare-sequential",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    parts = split_sentences(CHAPTER)
    assert len(parts) == 4
    rows = [line for line in result.stdout.splitlines() if re.match(r"\s+\d+\s+\d+\s", line)]
    assert len(rows) == len(parts)
    for line in ("parts", "total wall time", "total audio", "first audio byte"):
        assert re.search(rf"^{line}\s*: ", result.stdout, re.M), line
    assert "sequential wall time   : " in result.stdout  # measured: no upper bound printed
    assert "sequential upper bound" not in result.stdout
    # The deterministic voice makes each part's audio reproducible: the joined file must be
    # exactly the parts, each spoken alone, in the order of the text.
    expected = b"".join(speak_pcm(local_server, p) for p in parts)
    joined, rate, _, _ = read_wav(out)
    assert rate == PIPER_RATE
    assert joined == expected


def test_run_long_text_reports_a_failed_part_and_leaves_it_out(tmp_path: Path) -> None:
    chapter = tmp_path / "chapter.txt"
    # Paragraph breaks: "boom" in lower case would not start a sentence of its own.
    chapter.write_text("First part here.\n\nboom this part fails.\n\nLast part.", encoding="utf-8")
    out = tmp_path / "joined.wav"
    with start_scripted_server(Script(chunks=((0.0, 4800),))) as server:
        server.add_script("boom", Script(mode="http_error", status=500, message="engine died"))
        result = python_example(
            "run_long_text.py", "--base-url", server.base_url, "--text-file", str(chapter),
            "--out", str(out),
        )  # fmt: skip
    assert result.returncode == 1
    assert "FAILED" in result.stdout and "part 2 failed" in result.stderr
    assert "engine died" in result.stderr
    assert "3 at concurrency 8, 1 failed" in result.stdout
    assert re.search(r"^\s+2\s+\d+\s+FAILED \(HTTP 500", result.stdout, re.M), result.stdout
    assert len(read_wav(out)[0]) == 2 * 4800  # the two good parts, nothing of the bad one


def test_run_long_text_truncated_stream_is_a_failure(tmp_path: Path) -> None:
    chapter = tmp_path / "chapter.txt"
    chapter.write_text("cut this one is cut off. The other one is fine.", encoding="utf-8")
    with start_scripted_server(Script(chunks=((0.0, 4800),))) as server:
        server.add_script("cut", Script(chunks=((0.0, 4800), (0.05, 4800)), mode="cut"))
        result = python_example(
            "run_long_text.py", "--base-url", server.base_url, "--text-file", str(chapter),
            "--out", str(tmp_path / "o.wav"),
        )  # fmt: skip
    assert result.returncode == 1
    assert "part 1 failed" in result.stderr


def test_run_long_text_empty_file_is_a_usage_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n", encoding="utf-8")
    result = python_example("run_long_text.py", "--text-file", str(empty))
    assert result.returncode == 2 and str(empty) in result.stderr


# -- serve.sh ---------------------------------------------------------------------------------


def _start_serve_sh(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("wb") as fh:
        return subprocess.Popen(
            ["bash", str(EXAMPLES / "serve.sh"), *args],
            cwd=ROOT,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def test_serve_sh_unknown_name_exits_2_listing_the_names() -> None:
    result = run(["bash", str(EXAMPLES / "serve.sh"), "no-such-model"])
    assert result.returncode == 2 and "qwen3tts17b" in result.stderr


@pytest.mark.slow
def test_serve_sh_piper_joe_serves_locally_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    proc = _start_serve_sh(["piper-joe", str(port)], dict(os.environ), tmp_path / "serve.log")
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        assert len(speak_pcm(f"http://127.0.0.1:{port}", "Hello.")) > 0
        proc.send_signal(signal.SIGTERM)  # to the script only: it must stop its server
        assert proc.wait(30) == 143
        assert not port_open(port)
    finally:
        stop_group(proc)
    log = (tmp_path / "serve.log").read_text()
    assert "thetalker-serve-local" in log and "piper-joe.yaml" in log


def test_serve_sh_moss_under_mps_with_the_vllm_omni_standin(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PATH": f"{STANDINS}{os.pathsep}{os.environ['PATH']}",
        "MPS": "1",
        "GRACE_S": "5",
        "TMPDIR": str(tmp_path),
        "STANDIN_WORKERS": "2",
    }
    env.pop("SPEAKER_SAMPLES_DIR", None)
    proc = _start_serve_sh(["tuned", str(port)], env, tmp_path / "serve.log")  # alias of moss
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, timeout_s=60)
        group = session_pids(proc.pid)
        server = [p for p in group if "serve" in cmdline(p) and "vllm-omni" in cmdline(p)]
        assert len(server) == 1
        argv = cmdline(server[0])
        assert "OpenMOSS-Team/MOSS-TTS" in argv and "--omni" in argv
        assert "--init-timeout 1800" in argv and "--stage-init-timeout 1800" in argv
        assert "moss.yaml" in argv
        environ = _environ(server[0])
        assert environ["THESTAGE_VLLM_OMNI"] == "0"
        assert environ["SPEAKER_SAMPLES_DIR"].startswith(str(tmp_path))
        pipe = Path(environ["CUDA_MPS_PIPE_DIRECTORY"])
        assert (pipe / "standin-daemon.pid").exists()  # the daemon runs beside the server
        daemon = int((pipe / "standin-daemon.pid").read_text())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 143
        assert not any(pid_alive(p) for p in group if p != proc.pid)  # workers too
        deadline = time.monotonic() + 10
        while pid_alive(daemon) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not pid_alive(daemon)
        assert not pipe.exists()  # the temporary folders are removed
    finally:
        stop_group(proc)


def test_serve_sh_stops_the_workers_of_a_server_that_died(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PATH": f"{STANDINS}{os.pathsep}{os.environ['PATH']}",
        "GRACE_S": "5",
        "TMPDIR": str(tmp_path),
        "STANDIN_MODE": "die",  # the server exits during startup, its stage workers stay
        "STANDIN_WORKERS": "2",
    }
    proc = _start_serve_sh(["omnivoice", str(free_port())], env, tmp_path / "serve.log")
    try:
        assert proc.wait(60) == 3  # the server's own exit status
        left = [p for p in session_pids(proc.pid) if pid_alive(p)]
        assert not left, f"left running: {[cmdline(p) for p in left]}"
        assert "stage 1 worker started" in (tmp_path / "serve.log").read_text()
    finally:
        stop_group(proc)
        for pid in session_pids(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


# -- load_test_locust.py ----------------------------------------------------------------------


def _locust(base_url: str, csv_prefix: Path, *extra: str) -> subprocess.CompletedProcess:
    return run(
        [
            shutil.which("locust") or "locust",
            *("-f", str(EXAMPLES / "load_test_locust.py"), "--headless", "--only-summary"),
            *("-u", "1", "-r", "1", "-t", "3s", "--host", base_url, "--csv", str(csv_prefix)),
            *extra,
        ],
        timeout=90,
    )


def _stats(csv_prefix: Path) -> dict[str, dict[str, str]]:
    with open(f"{csv_prefix}_stats.csv", newline="") as fh:
        return {row["Type"]: row for row in csv.DictReader(fh) if row["Type"]}


@pytest.mark.slow
def test_locust_reports_ttfa_apart_from_total_time(local_server: str, tmp_path: Path) -> None:
    result = _locust(local_server, tmp_path / "run", "--arrival-rate", "2", "--drain-timeout", "5")
    assert result.returncode == 0, result.stderr[-2000:]
    stats = _stats(tmp_path / "run")
    assert int(stats["TTFA"]["Request Count"]) > 0
    assert int(stats["TOTAL"]["Request Count"]) >= int(stats["TTFA"]["Request Count"])
    assert int(stats["TOTAL"]["Failure Count"]) == 0
    ttfa = float(stats["TTFA"]["Average Response Time"])
    assert 0 < ttfa <= float(stats["TOTAL"]["Average Response Time"])


def test_locust_arrivals_do_not_wait_for_answers(tmp_path: Path) -> None:
    # Every answer takes 2 s. One closed-loop user would send at most 2 requests in 3 s;
    # an open-loop arrival process at 5/s sends about 15 (seeded, so the same every run).
    slow = Script(chunks=((0.0, 4800),), response_delay_s=2.0)
    with start_scripted_server(slow) as server:
        result = _locust(
            server.base_url, tmp_path / "open", "--arrival-rate", "5", "--drain-timeout", "3"
        )
        received = len(server.requests)
    assert result.returncode == 0, result.stderr[-2000:]
    assert received >= 6
    assert int(_stats(tmp_path / "open")["TTFA"]["Request Count"]) >= 6


# -- run_sweep.sh -----------------------------------------------------------------------------


@pytest.mark.slow
def test_run_sweep_runs_every_point_and_prints_one_line_each(
    local_server: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "BASE_URL": local_server,
        "CONCURRENCY": "1 2",
        "REQUESTS": "2",
        "WARMUP": "1",
    }
    result = run(["bash", str(EXAMPLES / "run_sweep.sh"), "piper-joe", str(tmp_path)], env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    for c in (1, 2):
        summary = json.loads((tmp_path / f"c{c}" / "summary.json").read_text())
        assert summary["concurrency"] == c and summary["n_ok"] == 2
        assert re.search(rf"^\s+{c}\s+2/2\s", result.stdout, re.M), result.stdout


def test_run_sweep_reports_a_failed_point_and_exits_1(tmp_path: Path) -> None:
    with start_scripted_server(Script(mode="http_error", status=500), sample_rate=22050) as srv:
        env = {**os.environ, "BASE_URL": srv.base_url, "CONCURRENCY": "1", "REQUESTS": "1"}
        env["WARMUP"] = "0"
        result = run(["bash", str(EXAMPLES / "run_sweep.sh"), "piper-joe", str(tmp_path)], env=env)
    assert result.returncode == 1
    assert "failed point(s): c=1" in result.stderr


def test_run_sweep_in_the_originals_positional_form(tmp_path: Path) -> None:
    # run_sweep.sh OUT_DIR HOST:PORT C...: the model is $NAME's (default piper-joe, 22050 Hz).
    with start_scripted_server(Script(chunks=((0.0, 4410),)), sample_rate=22050) as server:
        env = {**os.environ, "REQUESTS": "1", "WARMUP": "0"}
        result = run(
            ["bash", str(EXAMPLES / "run_sweep.sh"), str(tmp_path), f"127.0.0.1:{server.port}",
             "1", "2"],
            env=env,
        )  # fmt: skip
        speakers = {r.body.get("speaker") for r in server.requests}
    assert result.returncode == 0, result.stderr[-2000:]
    assert speakers == {"joe"}
    for c in (1, 2):
        assert json.loads((tmp_path / f"c{c}" / "summary.json").read_text())["n_ok"] == 1
        assert re.search(rf"^\s+{c}\s+1/1\s", result.stdout, re.M), result.stdout


def test_run_sweep_unknown_name_exits_2(tmp_path: Path) -> None:
    result = run(["bash", str(EXAMPLES / "run_sweep.sh"), "nope", str(tmp_path)])
    assert result.returncode == 2
