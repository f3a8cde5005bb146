"""The original benchmark's README commands, typed as its users type them, and what they print.

Each command is the original's text (TheStageAI/TheTalker's README; examples/README.md
lists them), run by bash in a scratch folder that holds `prompts/`,
`reference/` and `examples/` as links to this repository's. The only changes are the ones a
CPU machine forces: the port is a free loopback port instead of 8091 (the embedded server
`thetalker-serve-local`, or the scripted stand-in where the command clones a voice, which
the Piper voice cannot), and the voice is the local `joe` where the original names a model's
speaker or a registered clone. GPU servers are the stand-ins in tests/standins. Every server
started here is stopped here.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import urllib.request
import wave
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.processes import stop_group, wait_healthy
from tests.support.scripted_server import Script, start_scripted_server
from tests.support.server_fixtures import LocalServer, local_server  # noqa: F401 (the fixture)
from thetalker.lifecycle.deploy import ALIASES, REGISTRY, names, resolve
from thetalker.lifecycle.launch import free_port
from thetalker.util.text import split_sentences

ROOT = REPO
STANDINS = ROOT / "tests" / "standins"
TRANSCRIPT = (ROOT / "reference" / "ref.txt").read_text(encoding="utf-8").strip()
PIPER_RATE = 22050


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A scratch folder laid out like a clone: outputs land here, never in the repository."""
    for part in ("prompts", "reference", "examples"):
        (tmp_path / part).symlink_to(ROOT / part)
    return tmp_path


def sh(
    command: str, cwd: Path, timeout: float = 300, **env: str
) -> subprocess.CompletedProcess[str]:
    """`command` as a user types it in bash, in `cwd`, with `env` added to the environment."""
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def wav_info(path: Path) -> tuple[int, int]:
    """(sample rate, frames) of a WAV file."""
    with wave.open(str(path), "rb") as w:
        return w.getframerate(), w.getnframes()


def voices(base_url: str) -> list[str]:
    with urllib.request.urlopen(base_url + "/v1/audio/voices", timeout=10) as r:
        return json.load(r)["voices"]


def uploaded_ref_text(base_url: str, name: str) -> str | None:
    """The transcript the server stored with the uploaded voice `name`."""
    with urllib.request.urlopen(base_url + "/v1/audio/voices", timeout=10) as r:
        uploaded = json.load(r)["uploaded_voices"]
    return next(v.get("ref_text") for v in uploaded if v["name"] == name)


def delete_voice(base_url: str, name: str) -> None:
    request = urllib.request.Request(f"{base_url}/v1/audio/voices/{name}", method="DELETE")
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.status == 200


def check_streaming_report(stdout: str, workdir: Path, out: str, rate: int) -> None:
    """run_streaming.py's lines: the file with its audio and chunks, both TTFAs, the longest
    gap, and the player's verdict with the worst underrun."""
    wrote = re.search(r"^wrote (\S+) \(([0-9.]+) s of audio at (\d+) Hz in (\d+) chunks?", stdout)
    assert wrote, stdout
    assert (wrote.group(1), int(wrote.group(3))) == (out, rate)
    file_rate, frames = wav_info(workdir / out)
    assert file_rate == rate
    assert float(wrote.group(2)) == pytest.approx(frames / rate, abs=0.01)
    first = re.search(r"^TTFA first byte\s*:\s*([0-9.]+) s$", stdout, re.M)
    audible = re.search(
        r"^TTFA audible\s*:\s*([0-9.]+) s \(leading silence ([0-9.]+) s\)", stdout, re.M
    )
    assert first and audible, stdout
    assert float(audible.group(1)) >= float(first.group(1)) > 0
    assert re.search(r"^longest gap\s*: (n/a|[0-9.]+ s)", stdout, re.M), stdout
    verdict = re.search(
        r"^playback\s*: (no stall|WOULD HAVE STALLED).*worst underrun ([0-9.]+) s", stdout, re.M
    )
    assert verdict, stdout


# -- deploy configs -----------------------------------------------------------------------------


def test_thetalker_deploy_lists_every_name_with_its_model_and_aliases(workdir: Path) -> None:
    result = sh("thetalker-deploy", workdir)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == names()
    for line in lines:
        assert REGISTRY[line.split()[0]].model_id in line.split()
    for alias, name in ALIASES.items():  # batch32 for voxcpm2, tuned for moss
        assert alias in next(line for line in lines if line.split()[0] == name)


