"""What one load point is: `BenchOptions`, the run's errors, and `validate_options`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from thetalker import backends, metrics
from thetalker.api.speech import (
    MAX_INSTRUCTIONS_CHARS,
    RESPONSE_FORMATS,
    STREAM_FORMATS,
    TASK_TYPES,
)
from thetalker.data.wavio import WavError, check_reference_clip
from thetalker.util.checks import at_least, field_message, finite_seconds, fraction, positive_rate
from thetalker.util.redact import redact_url

__all__ = [
    "BenchOptions",
    "BenchError",
    "OptionsError",
    "SampleRateError",
    "ProbeError",
    "ProbeRefusedError",
    "RequestRefusedError",
    "validate_options",
    "server_api",
    "effective_workers",
]


@dataclass(frozen=True)
class BenchOptions:
    """One load point. Field names match docs/architecture.md; `register_voice` is an
    addition (default None keeps the documented behaviour)."""

    base_url: str = "http://127.0.0.1:8091"  # no trailing /v1
    model: str | None = None  # sent as "model" when set
    task_type: str = "CustomVoice"
    speaker: str | None = None  # CustomVoice: a speaker the server has (GET /v1/audio/voices)
    voice: str | None = None
    ref_audio: str | None = None  # a WAV path; sent inline as a data URI
    ref_text: str | None = None
    instructions: str | None = None
    language: str | None = "English"
    max_new_tokens: int | None = None
    stream_format: str = "audio"  # or "sse"
    response_format: str = "pcm"  # or "wav" (its 44-byte header is stripped and checked)
    sample_rate: int | None = None  # None = auto: one non-streamed wav request before warmup
    expected_sample_rate: int | None = None  # mismatch with the server's rate = SampleRateError
    concurrency: int = 1
    request_rate: float | None = None  # requests/s; set = open loop (Poisson, seeded)
    requests: int = 10
    warmup: int = 2
    seed: int = 42
    timeout_s: float = 120.0  # per request, send to end of body
    save_audio_dir: str | None = None
    max_error_rate: float = 0.05  # the CLI's exit policy; recorded in the summary
    threshold_s: float = metrics.CONTINUITY_THRESHOLD_S
    register_voice: str | None = None  # upload ref_audio/ref_text as this voice, then use it
    # Additions (defaults keep the documented behaviour):
    save_audio_count: int | None = None  # save only the first N scored requests' audio
    # Open loop: an arrival finding this many requests in flight is dropped (recorded as
    # `dropped`, never sent), as the public report's --max-in-flight; None: no cap.
    max_in_flight: int | None = None
    workers: int = 1  # processes the scored requests are spread over (1 = this process)
    # The agent mode (thetalker.client.websocket): "websocket" opens a session per request on
    # /v1/audio/speech/stream and sends the text in pieces at a pace (thetalker.client.pacing).
    protocol: str = "http"  # or "websocket"
    text_pace: float = 30.0  # per second (0: the whole text as one piece); see text_pace_unit
    text_pace_unit: str = "words"  # or "tokens" (an LLM's rate: a token is ~0.75 words)
    text_pace_jitter: float = 0.0  # each gap times a seeded uniform 1 +- this (0 <= j < 1)
    text_trace: str | None = None  # a file of recorded piece offsets; replaces the pace
    split_granularity: str = "sentence"  # the server's unit: none, sentence or clause
    # The variable holding the API key (thetalker.api.auth; None: its defaults). Never the key.
    api_key_env: str | None = None
    # An explicit sample_rate checked against the server's (one non-streamed wav request
    # before the warmup; thetalker-bench sets it unless --trust-sample-rate).
    check_sample_rate: bool = False
    # The server's API (thetalker.backends.api): which body, stream, socket and errors it
    # speaks. Resolved once per run (`server_api`) and carried as an object from there.
    server: str = backends.DEFAULT_API
    # The audible onset's settings (thetalker.metrics.onset; default: the public report's
    # -45 dBFS rule), named in every record's audible_onset_rule and in the summary.
    onset: metrics.OnsetSettings = metrics.DEFAULT_ONSET


class BenchError(RuntimeError):
    """The run could not be carried out (as opposed to requests that failed, which are data)."""


class OptionsError(BenchError, ValueError):
    """Bad options; the message names the option."""


class SampleRateError(BenchError):
    """The sample rate is unknown or not the expected one."""


class ProbeError(BenchError):
    """The sample-rate request failed (server down, HTTP error)."""


class RequestRefusedError(BenchError):
    """The server refuses the run's streamed request as it will every one (a 4xx, or an
    answer that is not the stream asked for): the run stops before its warmup."""


class ProbeRefusedError(ProbeError, RequestRefusedError):
    """The sample-rate request (the run's body as one `wav`) answered with a 4xx: the request
    is wrong for this server (a voice, a model), so the run stops as for a refused stream
    (exit 2); an explicit rate's check only warns, and the streamed request decides."""


def server_api(opts: BenchOptions) -> backends.ServerApi:
    """The API `opts.server` names: the one place the client resolves it (OptionsError if
    none); the run carries the object from there."""
    try:
        return backends.api(opts.server)
    except backends.UnknownBackendError as exc:
        raise OptionsError(field_message("option", "server", str(exc))) from None


def validate_options(opts: BenchOptions) -> backends.ServerApi:
    """Raise OptionsError naming the first bad field; the run's API (`server_api`) when
    every field is good."""

    def bad(name: str, why: str | None) -> None:
        if why is not None:  # the one message format (thetalker.util.checks)
            raise OptionsError(field_message("option", name, why))

    from thetalker.api.auth import ApiKeyError, api_key_from_env

    try:
        api_key_from_env(opts.api_key_env)
    except ApiKeyError as exc:
        bad("api_key_env", str(exc))
    # The ranges a job's fields have too (thetalker.pipeline.job), written once.
    bad("concurrency", at_least(opts.concurrency, 1))
    bad("requests", at_least(opts.requests, 1))
    bad("warmup", at_least(opts.warmup, 0))
    if not isinstance(opts.workers, int) or opts.workers < 1:
        bad("workers", f"must be a positive integer (got {opts.workers!r})")
    if opts.save_audio_count is not None:
        if not isinstance(opts.save_audio_count, int) or opts.save_audio_count < 0:
            bad("save_audio_count", f"must be 0 or more (got {opts.save_audio_count!r})")
        if opts.save_audio_dir is None:
            bad("save_audio_count", "needs save_audio_dir")
    if opts.request_rate is not None:
        bad("request_rate", positive_rate(opts.request_rate))
    if opts.max_in_flight is not None:
        if not isinstance(opts.max_in_flight, int) or opts.max_in_flight < 1:
            bad("max_in_flight", f"must be a positive integer (got {opts.max_in_flight!r})")
        if opts.request_rate is None:
            bad("max_in_flight", "caps the open loop only: needs request_rate")
        if opts.workers > 1:
            bad("max_in_flight", "needs one worker (one count of requests in flight)")
    bad("timeout_s", finite_seconds(opts.timeout_s))
    if opts.task_type not in TASK_TYPES:
        bad("task_type", f"{opts.task_type!r} is not one of {', '.join(TASK_TYPES)}")
    if opts.stream_format not in STREAM_FORMATS:
        bad("stream_format", f"{opts.stream_format!r} is not one of {', '.join(STREAM_FORMATS)}")
    if opts.response_format not in RESPONSE_FORMATS:
        bad("response_format", f"{opts.response_format!r} cannot be streamed (use pcm or wav)")
    for name in ("sample_rate", "expected_sample_rate", "max_new_tokens"):
        value = getattr(opts, name)
        if value is not None and (not isinstance(value, int) or value <= 0):
            bad(name, f"must be a positive integer (got {value!r})")
    given, expected = opts.sample_rate, opts.expected_sample_rate
    if given and expected and given != expected:  # refused before anything is sent
        bad(
            "sample_rate",
            f"{given} Hz given, but expected_sample_rate is {expected} Hz",
        )
    if not (math.isfinite(opts.threshold_s) and opts.threshold_s > 0):
        bad("threshold_s", f"must be a finite number of seconds > 0 (got {opts.threshold_s})")
    if not isinstance(opts.onset, metrics.OnsetSettings):
        bad("onset", f"must be thetalker.metrics.OnsetSettings (got {opts.onset!r})")
    onset_problem = opts.onset.problem()
    if onset_problem is not None:
        bad(f"onset.{onset_problem.field}", onset_problem.why)
    bad("max_error_rate", fraction(opts.max_error_rate))
    if opts.task_type == "Base" and not (opts.ref_audio or opts.voice):
        bad("task_type", "Base needs ref_audio (with ref_text) or voice")
    if opts.task_type == "VoiceDesign" and not opts.instructions:
        bad("instructions", "VoiceDesign needs instructions")
    if opts.instructions is not None and len(opts.instructions) > MAX_INSTRUCTIONS_CHARS:
        limit = MAX_INSTRUCTIONS_CHARS
        bad("instructions", f"at most {limit} characters (got {len(opts.instructions)})")
    if opts.ref_audio is not None and not Path(opts.ref_audio).is_file():
        bad("ref_audio", f"no such file: {opts.ref_audio}")
    if opts.ref_audio is not None and Path(opts.ref_audio).is_file():
        # The speech API takes 1 to 30 s; refuse here rather than fail every request later.
        try:
            check_reference_clip(opts.ref_audio)
        except WavError as exc:
            bad("ref_audio", str(exc))
    if opts.register_voice is not None and not opts.ref_audio:
        bad("register_voice", "needs ref_audio (and ref_text) to upload")
    shown_url = redact_url(opts.base_url)  # a URL's password is never printed
    if not opts.base_url.startswith(("http://", "https://")):
        bad("base_url", f"must start with http:// or https:// (got {shown_url!r})")
    url_problem = _url_problem(opts.base_url)
    if url_problem:
        bad("base_url", f"{url_problem} (got {shown_url!r})")
    api = server_api(opts)
    if opts.stream_format not in api.stream_formats:
        allowed = ", ".join(api.stream_formats)
        bad("stream_format", f"{opts.stream_format!r}: server {opts.server} streams {allowed}")
    if opts.response_format not in api.response_formats:
        allowed = ", ".join(api.response_formats)
        bad("response_format", f"{opts.response_format!r}: server {opts.server} streams {allowed}")
    granularities = api.agent.split_granularities if api.agent else ()
    if opts.protocol == "websocket" and opts.split_granularity not in granularities:
        allowed = ", ".join(granularities)
        why = f"{opts.split_granularity!r}: server {opts.server} splits by {allowed}"
        bad("split_granularity", why)
    if opts.protocol == "websocket" and api.agent is None:
        bad("protocol", f"server {opts.server} has no agent-mode socket")
    if api.task_types is not None and opts.task_type not in api.task_types:
        allowed = ", ".join(api.task_types)
        bad("task_type", f"server {opts.server} serves {allowed} only (got {opts.task_type})")
    speaker = opts.voice or opts.speaker
    if speaker and api.speakers and api.normalise_speaker(speaker) not in api.speakers:
        name = "voice" if opts.voice else "speaker"
        known = ", ".join(api.speakers)
        bad(name, f"server {opts.server} has no speaker {speaker!r} (it has {known})")
    if opts.register_voice is not None and not api.voice_upload:
        bad("register_voice", f"server {opts.server} has no voice upload")
    _validate_agent(opts, bad)
    return api


def _url_problem(url: str) -> str | None:
    """Why `url` is no usable http(s) URL (no host, a bad port, spaces), or None."""
    from urllib.parse import urlsplit

    if any(c.isspace() for c in url):
        return "a URL cannot contain spaces"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port that is no number 0-65535)
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    if not parts.hostname:
        return "no host in the URL"
    return None


