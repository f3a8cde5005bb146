"""SGLang-Omni 0.1.9's REAL Qwen3-TTS engine (its scheduler, KV pool, talker, streaming
vocoder) on SGLang 0.5.22's CPU platform, serving the same tiny random model as the vllm-omni
engine tier (scripts/make-tiny-qwen3-tts.py; `tiny_model` below).

These tests share the tier's marker (`engine`) and xdist group (the session fixture
`engine_tier`, overridden here to be this venv: one engine at a time on the machine). They
need the venv of `scripts/engine-venv-sglang.sh` (the SGLang-Omni contract venv plus the
engine's runtime packages, about 7 GB); without it each test skips with the reason the script
gave, or fails with it under CI=true (tests/support/tiers.py).

TheTalker runs here; the engine runs from the venv, started by TheTalker's `sglang-omni`
launcher through a system's `serving_env`, with SGLANG_USE_CPU_ENGINE=1 and the `sgl_kernel`
CPU stand-in (tests/engine/sgl_kernel_cpu) on its PYTHONPATH. Every request is bounded by the
engine itself: SGLang's SGLANG_MAX_NEW_TOKENS_LIMIT caps each request's `max_new_tokens`
(its scheduler's `init_req_max_new_tokens`), the server's built-in warm-up included, which asks
for no cap (2048 codec frames, about 100 s of random weights here); the tests' requests send
the same `max_new_tokens` (MAX_NEW_TOKENS) too.

Random weights speak noise and may stop early: no test assumes a length, and none a speed.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.tiers import unavailable

HERE = Path(__file__).resolve().parent
STANDIN = HERE.parent / "sgl_kernel_cpu"  # holds the package `sgl_kernel`
HEALTH_TIMEOUT_S = 600.0
MAX_RUNNING = 4  # --tts_engine.engine.max_running_requests
# Streams sent together wait in the scheduler's queue, capped at max_queued_requests, until a
# step moves them to running: a burst of more than MAX_QUEUED is refused in part (503) even
# below running + queued (seen: 4 at once against 4 + 2), so no test's concurrency exceeds it.
MAX_QUEUED = 4  # --tts_engine.engine.max_queued_requests: >= any test's concurrency (below)
MAX_NEW_TOKENS = 40  # codec frames a request may take (3.2 s of audio): bounds each request
SPEAKER = "vivian"
RATE = 24000
FRAME_BYTES = 1920 * 2  # one 12.5 Hz codec frame of 24 kHz s16le
# SGLang's CPU platform, the stand-in's ops, every request (the warm-up's too) capped, no hub.
ENGINE_ENV = {
    "SGLANG_USE_CPU_ENGINE": "1",
    "PYTHONPATH": str(STANDIN),
    "SGLANG_MAX_NEW_TOKENS_LIMIT": str(MAX_NEW_TOKENS),
    "HF_HUB_OFFLINE": "1",
}
# The engine's settings, as a system's extra_args: random talker weights (no checkpoint), the
# admission ceiling small enough to reach (running + queued), a KV pool a CPU can hold.
ENGINE_ARGS = [
    "--tts_engine.engine.load_format", "dummy",
    "--tts_engine.engine.max_running_requests", str(MAX_RUNNING),
    "--tts_engine.engine.max_queued_requests", str(MAX_QUEUED),
    "--tts_engine.engine.max_total_tokens", "16384",
    "--tts_engine.engine.decode_log_interval", "1",  # a log line per step: #running-req
]  # fmt: skip


def venv_dir() -> Path:
    default = Path.home() / ".cache" / "thetalker" / "sglang-omni-0.1.9"
    return Path(os.environ.get("THETALKER_SGLANG_VENV") or default)


def venv_unavailable_reason() -> str | None:
    """Why the SGLang-Omni engine venv cannot be used, or None when it is ready."""
    venv = venv_dir()
    ready = venv / ".thetalker-sglang-engine-ready"
    if ready.is_file() and (venv / "bin" / "sgl-omni").exists():
        return None
    reason_file = venv.parent / f".{venv.name}-engine.unavailable"
    if reason_file.is_file():
        return f"SGLang-Omni engine venv unavailable: {reason_file.read_text().strip()}"
    return (
        f"SGLang-Omni engine venv not built at {venv}: "
        "run `bash scripts/engine-venv-sglang.sh` (~7 GB)"
    )


@pytest.fixture(scope="session", autouse=True)
def engine_tier() -> Path:
    """This folder's venv (skip, or fail under CI=true, when it is not built)."""
    reason = venv_unavailable_reason()
    if reason is not None:
        unavailable(reason)
    return venv_dir()


