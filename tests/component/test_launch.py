"""Server lifecycle against the executable stand-ins in tests/standins (real processes, loopback).

The stand-ins play vllm-omni, nvidia-cuda-mps-control and nvidia-smi, which cannot run here.
Every test checks by PID that no server, stage worker or MPS daemon is left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.processes import pid_alive
from thetalker.data import wavio
from thetalker.lifecycle.deploy import resolve
from thetalker.lifecycle.gpu import gpu_compute_pids, gpu_is_empty
from thetalker.lifecycle.launch import (
    VLLM_OMNI_STOCK_ENV,
    ServerSpec,
    build_command,
    free_port,
    launch_server,
)
from thetalker.lifecycle.processes import group_alive
from thetalker.lifecycle.readiness import ServerStartError

STANDINS = REPO / "tests" / "standins"
QWEN = resolve("qwen3tts17b")
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def server_pids(log_path: Path) -> list[int]:
    """PIDs the stand-in server logged ('(APIServer pid=N)')."""
    if not log_path.exists():
        return []
    return sorted({int(p) for p in re.findall(r"APIServer pid=(\d+)", log_path.read_text())})


def mps_pids(tmp_path: Path) -> list[int]:
    record = tmp_path / "mps.pids"
    return [int(x) for x in record.read_text().split()] if record.exists() else []


@pytest.fixture(autouse=True)
def standin_env(monkeypatch, tmp_path):
    """Stand-ins first on PATH, default behaviour; afterwards kill anything a failure left."""
    monkeypatch.setenv("PATH", f"{STANDINS}{os.pathsep}{os.environ['PATH']}")
    for key in list(os.environ):
        if key.startswith("STANDIN_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("STANDIN_MPS_PIDFILE", str(tmp_path / "mps.pids"))
    yield
    for pid in server_pids(tmp_path / "server.log"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    for pid in mps_pids(tmp_path):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def vllm_spec(tmp_path: Path, **overrides) -> ServerSpec:
    fields = {
        "launcher": "vllm-omni",
        "model_id": QWEN.model_id,
        "deploy_config": QWEN.path,
        "env": dict(VLLM_OMNI_STOCK_ENV),
        "log_path": tmp_path / "server.log",
        "health_timeout_s": 60.0,
        "stop_grace_s": 5.0,
    }
    fields.update(overrides)
    return ServerSpec(**fields)


def get_json(url: str) -> dict:
    with NO_PROXY.open(url, timeout=10) as resp:
        return json.loads(resp.read())


def write_wav(path: Path, seconds: float, rate: int = 24000) -> Path:
    return wavio.write_wav(path, b"\x00\x01" * int(seconds * rate), rate)


def assert_all_gone(pids: list[int]) -> None:
    assert pids, "expected at least one process to check"
    for pid in pids:
        assert not group_alive(pid), f"process group {pid} still has members"
        assert not pid_alive(pid), f"pid {pid} still runs"


# --- healthy server --------------------------------------------------------------------------


def test_healthy_server_serves_and_its_whole_group_stops(tmp_path, monkeypatch):
    monkeypatch.setenv("STANDIN_WORKERS", "2")  # stage workers share the server's group
    spec = vllm_spec(tmp_path, extra_args=["--init-timeout", "1800"])
    before = signal.getsignal(signal.SIGTERM)
    with launch_server(spec) as server:
        port = server.port
        assert server.base_url == f"http://127.0.0.1:{port}"
        assert server.command[1:] == [
            "serve",
            QWEN.model_id,
            "--omni",
            "--trust-remote-code",
            "--log-stats",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--deploy-config",
            str(QWEN.path),
            "--init-timeout",
            "1800",
        ]
        assert Path(server.command[0]).name == "vllm-omni"
        speakers = server.env["SPEAKER_SAMPLES_DIR"]
        assert server.env == {"THESTAGE_VLLM_OMNI": "0", "SPEAKER_SAMPLES_DIR": speakers}
        assert Path(speakers).is_dir()
        assert get_json(server.base_url + "/health") == {"status": "healthy"}
        assert get_json(server.base_url + "/v1/models")["data"][0]["id"] == QWEN.model_id
        assert get_json(server.base_url + "/version")["version"] == "0.30.0"
        body = json.dumps(
            {"input": "Hello there.", "speaker": "ryan", "stream": True}
            | {"stream_format": "audio", "response_format": "pcm"}
        ).encode()
        req = urllib.request.Request(
            server.base_url + "/v1/audio/speech",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with NO_PROXY.open(req, timeout=30) as resp:
            assert resp.headers["Content-Type"] == "audio/pcm"
            assert resp.headers["Transfer-Encoding"] == "chunked"
            pcm = resp.read()
        assert len(pcm) > 0 and len(pcm) % 2 == 0
        assert signal.getsignal(signal.SIGTERM) is not before  # the guard is installed
        group = server.pid
        assert group_alive(group)
    pids = server_pids(tmp_path / "server.log")
    assert group in pids
    assert_all_gone(pids)
    assert signal.getsignal(signal.SIGTERM) is before  # restored
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
    assert "Application startup complete." in (tmp_path / "server.log").read_text()


def test_server_ignoring_sigterm_is_killed_after_the_grace(tmp_path, monkeypatch):
    monkeypatch.setenv("STANDIN_IGNORE_SIGTERM", "1")
    with launch_server(vllm_spec(tmp_path, stop_grace_s=0.5)) as server:
        group = server.pid
    assert_all_gone([group, *server_pids(tmp_path / "server.log")])


def test_exception_in_the_block_stops_the_server(tmp_path):
    with pytest.raises(RuntimeError, match="boom"), launch_server(vllm_spec(tmp_path)):
        raise RuntimeError("boom")
    assert_all_gone(server_pids(tmp_path / "server.log"))


# --- startup failures ------------------------------------------------------------------------


def test_server_that_exits_during_startup_fails_at_once_with_log_tail(tmp_path, monkeypatch):
    monkeypatch.setenv("STANDIN_MODE", "die")
    monkeypatch.setenv("STANDIN_STARTUP_S", "0.3")
    with (
        pytest.raises(ServerStartError) as info,
        launch_server(vllm_spec(tmp_path, health_timeout_s=300.0)),
    ):
        pytest.fail("the block must not run")
    message = str(info.value)
    # Why it gave up, not how soon: the exit path names the exit code; the timeout path, which
    # only comes once the health deadline has passed, says "not healthy after".
    assert "exited with code 3 during startup" in message
    assert "not healthy after" not in message
    assert "CUDA out of memory" in message  # from the log's tail
    assert "CUDA out of memory" in info.value.log_tail
    # Its stage worker outlived the server process: the group was still stopped.
    assert_all_gone(server_pids(tmp_path / "server.log"))


@pytest.mark.parametrize("mode", ["hang", "unhealthy"])
def test_server_that_never_gets_healthy_fails_at_timeout_leaving_nothing(
    tmp_path, monkeypatch, mode
):
    monkeypatch.setenv("STANDIN_MODE", mode)
    monkeypatch.setenv("STANDIN_IGNORE_SIGTERM", "1")  # forces the SIGKILL step too
    # The message is the cause: the launcher says "not healthy after" only once its health
    # deadline has passed (no clock is read here).
    with (
        pytest.raises(ServerStartError, match=r"not healthy after 2 s") as info,
        launch_server(vllm_spec(tmp_path, health_timeout_s=2.0, stop_grace_s=0.5)),
    ):
        pytest.fail("the block must not run")
    assert "during startup" not in str(info.value)
    assert "vLLM-Omni serving" in info.value.log_tail
    assert_all_gone(server_pids(tmp_path / "server.log"))


def test_missing_program_is_a_clear_error(tmp_path):
    with (
        pytest.raises(ServerStartError, match="'no-such-vllm' not found on PATH"),
        launch_server(vllm_spec(tmp_path, executable="no-such-vllm")),
    ):
        pass


def test_bad_deploy_file_fails_with_the_servers_message(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("stages: [unclosed\n")
    with (
        pytest.raises(ServerStartError, match="does not parse"),
        launch_server(vllm_spec(tmp_path, deploy_config=bad)),
    ):
        pass


# --- MPS -------------------------------------------------------------------------------------


def test_mps_daemon_runs_during_the_server_and_stops_after(tmp_path):
    with launch_server(vllm_spec(tmp_path, mps=True)) as server:
        (daemon,) = mps_pids(tmp_path)
        assert pid_alive(daemon)
        pipe = Path(server.env["CUDA_MPS_PIPE_DIRECTORY"])
        assert (pipe / "standin-daemon.pid").read_text() == str(daemon)
        assert Path(server.env["CUDA_MPS_LOG_DIRECTORY"]).is_dir()
        assert server.env["THESTAGE_VLLM_OMNI"] == "0"
    deadline = time.monotonic() + 15
    while pid_alive(daemon) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(daemon)
    assert not pipe.exists()  # the fresh pipe folder is removed with the daemon
    assert_all_gone(server_pids(tmp_path / "server.log"))


def test_mps_daemon_stops_when_the_server_fails_to_start(tmp_path, monkeypatch):
    monkeypatch.setenv("STANDIN_MODE", "die")
    with pytest.raises(ServerStartError), launch_server(vllm_spec(tmp_path, mps=True)):
        pass
    (daemon,) = mps_pids(tmp_path)
    deadline = time.monotonic() + 15
    while pid_alive(daemon) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(daemon)
    assert_all_gone(server_pids(tmp_path / "server.log"))


def test_mps_daemon_that_fails_to_start_starts_no_server(tmp_path, monkeypatch):
    monkeypatch.setenv("STANDIN_MPS_FAIL", "1")
    with (
        pytest.raises(ServerStartError, match="-d exited with code 1") as info,
        launch_server(vllm_spec(tmp_path, mps=True)),
    ):
        pass
    assert "already running" in info.value.log_tail
    assert server_pids(tmp_path / "server.log") == []


# --- SIGTERM (Snakemake stop, Slurm scancel) -------------------------------------------------

CHILD = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from thetalker.lifecycle.launch import ServerSpec, launch_server

    deploy, log, out = sys.argv[1:4]
    spec = ServerSpec(launcher="vllm-omni", model_id="Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice",
                      deploy_config=deploy, log_path=log, mps=True, health_timeout_s=120,
                      stop_grace_s=5)
    with launch_server(spec) as server:
        Path(out).write_text(json.dumps({"pid": server.pid}))
        time.sleep(600)
    """
)