PROTOCOLS = ("http", "websocket")
SPLIT_GRANULARITIES = ("none", "sentence", "clause")


def _validate_agent(opts: BenchOptions, bad: Callable[[str, str | None], None]) -> None:
    """The agent mode's options (thetalker.client.websocket)."""
    from thetalker.client.pacing import TEXT_PACE_UNITS, TraceError, load_trace

    if opts.protocol not in PROTOCOLS:
        bad("protocol", f"{opts.protocol!r} is not one of {', '.join(PROTOCOLS)}")
    if opts.protocol != "websocket":
        return
    if opts.split_granularity not in SPLIT_GRANULARITIES:
        allowed = ", ".join(SPLIT_GRANULARITIES)
        bad("split_granularity", f"{opts.split_granularity!r} is not one of {allowed}")
    if not opts.text_pace >= 0:
        bad("text_pace", f"must be 0 (all at once) or more (got {opts.text_pace})")
    if opts.text_pace_unit not in TEXT_PACE_UNITS:
        bad("text_pace_unit", f"{opts.text_pace_unit!r} is not one of words, tokens")
    if not 0 <= opts.text_pace_jitter < 1:
        bad("text_pace_jitter", f"must be within [0, 1) (got {opts.text_pace_jitter})")
    if opts.response_format != "pcm":
        bad("response_format", "the WebSocket streams pcm only (stream_audio needs it)")
    if opts.text_trace is not None:
        try:
            load_trace(opts.text_trace)
        except TraceError as exc:
            bad("text_trace", str(exc))


def effective_workers(opts: BenchOptions) -> int:
    """Workers that would get something to do: no more than requests (closed loop: streams)."""
    k = min(opts.workers, opts.requests)
    return k if opts.request_rate is not None else min(k, opts.concurrency)
