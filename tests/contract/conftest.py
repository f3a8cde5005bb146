"""The contract tier: the project against vllm-omni 0.30.0's own serving code.

Every test here carries the `contract` marker and runs only when it is selected
(`python -m pytest -q -m contract tests/contract`); the main suite's `python -m pytest -q`
deselects them. They need the venv of `scripts/contract-venv.sh` (vllm and vllm-omni 0.30.0,
about 9 GB); without it each test skips with the reason the script gave, or fails with it under
CI=true (tests/support/tiers.py).

The project runs here, in the main environment; 0.30.0's code runs in the venv, as a server
subprocess (`fake_engine_server.py`) or a one-shot probe (`venv_probe.py`), over loopback or
JSON files, so neither environment's dependencies touch the other's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.processes import stop_group
from tests.support.tiers import unavailable

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SERVER = HERE / "fake_engine_server.py"
PROBE = HERE / "venv_probe.py"
STARTUP_TIMEOUT_S = 300.0  # imports of torch + vllm + vllm-omni on a busy 2-core machine


def venv_dir() -> Path:
    default = Path.home() / ".cache" / "thetalker" / "vllm-omni-0.30.0"
    return Path(os.environ.get("THETALKER_CONTRACT_VENV") or default)


def venv_unavailable_reason() -> str | None:
    """Why the contract venv cannot be used, or None when it is ready."""
    venv = venv_dir()
    if (venv / ".thetalker-contract-ready").is_file() and (venv / "bin" / "python").exists():
        return None
    reason_file = venv.parent / f".{venv.name}.unavailable"
    if reason_file.is_file():
        return f"contract venv unavailable: {reason_file.read_text().strip()}"
    return f"contract venv not built at {venv}: run `bash scripts/contract-venv.sh` (~9 GB)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark this folder's tests `contract`; deselect them unless `-m` asks for them."""
    mine = [item for item in items if HERE in Path(str(item.fspath)).parents]
    for item in mine:
        item.add_marker(pytest.mark.contract)
    markexpr = config.getoption("markexpr") or ""
    if "contract" in markexpr and "not contract" not in markexpr:
        return
    if mine:
        keep = [item for item in items if item not in mine]
        config.hook.pytest_deselected(items=mine)
        items[:] = keep


@pytest.fixture(scope="session")
def contract_python() -> Path:
    reason = venv_unavailable_reason()
    if reason is not None:
        unavailable(reason)  # a skip on a user's machine, a failure under CI=true
    return venv_dir() / "bin" / "python"


@dataclass
class FakeServer:
    """A running `fake_engine_server.py`: 0.30.0's HTTP layer for one model."""

    model: str
    base_url: str
    port: int
    proc: subprocess.Popen
    log_path: Path
    voices_dir: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_server(
    python: Path,
    model: str,
    workdir: Path,
    deploy: Path | None = None,
    env: dict[str, str] | None = None,
) -> FakeServer:
    """Start the fake-engine server; returns once its port listens."""
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "server.log"
    voices = workdir / "speakers"
    cmd = [str(python), str(SERVER), "serve", model, "--omni", "--trust-remote-code"]
    cmd += ["--host", "127.0.0.1", "--port", "0"]
    if deploy is not None:
        cmd += ["--deploy-config", str(deploy)]
    full_env = {**os.environ, "SPEAKER_SAMPLES_DIR": str(voices), **(env or {})}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env, start_new_session=True
        )
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        for line in log_path.read_text(errors="replace").splitlines():
            if line.startswith("FAKE_ENGINE_PORT="):
                port = int(line.split("=", 1)[1])
                url = f"http://127.0.0.1:{port}"
                return FakeServer(model, url, port, proc, log_path, voices)
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    stop_server(proc)
    tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
    raise RuntimeError(f"fake engine server for {model} did not start:\n{tail}")


def stop_server(proc: subprocess.Popen) -> None:
    """The server's whole group: SIGTERM, SIGKILL after 20 s (its import alone can take 50)."""
    stop_group(proc, grace_s=20)


@pytest.fixture(scope="session")
def server_factory(
    contract_python: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., FakeServer]]:
    """Fake-engine servers, one per (model, deploy file, environment) for the whole session:
    each costs 20 to 50 s of imports, so every module asking for the same one shares it.
    A test that changes a server's state (uploads a voice) undoes it, or asks for
    `fresh=True`. All stop when the session ends."""
    started: dict[tuple, FakeServer] = {}
    fresh_ones: list[FakeServer] = []

    def start(
        model: str, deploy: Path | None = None, *, fresh: bool = False, **env: str
    ) -> FakeServer:
        key = (model, str(deploy), tuple(sorted(env.items())))
        server = None if fresh else started.get(key)
        if server is None or server.proc.poll() is not None:
            workdir = tmp_path_factory.mktemp("fake-engine")
            server = start_server(contract_python, model, workdir, deploy, env)
            if fresh:
                fresh_ones.append(server)
            else:
                started[key] = server
        return server

    yield start
    for server in [*started.values(), *fresh_ones]:
        stop_server(server.proc)


@pytest.fixture(scope="session")
def ref_clip(tmp_path_factory) -> Path:
    """Two seconds of a 180 Hz tone at 16 kHz: the reference clip of the cloning tests."""
    import numpy as np

    from thetalker.data.wavio import write_wav

    path = tmp_path_factory.mktemp("clip") / "ref.wav"
    t = np.arange(int(16000 * 2.0)) / 16000
    pcm = (0.3 * np.sin(2 * np.pi * 180 * t) * 32767).astype("<i2").tobytes()
    write_wav(path, pcm, 16000)
    return path


def clear_uploaded_voices(base_url: str) -> None:
    """Delete every uploaded voice of a (shared) server, so a test starts from none."""
    with urllib.request.urlopen(base_url + "/v1/audio/voices", timeout=30) as resp:
        uploads = json.loads(resp.read()).get("uploaded_voices") or []
    for voice in uploads:
        name = urllib.parse.quote(str(voice["name"]))
        request = urllib.request.Request(f"{base_url}/v1/audio/voices/{name}", method="DELETE")
        with urllib.request.urlopen(request, timeout=30):
            pass


def run_probe(python: Path, questions: dict, tmp: Path) -> dict:
    """Ask `venv_probe.py` (in the contract venv) and return its answers."""
    q, a = tmp / "questions.json", tmp / "answers.json"
    q.write_text(json.dumps(questions))
    result = subprocess.run(
        [str(python), str(PROBE), str(q), str(a)],
        capture_output=True,
        text=True,
        timeout=STARTUP_TIMEOUT_S,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    if result.returncode != 0 or not a.is_file():
        raise RuntimeError(f"venv_probe failed ({result.returncode}):\n{result.stdout[-3000:]}")
    return json.loads(a.read_text())


def thetalker_cli(name: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """One of the project's console commands, run as a user would (main environment)."""
    module = {"thetalker-bench": "thetalker.cli.bench", "thetalker-voice": "thetalker.cli.voice"}
    return subprocess.run(
        [sys.executable, "-m", module[name], *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
