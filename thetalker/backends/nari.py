"""Nari Labs' Qwen3-TTS server (`nari-qwen3-tts-server --profile ttfa|balanced|throughput`),
as nari.md reads it in `nari-labs/nari-qwen3-tts @e8c5b2b`.

- Body: a strict schema (`extra="forbid", strict=True`): only its own fields, exact JSON
  types. So `voice` (never `speaker`), no `task_type`, `stream_format`, `sample_rate`,
  `ref_audio` or `ref_text`; `stream: true` means raw bytes (there is no SSE) and a
  streaming client sends `non_streaming_mode: false` (the text layout every published
  number used); `seed` defaults to 0 for every request, so each request gets its own.
- Ready: the port opens only after warm-up; `GET /ready` answers 200 once capture and the
  warm-up synthesis are done (and 503 after a later failure).
- Audio: PCM s16le mono at a fixed 24,000 Hz, no rate header; a non-streamed `wav`
  answer's header says it, so the rate is probed as for vllm-omni.
- Errors: 422 for a schema violation (FastAPI's `detail`, naming the field) or a value it
  refuses; 429 above its admission cap or with its command queue full; 503 while not ready
  or when a request's PCM budget is exceeded; a failure after the headers is a chunked body
  cut without its last chunk. A 503 `... not ready: service_failed` (or `service_stopped`)
  comes from an engine that failed or stopped after it was ready: it never recovers, so it
  is `server_failed` (and fails the point), not a start-up wait; so is a socket's `error`
  event in those words (what the real socket sends then is not in nari.md: the stand-in's
  guess; a refused handshake or a bare close stays `http_status` or `closed_early`).
- Agent mode: `WS /v1/audio/speech/ws` with subprotocol `nari.speech.v1`, one utterance per
  connection: `session.created`, `request.start` -> `request.configured`, numbered
  `input_text.append` -> `input_text.ack` (`response.started` at admission, binary PCM
  from then), `input_text.end` -> the rest, `response.done`, close 1000. The text streams
  into one running request: there are no sentence units.
- No `/metrics`, no voices API, CustomVoice only (its nine built-in speakers).
"""

from __future__ import annotations

from typing import Any

from thetalker.backends.base import (
    AgentProtocol,
    Body,
    BodyDialect,
    Errors,
    Launcher,
    ServerApi,
    gpu_launch,
    optional_flags,
)
from thetalker.backends.inputs import LaunchSpec, RequestOptions

__all__ = ["API", "LAUNCHER", "PROFILES", "SAMPLE_RATE", "SPEAKERS", "PROGRAM", "request_seed"]

PROGRAM = "nari-qwen3-tts-server"
PROFILES = ("ttfa", "balanced", "throughput")
SAMPLE_RATE = 24000
SPEAKERS = (
    "aiden", "dylan", "eric", "ono_anna", "ryan", "serena", "sohee", "uncle_fu", "vivian",
)  # fmt: skip
_SEED_SPACE = 2**31  # `seed` is an int >= 0


def normalise(name: str) -> str:
    """A voice or language as Nari compares it: trimmed, lower case, `-` and space as `_`."""
    return name.strip().lower().replace("-", "_").replace(" ", "_")


def request_seed(opts: RequestOptions, index: int) -> int:
    """The `seed` of request `index`: the run's seed plus the index, so no two requests of a
    run sample alike (Nari's default would give every request seed 0) and a rerun repeats."""
    return (int(opts.seed) + int(index)) % _SEED_SPACE


def _voice_fields(opts: RequestOptions) -> Body:
    """`model`, `voice`, `language`, `instructions`, `max_new_tokens`: the fields of Nari's
    schema a run sets, in their exact types."""
    fields: Body = {}
    if opts.model:
        fields["model"] = str(opts.model)
    voice = opts.voice or opts.speaker
    if voice:
        fields["voice"] = str(voice)
    if opts.language:
        fields["language"] = str(opts.language)
    if opts.instructions:
        fields["instructions"] = str(opts.instructions)
    if opts.max_new_tokens is not None:
        fields["max_new_tokens"] = int(opts.max_new_tokens)
    return fields