def test_thetalker_deploy_name_prints_the_path(workdir: Path) -> None:
    result = sh("thetalker-deploy qwen3tts17b", workdir)
    assert result.returncode == 0, result.stderr
    path = Path(result.stdout.strip())
    assert path == resolve("qwen3tts17b").path and path.is_file()


def test_thetalker_deploy_sample_rate_before_the_name(workdir: Path) -> None:
    result = sh("thetalker-deploy --sample-rate voxcpm2", workdir)
    assert (result.returncode, result.stdout) == (0, "48000\n"), result.stderr


# -- voices -------------------------------------------------------------------------------------


def test_thetalker_voice_registers_without_a_subcommand(
    local_server: LocalServer,  # noqa: F811
    workdir: Path,
) -> None:
    command = (
        f"thetalker-voice --port {local_server.port} --name thetalker_ref "
        f'--ref-audio reference/ref.wav --ref-text "{TRANSCRIPT}"'
    )
    result = sh(command, workdir)
    try:
        assert result.returncode == 0, result.stderr
        assert "thetalker_ref" in result.stdout
        assert "thetalker_ref" in voices(local_server.base_url)
        assert uploaded_ref_text(local_server.base_url, "thetalker_ref") == TRANSCRIPT
    finally:
        if "thetalker_ref" in voices(local_server.base_url):
            delete_voice(local_server.base_url, "thetalker_ref")


def test_the_curl_upload_registers_the_voice(
    local_server: LocalServer,  # noqa: F811
    workdir: Path,
) -> None:
    command = (
        f"curl -sS http://127.0.0.1:{local_server.port}/v1/audio/voices -F name=thetalker_ref "
        '-F consent=thetalker -F ref_text="$REF_TEXT" -F audio_sample=@"$REF_AUDIO"'
    )
    result = sh(command, workdir, REF_TEXT=TRANSCRIPT, REF_AUDIO="reference/ref.wav")
    try:
        assert result.returncode == 0, result.stderr
        answer = json.loads(result.stdout)
        assert answer["success"] is True and answer["voice"]["name"] == "thetalker_ref"
        assert uploaded_ref_text(local_server.base_url, "thetalker_ref") == TRANSCRIPT
    finally:
        if "thetalker_ref" in voices(local_server.base_url):
            delete_voice(local_server.base_url, "thetalker_ref")


# -- serving (the GPU server is the stand-in) ---------------------------------------------------


