"""The SGLang-Omni contract tier: the project against sglang-omni 0.1.9's own HTTP layer.

Its tests carry the `contract` marker, as the vllm-omni tier's do, and run only when it is
selected (`python -m pytest -q -m contract tests/contract_sglang`); the main suite's
`python -m pytest -q` deselects them. They need the venv of
`scripts/contract-venv-sglang.sh` (sglang-omni 0.1.9's HTTP layer, about 6 GB); without it
each test skips with the reason the script gave.

The project runs here, in the main environment; sglang-omni's code runs in the venv, as a
server subprocess (`fake_engine_server.py`: the real `sgl-omni serve` with only its pipeline
faked) or a one-shot probe (`venv_probe.py`), over loopback or JSON files.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.contract_sglang.schedule import QWEN3_SPEAKERS
from tests.support.processes import stop_group
from thetalker import backends
from thetalker.lifecycle.launch import ServerSpec, build_command

HERE = Path(__file__).resolve().parent
SERVER = HERE / "fake_engine_server.py"
PROBE = HERE / "venv_probe.py"
STARTUP_TIMEOUT_S = 240.0  # imports of torch + sglang + sglang-omni on a busy 2-core machine
QWEN_CUSTOM = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"


def venv_dir() -> Path:
    default = Path.home() / ".cache" / "thetalker" / "sglang-omni-0.1.9"
    return Path(os.environ.get("THETALKER_SGLANG_VENV") or default)


def venv_unavailable_reason() -> str | None:
    """Why the SGLang contract venv cannot be used, or None when it is ready."""
    venv = venv_dir()
    if (venv / ".thetalker-contract-ready").is_file() and (venv / "bin" / "python").exists():
        return None
    reason_file = venv.parent / f".{venv.name}.unavailable"
    if reason_file.is_file():
        return f"sglang-omni contract venv unavailable: {reason_file.read_text().strip()}"
    return (
        f"sglang-omni contract venv not built at {venv}: "
        "run `bash scripts/contract-venv-sglang.sh` (~6 GB)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark this folder's tests `contract`; deselect them unless `-m` asks for them."""
    mine = [item for item in items if HERE in Path(str(item.fspath)).parents]
    for item in mine:
        item.add_marker(pytest.mark.contract)
    markexpr = config.getoption("markexpr") or ""
    if "contract" in markexpr and "not contract" not in markexpr:
        return
    if mine:
        config.hook.pytest_deselected(items=mine)
        items[:] = [item for item in items if item not in mine]


@pytest.fixture(scope="session")
def sglang_python() -> Path:
    reason = venv_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    return venv_dir() / "bin" / "python"


def write_checkpoint(root: Path, model_id: str = QWEN_CUSTOM) -> Path:
    """A model folder holding only the `config.json` sglang-omni reads to pick its pipeline
    (sglang-omni.md, "Seam"); the folder keeps the checkpoint's name, which 0.1.9 reads to
    tell a Base checkpoint from a CustomVoice one."""
    path = root / model_id
    path.mkdir(parents=True, exist_ok=True)
    config: dict = {"architectures": ["Qwen3TTSForConditionalGeneration"]}
    if model_id.endswith("CustomVoice"):
        config["tts_model_type"] = "custom_voice"
        config["talker_config"] = {"spk_id": {n: 3000 + i for i, n in enumerate(QWEN3_SPEAKERS)}}
    else:
        config["tts_model_type"] = "base"
    (path / "config.json").write_text(json.dumps(config))
    return path


@dataclass
class SglangServer:
    """A running `fake_engine_server.py`: sglang-omni 0.1.9's server for one model folder."""

    model_path: Path
    base_url: str
    port: int
    proc: subprocess.Popen
    log_path: Path
    argv: list[str]
    voices_dir: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def health(url: str) -> int | None:
    """The status `GET /health` answers, or None while nothing listens."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def start_server(
    python: Path, argv: list[str], port: int, workdir: Path, env: dict[str, str]
) -> SglangServer:
    """Start `sgl-omni` (argv: what follows the program) on `port`; returns once `/health`
    answers 200, the readiness sglang-omni gates on its own warm-up."""
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "server.log"
    model_path = Path(argv[argv.index("--model-path") + 1])
    voices = Path(env.get("SPEAKER_SAMPLES_DIR") or workdir / "voices")
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", **env}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(python), str(SERVER), *argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        if health(url) == 200:
            return SglangServer(model_path, url, port, proc, log_path, argv, voices)
        time.sleep(0.3)
    stop_server(proc)
    tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
    raise RuntimeError(f"sglang-omni fake-engine server did not get ready:\n{tail}")


def stop_server(proc: subprocess.Popen) -> None:
    """The server's whole group: SIGTERM, SIGKILL after 20 s (its import alone can take 50)."""
    stop_group(proc, grace_s=20)


def launch_spec(model_path: Path, *extra: str) -> ServerSpec:
    """The system the workflow would serve: the sglang-omni launcher on this model folder."""
    return ServerSpec(launcher="sglang-omni", model_id=str(model_path), extra_args=list(extra))


def serve_argv(spec: ServerSpec, port: int) -> list[str]:
    """The `sgl-omni` arguments the project's launcher builds (thetalker.backends), after
    the program."""
    command = build_command(spec, port)
    assert command[0] == "sgl-omni", command
    return command[1:]


def serve_env(spec: ServerSpec, voices: Path) -> dict[str, str]:
    """The variables the project's launcher sets for `sgl-omni` (thetalker.backends)."""
    launch = backends.launcher(spec.launcher).launch
    return {**launch.env_defaults, **launch.env(spec, voices)}


@pytest.fixture(scope="module")
def server_factory(
    sglang_python: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., SglangServer]]:
    """Start fake-engine servers for this module; all stop when the module ends."""
    started: list[SglangServer] = []

    def start(*extra: str, model_id: str = QWEN_CUSTOM, **env: str) -> SglangServer:
        workdir = tmp_path_factory.mktemp("sglang-omni")
        spec = launch_spec(write_checkpoint(workdir / "models", model_id), *extra)
        port = free_port()
        full_env = {**serve_env(spec, workdir / "voices"), **env}
        server = start_server(sglang_python, serve_argv(spec, port), port, workdir, full_env)
        started.append(server)
        return server

    yield start
    for server in started:
        stop_server(server.proc)


def run_probe(python: Path, questions: dict, tmp: Path) -> dict:
    """Ask `venv_probe.py` (in the SGLang venv) and return its answers."""
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
        out = (result.stdout + result.stderr)[-3000:]
        raise RuntimeError(f"venv_probe failed ({result.returncode}):\n{out}")
    return json.loads(a.read_text())