def _start_launcher(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """The CHILD launcher (MPS on), in a process of its own; its server's log."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    log = tmp_path / "server.log"
    cmd = [sys.executable, str(script), str(QWEN.path), str(log), str(tmp_path / "ready.json")]
    return subprocess.Popen(cmd), log


def _wait_for_phase(child: subprocess.Popen, tmp_path: Path, log: Path, phase: str) -> None:
    """Until the launcher serves ("serving") or its server is loading ("startup"), or it
    exits, for 90 s at most."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and child.poll() is None:
        if phase == "serving" and (tmp_path / "ready.json").exists():
            return
        if phase == "startup" and log.exists() and "still loading" in log.read_text():
            return
        time.sleep(0.05)


@pytest.mark.parametrize("phase", ["serving", "startup"])
def test_sigterm_to_the_launcher_leaves_no_server_and_no_mps(tmp_path, monkeypatch, phase):
    if phase == "startup":
        monkeypatch.setenv("STANDIN_MODE", "hang")
    child, log = _start_launcher(tmp_path)
    try:
        _wait_for_phase(child, tmp_path, log, phase)
        assert child.poll() is None, "the launcher exited before the signal"
        pids = server_pids(log)
        assert pids and all(pid_alive(p) for p in pids)
        (daemon,) = mps_pids(tmp_path)
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert_all_gone(pids)
    assert not pid_alive(daemon)


def test_a_sigkilled_launchers_server_and_mps_daemon_are_stopped_by_the_rerun(
    tmp_path, monkeypatch, capfd
):
    """SIGKILL (no cleanup runs) while the server loads inside its MPS daemon: both are left,
    and the next launch of the same job stops both before it starts its own."""
    monkeypatch.setenv("STANDIN_MODE", "hang")
    child, log = _start_launcher(tmp_path)
    try:
        _wait_for_phase(child, tmp_path, log, "startup")
        assert child.poll() is None, "the launcher exited before the kill"
        left = server_pids(log)
        (daemon,) = mps_pids(tmp_path)
        child.kill()
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert left and all(pid_alive(p) for p in left) and pid_alive(daemon)
    assert (tmp_path / "server.mps.json").exists()
    monkeypatch.delenv("STANDIN_MODE")
    with launch_server(vllm_spec(tmp_path, mps=True)) as server:
        assert not any(group_alive(p) for p in left)
        assert not pid_alive(daemon)
        assert server.pid not in left
        new_daemons = [p for p in mps_pids(tmp_path) if p != daemon]
        assert len(new_daemons) == 1 and pid_alive(new_daemons[0])
    err = capfd.readouterr().err
    assert "stopping leftover server PID" in err and "stopping leftover MPS daemon" in err
    assert not pid_alive(new_daemons[0])
    assert not (tmp_path / "server.mps.json").exists()
    assert not (tmp_path / "server.pid.json").exists()


# --- voices ----------------------------------------------------------------------------------


def test_voice_is_registered_once_into_the_runs_speaker_folder(tmp_path):
    clip = write_wav(tmp_path / "ref.wav", seconds=2.0)
    voice = {"name": "Ref", "audio": clip, "ref_text": "A short reference sentence."}
    voices_dir = tmp_path / "speakers"
    spec = vllm_spec(tmp_path, register_voice=voice, voices_dir=voices_dir)
    with launch_server(spec) as server:
        assert server.voice == "Ref"
        assert server.env["SPEAKER_SAMPLES_DIR"] == str(voices_dir)
        listed = get_json(server.base_url + "/v1/audio/voices")
        # 0.30.0 lists built-in speakers, uploads and "default", lowercase.
        assert listed["voices"] == sorted(
            {"ryan", "vivian", "aiden", "dylan", "eric", "ono_anna"}
            | {"serena", "sohee", "uncle_fu", "ref", "default"}
        )
        assert listed["uploaded_voices"][0]["ref_text"] == "A short reference sentence."
        assert (voices_dir / "ref.wav").read_bytes() == clip.read_bytes()
    assert_all_gone(server_pids(tmp_path / "server.log"))


def test_refused_voice_fails_the_start_and_stops_the_server(tmp_path):
    clip = write_wav(tmp_path / "short.wav", seconds=0.5)  # under the 1 s minimum
    spec = vllm_spec(tmp_path, register_voice={"name": "ref", "audio": clip})
    with pytest.raises(ServerStartError, match="HTTP 400.*too short"), launch_server(spec):
        pass
    assert_all_gone(server_pids(tmp_path / "server.log"))


# --- command lines, ports, GPU probe ---------------------------------------------------------


def test_local_command_line():
    spec = ServerSpec(launcher="local", model_id="piper-joe", deploy_config="deploy/p.yaml")
    assert build_command(spec, 8123) == [
        sys.executable,
        "-m",
        "thetalker.server",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--deploy-config",
        "deploy/p.yaml",
    ]
    bare = ServerSpec(launcher="local", model_id="piper-joe", voices_dir="v")
    assert build_command(bare, 1)[-2:] == ["--voices-dir", "v"]
    with pytest.raises(ValueError, match="launcher: 'sglang'"):
        build_command(ServerSpec(launcher="sglang", model_id="x"), 1)


def test_free_port_can_be_bound():
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_gpu_probe_through_nvidia_smi(monkeypatch, tmp_path):
    monkeypatch.setenv("STANDIN_GPU_PIDS", "")
    assert gpu_is_empty() is True
    monkeypatch.setenv("STANDIN_GPU_PIDS", "4242,77")
    assert gpu_compute_pids() == [4242, 77]
    assert gpu_is_empty() is False
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi at all
    assert gpu_is_empty() is None


# --- the real local server -------------------------------------------------------------------


@pytest.mark.slow
def test_local_launcher_serves_the_real_piper_server(tmp_path):
    entry = resolve("piper-joe")
    spec = ServerSpec(
        launcher="local",
        model_id=entry.model_id,
        deploy_config=entry.path,
        log_path=tmp_path / "server.log",
        health_timeout_s=180.0,
    )
    with launch_server(spec) as server:
        assert server.command[:3] == [sys.executable, "-m", "thetalker.server"]
        models = get_json(server.base_url + "/v1/models")
        assert entry.model_id in [m["id"] for m in models["data"]]
        group = server.pid
    assert not group_alive(group)
