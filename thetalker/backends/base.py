"""What a server is, on two axes: how it is started and found ready, and what it speaks.

A `Launcher` is how the lifecycle starts a server (`Launch`), when it is ready
(`ready_path`), where it exports metrics (`metrics_path`), what the workflow checks before
it starts (its models, its deploy file, its own config keys), and the API its server speaks
unless the system names another (`api`). A `ServerApi` is what the client speaks to it:
the request body (`BodyDialect`), the stream framings (`stream_formats`), the agent-mode
socket (`AgentProtocol`), how the sample rate is known (`sample_rate`) and what its errors
mean (`Errors`). A system names one of each (`launcher`, and `server` where the launcher
fronts any API: external, command). The client resolves its `ServerApi` once per run and
carries the object; the workflow and the lifecycle ask `thetalker.backends.launcher(name)`
and `api(name)` and never test a server's name.

Nothing here imports the client or the lifecycle, not even for the type checker (they
import this): what a server kind reads of their options and spec is named by the protocols
of thetalker.backends.inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thetalker.backends.inputs import LaunchSpec, RequestOptions

__all__ = [
    "AgentProtocol",
    "Body",
    "BodyDialect",
    "Errors",
    "Launch",
    "Launcher",
    "ServerApi",
    "SAMPLE_RATE_HEADER",
    "SAMPLE_RATE_WAV_PROBE",
    "gpu_launch",
    "optional_flags",
]

# The sample rate is read from the header of one non-streamed `wav` request before the warmup.
SAMPLE_RATE_WAV_PROBE = "wav_probe"
# The sample rate is read from a streamed response's header (`ServerApi.sample_rate_header`):
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
    build: Callable[[RequestOptions, str, str | None], Body]
    probe: Callable[[Body], Body]
    per_request: Callable[[RequestOptions, int], Body] | None = None


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
    start: Callable[[RequestOptions, str | None], Body]
    # The server splits the text into units itself (vllm-omni: `split_granularity`); False:
    # the text streams into one request (recorded as split_granularity "none").
    splits_text: bool = True
    # Events the server sends before it reads the start message (Nari's `session.created`):
    # an `error` right after them is still a refused start.
    greetings: tuple[str, ...] = ()
    # Fields of the start message that differ per request, (opts, request index); None: none.
    per_request: Callable[[RequestOptions, int], Body] | None = None
    # The `split_granularity` values the server accepts (sglang-omni refuses "none").
    split_granularities: tuple[str, ...] = ("none", "sentence", "clause")


@dataclass(frozen=True)
class Errors:
    """What a refusal before audio means. `by_status` maps an HTTP status to a record's
    `error.type` (thetalker.data.records.ERROR_TYPES); a status absent from it (or an empty
    map) is `http_status`. `by_message` refines a status by a substring of the error
    message: `{503: (("not ready", "not_ready"),)}`. `by_event_message` does the same for
    an agent socket's `error` event (a refused start or a failure while streaming), whose
    type is otherwise `session_refused` or `ws_error`."""

    by_status: Mapping[int, str] = field(default_factory=dict)
    by_message: Mapping[int, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    by_event_message: tuple[tuple[str, str], ...] = ()

    def failure_type(self, status: int, message: str) -> str:
        return _refined(self.by_message.get(status, ()), message) or self.by_status.get(
            status, "http_status"
        )

    def event_failure_type(self, kind: str, message: str) -> str:
        """The type of a socket failure `kind` whose error event said `message`."""
        return _refined(self.by_event_message, message) or kind


def _refined(needles: tuple[tuple[str, str], ...], message: str) -> str | None:
    for needle, kind in needles:
        if needle.lower() in message.lower():
            return kind
    return None


@dataclass(frozen=True)
class Launch:
    """How the lifecycle starts the server (thetalker.lifecycle.launch).

    `command(spec, port)` is its command line, None when nothing is started (an external
    endpoint). `env(spec, voices_dir)` the variables set for it over the system's own,
    `env_defaults` those set unless the system sets them. `voices_dir`: the server
    reads a folder of voices the run makes fresh. `check_gpu`: refuse a GPU in use.
    `probe_python`: whose interpreter the serving-environment probe asks ("self": this one;
    "server": the program's own; None: none, it is not a Python server we can see)."""

    command: Callable[[LaunchSpec, int], list[str]] | None
    env: Callable[[LaunchSpec, Path | None], dict[str, str]] = lambda _spec, _voices: {}
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


def gpu_launch(command: Callable[[LaunchSpec, int], list[str]], **more: Any) -> Launch:
    """A GPU server run by its own Python: a GPU in use is refused, its jobs hold a GPU slot
    (the plan counts their GPU-hours), the probe asks the program's interpreter."""
    return Launch(command=command, check_gpu=True, gpu=True, probe_python="server", **more)


def optional_flags(*pairs: tuple[str, Any]) -> list[str]:
    """`flag value` for each (flag, value) pair whose value is set (not None), in order."""
    return [part for flag, value in pairs if value is not None for part in (flag, str(value))]


@dataclass(frozen=True)
class ServerApi:
    """What the client speaks to a server: its body, streams, agent socket, sample rate and
    error meanings. Picklable (its callables are module functions): it crosses to the record
    writer and the workers inside the run's context."""

    name: str
    summary: str  # one line for --help and the docs
    body: BodyDialect
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
    voice_upload: bool = False  # POST /v1/audio/voices (register_voice)
    task_types: tuple[str, ...] | None = None  # the speech API's task types it serves; None: all
    # Speakers it has (CustomVoice), when fixed and known; None: ask the server. Compared
    # after `normalise_speaker`, as the server compares them.
    speakers: tuple[str, ...] | None = None
    normalise_speaker: Callable[[str], str] = str
    # It can clone a voice from a reference clip (`voice.clone`); the embedded server cannot.
    clones_voices: bool = True


@dataclass(frozen=True)
class Launcher:
    """How a server is started and found ready, and what the workflow checks before."""

    name: str
    summary: str  # one line for the docs
    launch: Launch
    # The API (`ServerApi.name`) its server speaks unless the system names one (`server`).
    api: str
    # The system may name another API (`server`): the launcher fronts any server (external,
    # command); False: its server speaks `api` only.
    any_api: bool = False
    # GET answering 200 once requests can be served; None: nothing to wait for (external).
    ready_path: str | None = "/health"
    # Where a server it starts exports Prometheus metrics; None: none, or not known.
    metrics_path: str | None = None
    # The model ids its server serves, when fixed (the embedded server: piper-joe); None: any.
    served_models: tuple[str, ...] | None = None
    # `module:function` reading a deploy file as the server does (raising ValueError), for the
    # workflow's checks before any server starts; imported by name because the server's
    # package sits above this one. None: the file is checked as YAML only.
    deploy_check: str | None = None
    # The system keys only it takes (`base_url`, `command`), each True when required.
    system_keys: Mapping[str, bool] = field(default_factory=dict)
    # The distribution and version its server is spoken to as (vllm-omni 0.30.0): a system's
    # serving environment holding another is warned about at parse time
    # (thetalker.pipeline.serving_env_check). None: not checked.
    speaks: tuple[str, str] | None = None