def _serve(command: str, cwd: Path, log: Path, **env: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as fh:
        return subprocess.Popen(
            ["bash", "-c", command],
            cwd=cwd,
            env={**os.environ, "PATH": f"{STANDINS}{os.pathsep}{os.environ['PATH']}", **env},
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


@pytest.mark.parametrize(
    ("model", "served"),
    [
        (None, "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"),  # the deploy name's own checkpoint
        ("Qwen/Qwen3-TTS-12Hz-1.7B-Base", "Qwen/Qwen3-TTS-12Hz-1.7B-Base"),  # MODEL= override
    ],
)
def test_serve_sh_under_mps_with_the_vllm_omni_standin(
    workdir: Path, model: str | None, served: str
) -> None:
    port = free_port()
    extra = {"MODEL": model} if model else {}
    log = workdir / "serve.log"
    proc = _serve(
        f"MPS=1 examples/serve.sh qwen3tts17b {port}",
        workdir,
        log,
        GRACE_S="5",
        TMPDIR=str(workdir),
        **extra,
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, timeout_s=60)
        text = log.read_text()
        assert "MPS daemon started" in text
        assert re.search(rf"^\+ vllm-omni serve {re.escape(served)} --omni ", text, re.M), text
        assert f"--deploy-config {resolve('qwen3tts17b').path}" in text
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(30) in (143, -signal.SIGTERM)
    finally:
        stop_group(proc)


def test_vllm_omni_serve_with_the_deploy_file_it_names(workdir: Path) -> None:
    port = free_port()
    command = (
        "THESTAGE_VLLM_OMNI=0 vllm-omni serve Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice --omni "
        f"--trust-remote-code --port {port} "
        '--deploy-config "$(thetalker-deploy qwen3tts17b)"'
    )
    proc = _serve(command, workdir, workdir / "vllm.log")
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, timeout_s=60)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
            served = [m["id"] for m in json.load(r)["data"]]
        assert served == ["Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"]
    finally:
        stop_group(proc, grace_s=5)


# -- one request, one stream, a long text -------------------------------------------------------


@pytest.mark.slow
def test_request_sh_streams_one_request_to_out_pcm(
    local_server: LocalServer,  # noqa: F811
    workdir: Path,
) -> None:
    result = sh("examples/request.sh", workdir, PORT=str(local_server.port))
    assert result.returncode == 0, result.stderr
    assert "first byte" in result.stderr and "wrote out.pcm" in result.stderr
    pcm = (workdir / "out.pcm").read_bytes()
    assert len(pcm) % 2 == 0 and len(pcm) / (2 * PIPER_RATE) > 0.5


def test_request_sh_in_the_originals_positional_form_clones(workdir: Path) -> None:
    with start_scripted_server(Script(chunks=((0.0, 4800), (0.05, 4800)))) as server:
        command = (
            f'examples/request.sh reference/ref.wav "{TRANSCRIPT}" "Hello there." '
            f"127.0.0.1:{server.port}"
        )
        result = sh(command, workdir)
        bodies = [r.body for r in server.requests]
    assert result.returncode == 0, result.stderr
    assert [b["task_type"] for b in bodies] == ["Base"]
    body = bodies[0]
    assert (body["input"], body["ref_text"], body["language"]) == (
        "Hello there.",
        TRANSCRIPT,
        "English",
    )
    assert body["ref_audio"].startswith("data:audio/wav;base64,")
    assert (body["stream"], body["stream_format"], body["response_format"]) == (
        True,
        "audio",
        "pcm",
    )
    assert (workdir / "out.pcm").stat().st_size == 9600


def test_run_streaming_with_a_reference_clip(workdir: Path) -> None:
    # Cloning: the scripted stand-in takes the clip (the Piper voice cannot clone).
    with start_scripted_server(Script(chunks=((0.0, 4800), (0.05, 4800), (0.1, 4800)))) as server:
        command = (
            f"python examples/run_streaming.py --port {server.port} --ref-audio reference/ref.wav "
            f'--ref-text "{TRANSCRIPT}" --text "The quick brown fox jumps over the lazy dog." '
            "--out out.wav"
        )
        result = sh(command, workdir)
        bodies = [r.body for r in server.requests]
    assert result.returncode == 0, result.stderr
    assert len(bodies) == 1 and bodies[0]["task_type"] == "Base"
    assert bodies[0]["ref_text"] == TRANSCRIPT and "speaker" not in bodies[0]
    check_streaming_report(result.stdout, workdir, "out.wav", 24000)
    assert "no stall" in result.stdout


@pytest.mark.slow
def test_run_streaming_with_a_voice(
    local_server: LocalServer,  # noqa: F811
    workdir: Path,
) -> None:
    command = (
        f"python examples/run_streaming.py --port {local_server.port} --voice joe "
        '--text "Hello there. This is one streamed answer." --out out.wav'
    )
    result = sh(command, workdir)
    assert result.returncode == 0, result.stderr
    check_streaming_report(result.stdout, workdir, "out.wav", PIPER_RATE)


def test_run_streaming_with_the_deploy_names_sample_rate(workdir: Path) -> None:
    # VoxCPM2 streams at 48 kHz: the stand-in does too, and the rate must agree.
    with start_scripted_server(
        Script(chunks=((0.0, 9600), (0.05, 9600))), sample_rate=48000
    ) as srv:
        command = (
            f'python examples/run_streaming.py --sample-rate "$(thetalker-deploy --sample-rate '
            f'voxcpm2)" --port {srv.port} --text "Hello." --out out.wav'
        )
        result = sh(command, workdir)
        wrong = sh(
            f'python examples/run_streaming.py --sample-rate "$(thetalker-deploy --sample-rate '
            f'qwen3tts17b)" --port {srv.port} --text "Hello." --out wrong.wav',
            workdir,
        )
    assert result.returncode == 0, result.stderr
    check_streaming_report(result.stdout, workdir, "out.wav", 48000)
    assert wrong.returncode == 1 and "48000 Hz, --sample-rate says 24000" in wrong.stderr
    assert not (workdir / "wrong.wav").exists()


CHAPTER = (
    'Dr. Smith arrived at 3.30 sharp. "Is it ready?" she asked.\n\n'
    "The results, e.g. the figures in table two, were fine... Everyone left.\n"
)


@pytest.mark.slow
@pytest.mark.parametrize("compare", [False, True])
def test_run_long_text(
    local_server: LocalServer,  # noqa: F811
    workdir: Path,
    compare: bool,
) -> None:
    (workdir / "chapter.txt").write_text(CHAPTER, encoding="utf-8")
    command = (
        f"python examples/run_long_text.py --port {local_server.port} --voice joe "
        "--text-file chapter.txt --concurrency 8 --out chapter.wav"
        + (" --compare-sequential" if compare else "")
    )
    result = sh(command, workdir)
    assert result.returncode == 0, result.stderr
    parts = split_sentences(CHAPTER)
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+([0-9.]+) s\s+([0-9.]+) s\s", result.stdout, re.M)
    assert [int(i) for i, *_ in rows] == list(range(1, len(parts) + 1))
    assert [int(chars) for _, chars, *_ in rows] == [len(p) for p in parts]
    for _, _, first, done in rows:
        assert 0 < float(first) <= float(done)
    assert f"parts                  : {len(parts)} at concurrency 8\n" in result.stdout
    wall = float(re.search(r"^total wall time\s*: ([0-9.]+) s", result.stdout, re.M).group(1))
    assert wall >= max(float(done) for *_, done in rows)
    audio = float(re.search(r"^total audio\s*: ([0-9.]+) s", result.stdout, re.M).group(1))
    rate, frames = wav_info(workdir / "chapter.wav")
    assert rate == PIPER_RATE and audio == pytest.approx(frames / rate, abs=0.02)
    first_byte = re.search(r"^first audio byte\s*: ([0-9.]+) s", result.stdout, re.M)
    assert float(first_byte.group(1)) == min(float(first) for _, _, first, _ in rows)
    if compare:
        assert re.search(r"^sequential wall time\s*: [0-9.]+ s \(measured", result.stdout, re.M)
        assert "sequential upper bound" not in result.stdout
    else:
        assert re.search(r"^sequential upper bound\s*: [0-9.]+ s", result.stdout, re.M)
        assert "sequential wall time" not in result.stdout


# -- the benchmark and a sweep ------------------------------------------------------------------


@pytest.mark.slow
def test_thetalker_bench_at_c8(
    local_server: LocalServer,  # noqa: F811
    workdir: Path,
) -> None:
    requests = 8
    command = (
        f"thetalker-bench --port {local_server.port} "
        "--texts-jsonl prompts/seed_tts_eval_en_100.jsonl "
        "--task-type CustomVoice --speaker joe "
        f"--concurrency 8 --requests {requests} --warmup 8 --seed 42 --out-dir out/c8"
    )
    result = sh(command, workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((workdir / "out/c8/summary.json").read_text())
    assert summary["concurrency"] == 8 and summary["n_ok"] == requests
    scored = [
        json.loads(line)
        for line in (workdir / "out/c8/records.jsonl").read_text().splitlines()
        if line.strip()
    ]
    assert len([r for r in scored if not r.get("warmup")]) == requests


@pytest.mark.slow
def test_run_sweep_sh_runs_the_originals_two_points(
    local_server: LocalServer,  # noqa: F811
    workdir: Path,
) -> None:
    # The original's protocol points, c8 and c32, kept short by the environment.
    result = sh(
        "examples/run_sweep.sh", workdir, PORT=str(local_server.port), REQUESTS="2", WARMUP="1"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for c in (8, 32):
        summary = json.loads((workdir / f"results/sweep/piper-joe/c{c}/summary.json").read_text())
        assert summary["concurrency"] == c and summary["n_ok"] == 2
        assert re.search(rf"^\s+{c}\s+2/2\s", result.stdout, re.M), result.stdout


@pytest.mark.slow
def test_locust_headless_for_a_few_seconds(
    local_server: LocalServer,  # noqa: F811
    workdir: Path,
) -> None:
    command = (
        "locust -f examples/load_test_locust.py --headless --only-summary -u 1 -r 1 -t 6s "
        f"--port {local_server.port} --voice joe --arrival-rate 2 --drain-timeout 5 "
        "--csv locust"
    )
    result = sh(command, workdir, timeout=90)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(workdir / "locust_stats.csv", newline="") as fh:
        stats = {row["Type"]: row for row in csv.DictReader(fh) if row["Type"]}
    assert int(stats["TTFA"]["Request Count"]) > 0
    assert int(stats["TOTAL"]["Failure Count"]) == 0
    assert (
        0
        < float(stats["TTFA"]["Average Response Time"])
        <= float(stats["TOTAL"]["Average Response Time"])
    )
