"""The server kinds (thetalker.backends): the registry, and what each kind's body holds."""

from __future__ import annotations

import json

import pytest

from thetalker import backends
from thetalker.client.body import BodyEncoder, build_request_body
from thetalker.client.options import BenchOptions, OptionsError, validate_options


def test_registry_names_every_launcher_and_api_and_refuses_others():
    assert backends.DEFAULT_API == "vllm-omni"
    for name in backends.launcher_names():
        launcher = backends.launcher(name)
        assert launcher.name == name and launcher.api in backends.api_names()
    for name in backends.api_names():
        assert backends.api(name).name == name
    with pytest.raises(backends.UnknownBackendError, match="unknown server 'nope'"):
        backends.api("nope")
    with pytest.raises(backends.UnknownBackendError, match="unknown launcher 'nope'"):
        backends.launcher("nope")


def test_external_and_command_front_any_api_and_default_to_vllm_omni():
    """config/README.md: `server` defaults to vllm-omni's API for these two launchers."""
    for name in ("external", "command"):
        launcher = backends.launcher(name)
        assert launcher.any_api and launcher.api == "vllm-omni"
    assert not any(backends.launcher(n).any_api for n in ("vllm-omni", "local", "nari"))


def test_the_local_launcher_serves_the_embedded_servers_one_model():
    from thetalker.server.contract import SERVED_MODEL_NAME

    assert backends.launcher("local").served_models == (SERVED_MODEL_NAME,)
    assert not backends.api("local").clones_voices and backends.api("vllm-omni").clones_voices


def test_the_api_crosses_processes_whole():
    """The run's API rides in the context to the record writer and the workers."""
    import pickle

    for name in backends.api_names():
        assert pickle.loads(pickle.dumps(backends.api(name))) == backends.api(name)


def test_vllm_omni_body_is_the_speech_api_one():
    opts = BenchOptions(model="m", speaker="ryan")
    assert build_request_body(opts, "Hi.") == {
        "input": "Hi.",
        "task_type": "CustomVoice",
        "model": "m",
        "language": "English",
        "speaker": "ryan",
        "stream": True,
        "stream_format": "audio",
        "response_format": "pcm",
    }


def test_encoder_bytes_are_the_body_for_a_kind_without_per_request_fields():
    opts = BenchOptions(model="m", speaker="ryan", server="local")
    encoder = BodyEncoder(opts, None)
    assert json.loads(encoder.encode("Hi.", 7)) == build_request_body(opts, "Hi.")
    assert encoder.encode("Hi.", 7) == encoder.encode("Hi.", 8)


def test_options_refuse_an_unknown_server():
    with pytest.raises(OptionsError, match="^option field server: unknown server 'x'"):
        validate_options(BenchOptions(server="x"))


def test_errors_type_a_status_by_its_message_then_its_status():
    errors = backends.Errors(
        by_status={503: "overloaded"}, by_message={503: (("not ready", "not_ready"),)}
    )
    assert errors.failure_type(503, "Service is NOT READY: starting") == "not_ready"
    assert errors.failure_type(503, "budget exceeded") == "overloaded"
    assert errors.failure_type(500, "boom") == "http_status"


def test_nari_body_has_only_its_schema_fields_in_exact_types():
    opts = BenchOptions(
        server="nari", model="m", speaker="ryan", max_new_tokens=512, instructions="calm"
    )
    body = build_request_body(opts, "Hi.")
    assert body == {
        "input": "Hi.",
        "model": "m",
        "voice": "ryan",  # never `speaker`
        "language": "English",
        "instructions": "calm",
        "max_new_tokens": 512,
        "response_format": "pcm",
        "stream": True,
        "non_streaming_mode": False,  # the streaming text layout
        "seed": 42,
    }
    assert type(body["seed"]) is int and type(body["max_new_tokens"]) is int
    probe = backends.api("nari").body.probe(body)
    assert "stream" not in probe and probe["response_format"] == "wav"


def test_nari_requests_get_a_seed_each():
    opts = BenchOptions(server="nari", speaker="ryan", seed=7)
    encoder = BodyEncoder(opts, None)
    first, second = json.loads(encoder.encode("Hi.", 0)), json.loads(encoder.encode("Hi.", 1))
    assert (first["seed"], second["seed"]) == (7, 8)
    assert {k: v for k, v in first.items() if k != "seed"} == {
        k: v for k, v in second.items() if k != "seed"
    }
    start = backends.api("nari").agent.start(opts, None)
    assert start["type"] == "request.start" and "input" not in start and "stream" not in start


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        (BenchOptions(server="nari", stream_format="sse"), "stream_format: 'sse': server nari"),
        (BenchOptions(server="nari", task_type="Base", voice="v"), "task_type: server nari"),
        (
            BenchOptions(server="external"),
            "server: unknown server 'external': a launcher, not an API",
        ),
        (BenchOptions(server="nari", speaker="joe"), "speaker: server nari has no speaker 'joe'"),
    ],
)
def test_options_refuse_what_a_server_cannot_do(opts: BenchOptions, message: str):
    with pytest.raises(OptionsError, match=f"^option field {message}"):
        validate_options(opts)


def test_nari_errors_are_typed_by_what_they_mean():
    errors = backends.api("nari").errors
    assert errors.failure_type(422, "body.task_type: Extra inputs are not permitted") == "rejected"
    assert errors.failure_type(429, "active request capacity exceeded") == "overloaded"
    # A failed or stopped engine never recovers: a failure of the run, not a start-up wait.
    for reason in ("service_failed", "service_stopped"):
        message = f"Qwen3-TTS service is not ready: {reason}"
        assert errors.failure_type(503, message) == "server_failed"
    assert (
        errors.failure_type(503, "Qwen3-TTS service is not ready: service_starting") == "not_ready"
    )
    assert errors.failure_type(500, "Qwen3-TTS serving request failed") == "http_status"


def test_a_socket_error_event_is_typed_by_its_words_where_the_api_says_so():
    nari, vllm = backends.api("nari").errors, backends.api("vllm-omni").errors
    failed = "invalid_request: Qwen3-TTS service is not ready: service_failed"
    assert nari.event_failure_type("session_refused", failed) == "server_failed"
    starting = "invalid_request: Qwen3-TTS service is not ready: service_starting"
    assert nari.event_failure_type("session_refused", starting) == "not_ready"
    # A failure while streaming keeps its own type: the engine's cut, as a cut HTTP body.
    cut = "generation_failed: Qwen3-TTS generation failed"
    assert nari.event_failure_type("ws_error", cut) == "ws_error"
    assert vllm.event_failure_type("session_refused", failed) == "session_refused"
