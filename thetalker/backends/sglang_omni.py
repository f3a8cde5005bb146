"""SGLang-Omni 0.1.9 (`sgl-omni serve --model-path <id>`): the speech API, with its own turns
(sglang-omni.md, checked against the wheel's real HTTP layer by tests/contract_sglang).

- Started as `sgl-omni serve --model-path <id> --model-name <id> --host H --port P`, tuned
  through `--config FILE` (its pipeline YAML; vllm-omni deploy files do not apply) and
  dotted per-stage flags in the system's `extra_args` (e.g.
  `--tts_engine.engine.max_running_requests 16`). `SGLANG_OMNI_STRICT_PORT=1` is always set:
  without it a busy port makes the server bind another one and only log it.
- Ready when `GET /health` answers 200: 503 `starting` until its built-in warm-up is done.
- Body: vllm-omni's fields, the built-in speaker sent as `voice` (`speaker` is only its
  alias); `stream: true` is what streams (`stream_format: "audio"` alone is one whole body).
  Streaming needs `response_format: "pcm"`: streaming WAV is a 400, so it is refused here.
- Streams: raw PCM and SSE, both with `X-Sample-Rate` (the rate is read from it, and each
  record's own header is checked against it). A failure mid-stream cuts the raw body, and
  ends SSE with `{"type": "error", "error": {...}}` (not `speech.audio.error`). A failure
  before the first audio is a real status (the route waits for the first chunk before
  sending headers): 400 bad input, 500 synthesis failed, 503 `The request queue is full.`
  once running + queued requests reach the engine's ceiling, typed `overloaded`.
- Agent mode: vllm-omni's socket protocol on the same path, but `split_granularity` must
  be `sentence` or `clause` (`none` is refused) and the server closes after `session.done`.
- No Prometheus `/metrics`. Voices: `/v1/audio/voices` (serve Base checkpoints only).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from thetalker.backends import vllm_omni
from thetalker.backends.base import (
    SAMPLE_RATE_HEADER,
    Body,
    BodyDialect,
    Errors,
    Launcher,
    gpu_launch,
    optional_flags,
)
from thetalker.backends.inputs import DEFAULT_EXECUTABLE, LaunchSpec, RequestOptions

__all__ = [
    "API", "LAUNCHER", "PROGRAM", "QUEUE_FULL", "command", "env", "program", "streamed_body",
]  # fmt: skip

PROGRAM = "sgl-omni"  # the console script of the sglang-omni wheel
QUEUE_FULL = "The request queue is full."  # sglang_omni/admission.py QueueFullError.MESSAGE


def streamed_body(opts: RequestOptions, text: str, ref_audio_uri: str | None = None) -> Body:
    """One streamed request: `stream: true` (raw PCM, or SSE with `stream_format: "sse"`)."""
    body: Body = {"input": text, **vllm_omni.voice_fields(opts, ref_audio_uri, "voice")}
    body["stream"] = True
    body["stream_format"] = opts.stream_format
    body["response_format"] = opts.response_format
    return body


def probe_body(body: Body) -> Body:
    """The rate comes from the `X-Sample-Rate` header of the streamed request itself."""
    return dict(body)


def program(spec: LaunchSpec) -> str:
    """`sgl-omni` from the system's serving environment (`serving_env`: a venv or prefix, e.g.
    the engine tier's CPU venv), else the spec's executable: the spec's default executable
    names vllm-omni's program; any other value is a path to this one (a wrapper)."""
    serving_env = spec.serving_env
    if serving_env:
        return str(Path(serving_env).expanduser() / "bin" / PROGRAM)
    return PROGRAM if spec.executable == DEFAULT_EXECUTABLE else spec.executable


def command(spec: LaunchSpec, port: int) -> list[str]:
    program_ = program(spec)
    cmd = [program_, "serve", "--model-path", spec.model_id, "--model-name", spec.model_id]
    cmd += ["--host", spec.host, "--port", str(port)]
    return cmd + optional_flags(("--config", spec.deploy_config))


def env(_spec: LaunchSpec, voices_dir: Path | None) -> dict[str, str]:
    # A busy port must fail the start, not move the server elsewhere (launcher.py
    # find_available_port); the voice store is a folder of the run's own.
    out = {"SGLANG_OMNI_STRICT_PORT": "1"}
    if voices_dir is not None:
        out["SPEAKER_SAMPLES_DIR"] = str(voices_dir)
    return out


DIALECT = BodyDialect(name="sglang-omni", build=streamed_body, probe=probe_body)
AGENT = dataclasses.replace(vllm_omni.AGENT, split_granularities=("sentence", "clause"))
# vllm-omni's speech API (its streams, voice upload) with SGLang-Omni's differences.
API = dataclasses.replace(
    vllm_omni.API,
    name="sglang-omni",
    summary="SGLang-Omni 0.1.9's speech API, with its own turns (sglang-omni.md)",
    body=DIALECT,
    agent=AGENT,
    sample_rate=SAMPLE_RATE_HEADER,
    sample_rate_header="X-Sample-Rate",
    response_formats=("pcm",),
    sse_error_events=("error",),
    errors=Errors(by_message={503: ((QUEUE_FULL, "overloaded"),)}),
)
LAUNCHER = Launcher(
    name="sglang-omni",
    summary="SGLang-Omni 0.1.9 (`sgl-omni serve --model-path <id>`), sglang-omni.md",
    launch=gpu_launch(
        command,
        env=env,
        voices_dir=True,
        packages=("sglang-omni", "sglang"),  # provenance: which server version was measured
    ),
    api=API.name,
    ready_path="/health",
    metrics_path=None,
    system_keys={"serving_env": False},  # a venv or prefix whose bin/sgl-omni serves
)