def streamed_body(opts: RequestOptions, text: str, _ref_audio_uri: str | None = None) -> Body:
    """One streamed request: raw bytes as they are made, the streaming text layout."""
    body: Body = {"input": text, **_voice_fields(opts)}
    body["response_format"] = str(opts.response_format)
    body["stream"] = True
    body["non_streaming_mode"] = False
    body["seed"] = request_seed(opts, 0)
    return body


def probe_body(body: Body) -> Body:
    """The same request not streamed, as `wav` (its header is exact and states the rate)."""
    probe = {k: v for k, v in body.items() if k != "stream"}
    probe["response_format"] = "wav"
    return probe


def per_request(opts: RequestOptions, index: int) -> Body:
    return {"seed": request_seed(opts, index)}


def request_start(opts: RequestOptions, _ref_audio_uri: str | None = None) -> Body:
    """`request.start`: the HTTP controls but `input`, `stream`, `speed` and
    `non_streaming_mode` (refused on the socket: it always streams the text in)."""
    return {
        "type": "request.start",
        **_voice_fields(opts),
        "response_format": "pcm",
        "seed": request_seed(opts, 0),
    }


def startup_facts(log_text: str) -> dict[str, Any]:
    """What the startup log says about the engine: the resolved profile's SHA-256 (its one
    JSON line `{"event":"qwen3_tts_execution_config","sha256":...,"source":...}`)."""
    import json

    for line in log_text.splitlines():
        if '"qwen3_tts_execution_config"' not in line:
            continue
        try:
            event = json.loads(line[line.index("{") :])
        except (ValueError, RecursionError):
            continue
        if isinstance(event, dict) and event.get("event") == "qwen3_tts_execution_config":
            return {"execution_config_sha256": event.get("sha256"), "source": event.get("source")}
    return {}


def command(spec: LaunchSpec, port: int) -> list[str]:
    """`nari-qwen3-tts-server --model ID --host H --port P --profile P` (an engine-config
    overlay goes in the system's extra args: the repository's deploy files are vllm-omni's).
    The lifecycle refuses a spec without a profile: the server would pick `ttfa` silently,
    which nari.md warns against."""
    cmd = [PROGRAM, "--model", spec.model_id, "--host", spec.host, "--port", str(port)]
    return cmd + optional_flags(("--profile", spec.profile))


# An engine that failed or stopped after it was ready never recovers: its "not ready" is
# a failure of the run, so those reasons come before the plain needle.
NOT_READY = (
    ("service_failed", "server_failed"),
    ("service_stopped", "server_failed"),
    ("not ready", "not_ready"),
)

API = ServerApi(
    name="nari",
    summary="Nari Labs' Qwen3-TTS server's: strict schema, the nari.speech.v1 socket",
    body=BodyDialect(name="nari", build=streamed_body, probe=probe_body, per_request=per_request),
    stream_formats=("audio",),
    agent=AgentProtocol(
        name="nari.speech.v1",
        path="/v1/audio/speech/ws",
        subprotocol="nari.speech.v1",
        unit_start="response.started",
        done="response.done",
        start=request_start,
        splits_text=False,
        greetings=("session.created",),
        per_request=per_request,
    ),
    sample_rate="wav_probe",
    errors=Errors(
        by_status={422: "rejected", 429: "overloaded", 503: "overloaded"},
        by_message={503: NOT_READY},
        # What the real socket answers a start while not ready is not in nari.md; an error
        # event in the HTTP 503's words (the stand-in's) is typed as that 503 would be.
        by_event_message=NOT_READY,
    ),
    voice_upload=False,
    task_types=("CustomVoice",),
    speakers=SPEAKERS,
    normalise_speaker=normalise,
)
LAUNCHER = Launcher(
    name="nari",
    summary="Nari Labs' Qwen3-TTS server (nari-qwen3-tts-server --profile ...)",
    launch=gpu_launch(command, profiles=PROFILES, startup_facts=startup_facts),
    api=API.name,
    ready_path="/ready",
    metrics_path=None,
)
