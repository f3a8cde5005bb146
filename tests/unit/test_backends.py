"""The server kinds (thetalker.backends): the registry, and what each kind's body holds."""

from __future__ import annotations

import json

import pytest

from thetalker import backends
from thetalker.client.body import BodyEncoder, build_request_body
from thetalker.client.options import BenchOptions, OptionsError, validate_options


def test_registry_names_every_kind_and_refuses_others():
    assert backends.DEFAULT == "vllm-omni"
    for name in backends.names():
        assert backends.get(name).name == name
    with pytest.raises(backends.UnknownBackendError, match="unknown server 'nope'"):
        backends.get("nope")


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
    with pytest.raises(OptionsError, match="^server: unknown server 'x'"):
        validate_options(BenchOptions(server="x"))


def test_errors_type_a_status_by_its_message_then_its_status():
    errors = backends.Errors(
        by_status={503: "overloaded"}, by_message={503: (("not ready", "not_ready"),)}
    )
    assert errors.failure_type(503, "Service is NOT READY: starting") == "not_ready"
    assert errors.failure_type(503, "budget exceeded") == "overloaded"
    assert errors.failure_type(500, "boom") == "http_status"