@pytest.fixture(scope="session")
def tiny_model(engine_tier: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tier's tiny random Qwen3-TTS (scripts/make-tiny-qwen3-tts.py, seed 0), built with
    the vllm-omni engine venv's python when that venv is ready, so that both engines serve
    the same bytes (its codec classes are vllm-omni's copy), else with this venv's (qwen-tts's
    copy)."""
    from tests.engine.conftest import MAKE_MODEL
    from tests.engine.conftest import venv_dir as vllm_venv
    from tests.engine.conftest import venv_unavailable_reason as vllm_unavailable

    builder = engine_tier if vllm_unavailable() is not None else vllm_venv()
    out = tmp_path_factory.mktemp("sglang-model") / "tiny-qwen3-tts"
    done = subprocess.run(
        [str(builder / "bin" / "python"), str(MAKE_MODEL), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"make-tiny-qwen3-tts failed:\n{done.stderr[-3000:]}"
    return out


def sglang_spec(venv: Path, model: Path, log_path: Path, extra: list[str] | None = None, **more):
    """The ServerSpec of the tiny engine: TheTalker's `sglang-omni` launcher from the venv."""
    from thetalker.lifecycle.launch import ServerSpec

    return ServerSpec(
        launcher="sglang-omni",
        model_id=str(model),
        serving_env=str(venv),
        env=dict(ENGINE_ENV),
        extra_args=[*ENGINE_ARGS, *(extra or [])],
        log_path=log_path,
        health_timeout_s=HEALTH_TIMEOUT_S,
        **more,
    )


@dataclass
class Reply:
    status: int
    chunks: list[int]  # the size of each HTTP chunk, in order (200 only)
    body: bytes  # the error body (not 200)


def speak(base_url: str, text: str, timeout_s: float = 300.0, **fields) -> Reply:
    """One streamed raw-PCM request, as TheTalker's sglang-omni dialect sends it."""
    url = urlsplit(base_url)
    body = {
        "input": text,
        "voice": SPEAKER,
        "stream": True,
        "response_format": "pcm",
        "max_new_tokens": MAX_NEW_TOKENS,
        **fields,
    }
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout_s)
    try:
        headers = {"Content-Type": "application/json"}
        conn.request("POST", "/v1/audio/speech", json.dumps(body), headers)
        response = conn.getresponse()
        if response.status != 200:
            return Reply(response.status, [], response.read())
        sizes = []
        while True:  # the chunked framing itself: one HTTP chunk per engine chunk
            size = int(response.fp.readline().split(b";")[0], 16)
            if size == 0:
                break
            response.fp.read(size)
            response.fp.readline()
            sizes.append(size)
        return Reply(200, sizes, b"")
    finally:
        conn.close()


@dataclass
class Engine:
    base_url: str
    model: Path
    log_path: Path
    server: object  # thetalker.lifecycle.launch.RunningServer


@pytest.fixture(scope="module")
def sglang_engine(engine_tier: Path, tiny_model: Path, tmp_path_factory) -> Iterator[Engine]:
    """One real engine per module, started by TheTalker's launcher (ready once its own
    bounded warm-up is done), and one more request to be sure it serves."""
    from thetalker.lifecycle.launch import launch_server

    log = tmp_path_factory.mktemp("sglang-engine") / "server.log"
    with launch_server(sglang_spec(engine_tier, tiny_model, log)) as server:
        warm = speak(server.base_url, "A warm up sentence for the engine.")
        assert warm.status == 200, warm.body[:500]
        yield Engine(server.base_url, tiny_model, log, server)
