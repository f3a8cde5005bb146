"""What a server kind is, as the client and the lifecycle need to know it.

A `Backend` is a frozen description: how the server is started (`Launch`), when it is ready
(`ready_path`), which request body it accepts (`BodyDialect`), which stream framings it
offers (`stream_formats`), how its agent-mode socket speaks (`AgentProtocol`), how its sample
rate is known (`sample_rate`), what its errors mean (`Errors`) and which metrics it exports
(`metrics_path`). One module of `thetalker.backends` per kind builds one; the client, the
workflow and the lifecycle ask `thetalker.backends.get(name)` instead of testing names.

Nothing here imports the client or the lifecycle (they import this), so the callables take
their arguments duck-typed: `opts` is a `thetalker.client.options.BenchOptions`, `spec` a
`thetalker.lifecycle.launch.ServerSpec`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "AgentProtocol",
    "Backend",
    "BodyDialect",
    "Errors",
    "Launch",
    "SAMPLE_RATE_HEADER",
    "SAMPLE_RATE_WAV_PROBE",
    "gpu_launch",
    "optional_flags",
]

# The sample rate is read from the header of one non-streamed `wav` request before the warmup.
SAMPLE_RATE_WAV_PROBE = "wav_probe"
# The sample rate is read from a streamed response's header (`Backend.sample_rate_header`):
# one streamed request before the warmup, and every record's own response checked against it.
SAMPLE_RATE_HEADER = "header"

Body = dict[str, Any]


@dataclass(frozen=True)
class BodyDialect:
    """The request body a server accepts.

    `build(opts, text, ref_audio_uri)` is one streamed request's body; `probe(body)` turns it
    into the non-streamed `wav` request that reads the sample rate; `per_request(opts,
    index)` gives the fields that must differ between requests (Nari's `seed`), or is None
    when every request's body is the same but for its text."""

    name: str
    build: Callable[[Any, str, str | None], Body]
    probe: Callable[[Body], Body]
    per_request: Callable[[Any, int], Body] | None = None


@dataclass(frozen=True)
class AgentProtocol:
    """The agent mode's socket: one request is one connection that text streams into.

    `name` picks the client's implementation (thetalker.client.websocket.SESSIONS): the
    server's protocol, not the server's name, so two servers speaking one protocol share it.
    `unit_start` is the event that starts a unit of audio (a sentence on vllm-omni, the one
    response on Nari), `done` the event that ends the request."""

    name: str
    path: str
    subprotocol: str | None
    unit_start: str
    done: str
    # The first message the client sends (`session.config`, `request.start`): (opts, ref_uri).
    start: Callable[[Any, str | None], Body]
    # The server splits the text into units itself (vllm-omni: `split_granularity`); False:
    # the text streams into one request (recorded as split_granularity "none").
    splits_text: bool = True
    # Events the server sends before it reads the start message (Nari's `session.created`):
    # an `error` right after them is still a refused start.
    greetings: tuple[str, ...] = ()
    # Fields of the start message that differ per request, (opts, request index); None: none.
    per_request: Callable[[Any, int], Body] | None = None
    # The `split_granularity` values the server accepts (sglang-omni refuses "none").
    split_granularities: tuple[str, ...] = ("none", "sentence", "clause")


@dataclass(frozen=True)
class Errors:
    """What a refusal before audio means. `by_status` maps an HTTP status to a record's
    `error.type` (thetalker.data.records.ERROR_TYPES); a status absent from it (or an empty
    map) is `http_status`. `by_message` refines a status by a substring of the error
    message: `{503: (("not ready", "not_ready"),)}`."""

    by_status: Mapping[int, str] = field(default_factory=dict)
    by_message: Mapping[int, tuple[tuple[str, str], ...]] = field(default_factory=dict)

    def failure_type(self, status: int, message: str) -> str:
        for needle, kind in self.by_message.get(status, ()):
            if needle.lower() in message.lower():
                return kind
        return self.by_status.get(status, "http_status")


@dataclass(frozen=True)
class Launch:
    """How the lifecycle starts the server (thetalker.lifecycle.launch).

    `command(spec, port)` is its command line, None when nothing is started (an external
    endpoint). `env(spec, voices_dir)` the variables set for it over the system's own,
    `env_defaults` those set unless the system sets them. `voices_dir`: the server
    reads a folder of voices the run makes fresh. `check_gpu`: refuse a GPU in use.
    `probe_python`: whose interpreter the serving-environment probe asks ("self": this one;
    "server": the program's own; None: none, it is not a Python server we can see)."""

    command: Callable[[Any, int], list[str]] | None
    env: Callable[[Any, Path | None], dict[str, str]] = lambda _spec, _voices: {}
    env_defaults: Mapping[str, str] = field(default_factory=dict)  # unless the system sets them
    voices_dir: bool = False
    check_gpu: bool = False
    probe_python: str | None = None
    # It computes on the node's GPU, so a job serving it holds a GPU slot
    # (thetalker.lifecycle.gpu_slots) and the plan counts its GPU-hours.
    gpu: bool = False
    # The repository's deploy file of the model can be given to it (`use_deploy_file`).
    deploy_files: bool = False
    # An NVIDIA MPS daemon may be started for it (a model's `mps`); False: never.
    mps: bool = False
    # Named engine profiles (Nari: ttfa, balanced, throughput); non-empty: one is required.
    profiles: tuple[str, ...] = ()
    # Distributions the serving-environment probe also reports (the server's own version),
    # beside thetalker.lifecycle.serving_env.SERVING_PACKAGES.
    packages: tuple[str, ...] = ()
    # What the startup log states about the engine, kept as provenance (log text -> facts).
    startup_facts: Callable[[str], dict[str, Any]] | None = None


def gpu_launch(command: Callable[[Any, int], list[str]], **more: Any) -> Launch:
    """A GPU server run by its own Python: a GPU in use is refused, its jobs hold a GPU slot
    (the plan counts their GPU-hours), the probe asks the program's interpreter."""
    return Launch(command=command, check_gpu=True, gpu=True, probe_python="server", **more)


def optional_flags(*pairs: tuple[str, Any]) -> list[str]:
    """`flag value` for each (flag, value) pair whose value is set (not None), in order."""
    return [part for flag, value in pairs if value is not None for part in (flag, str(value))]


@dataclass(frozen=True)
class Backend:
    """Everything the client and the lifecycle need to know about one server kind."""

    name: str
    summary: str  # one line for --help and the docs
    launch: Launch
    body: BodyDialect
    # GET answering 200 once requests can be served; None: nothing to wait for (external).
    ready_path: str | None = "/health"
    stream_formats: tuple[str, ...] = ("audio",)  # `stream_format` values it can stream
    agent: AgentProtocol | None = None  # None: no agent-mode socket
    sample_rate: str | int = SAMPLE_RATE_WAV_PROBE  # SAMPLE_RATE_HEADER, or a fixed rate in Hz
    # The streamed response's header stating its rate (sglang-omni: X-Sample-Rate), or None.
    sample_rate_header: str | None = None
    # `response_format` values it streams (sglang-omni refuses streaming WAV).
    response_formats: tuple[str, ...] = ("pcm", "wav")
    # SSE event types that carry the server's error (vllm-omni: speech.audio.error).
    sse_error_events: tuple[str, ...] = ("speech.audio.error",)
    errors: Errors = field(default_factory=Errors)
    metrics_path: str | None = None  # a Prometheus /metrics, or None
    voice_upload: bool = False  # POST /v1/audio/voices (register_voice)
    task_types: tuple[str, ...] | None = None  # the speech API's task types it serves; None: all
    # Speakers it has (CustomVoice), when fixed and known; None: ask the server. Compared
    # after `normalise_speaker`, as the server compares them.
    speakers: tuple[str, ...] | None = None
    normalise_speaker: Callable[[str], str] = str
    # False for a launcher that fronts a server of another kind (external, command): the
    # client speaks the kind the system names (`server`), never this one.
    speaks: bool = True
