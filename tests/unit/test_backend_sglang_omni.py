"""The sglang-omni server kind (thetalker.backends.sglang_omni) as the client and the
lifecycle read it; its behaviour against the real server is the contract tier's
(tests/contract_sglang)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from thetalker import backends
from thetalker.client.body import build_request_body
from thetalker.client.context import RunContext
from thetalker.client.decode import sse_chunks
from thetalker.client.exchange import Exchange
from thetalker.client.http_record import build_http_record
from thetalker.client.options import BenchOptions, OptionsError, validate_options
from thetalker.data.prompts import Prompt
from thetalker.data.records import ERROR_TYPES
from thetalker.lifecycle.launch import ServerSpec, build_command

SGLANG = backends.api("sglang-omni")
SGLANG_LAUNCHER = backends.launcher("sglang-omni")


def test_body_sends_the_speaker_as_voice_and_streams_with_stream_true():
    opts = BenchOptions(server="sglang-omni", speaker="ryan", stream_format="sse")
    assert build_request_body(opts, "Hi.") == {
        "input": "Hi.",
        "task_type": "CustomVoice",
        "language": "English",
        "voice": "ryan",
        "stream": True,
        "stream_format": "sse",
        "response_format": "pcm",
    }


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"response_format": "wav"},
            r"^option field response_format: 'wav': server sglang-omni streams pcm$",
        ),
        (
            {"protocol": "websocket", "split_granularity": "none"},
            r"^option field split_granularity: 'none': server sglang-omni splits by sentence, "
            r"clause$",
        ),
    ],
)
def test_options_refuse_what_sglang_omni_refuses(fields, message):
    with pytest.raises(OptionsError, match=message):
        validate_options(BenchOptions(server="sglang-omni", speaker="ryan", **fields))
    validate_options(BenchOptions(speaker="ryan", **fields))  # vllm-omni takes both


def _events(*payloads: dict) -> list[bytes]:
    return [f"data: {json.dumps(p)}\n\n".encode() for p in payloads]


DELTA = {"type": "speech.audio.delta", "audio": base64.b64encode(b"\x01\x00" * 4).decode()}
ERROR = {"type": "error", "error": {"message": "boom: the vocoder failed", "type": "server_error"}}


def test_its_sse_error_event_is_an_sse_error_with_the_message_kept():
    pieces = _events(DELTA, ERROR)
    arrivals, audio, failure = sse_chunks([1.0, 2.0], pieces, SGLANG.sse_error_events)
    assert audio == [b"\x01\x00" * 4] and arrivals == [1.0]
    assert failure == ("sse_error", "boom: the vocoder failed")
    # vllm-omni has no such event: to its parser the stream just never finished.
    _, _, failure = sse_chunks([1.0, 2.0], pieces)
    assert failure is not None and failure[0] == "truncated"


def test_a_full_queue_is_overloaded_and_other_refusals_stay_http_status():
    assert "overloaded" in ERROR_TYPES
    errors = SGLANG.errors
    assert errors.failure_type(503, "The request queue is full.") == "overloaded"
    assert errors.failure_type(500, "fake engine: boom") == "http_status"
    assert errors.failure_type(400, "Unknown voice 'joe'") == "http_status"
    assert backends.api("vllm-omni").errors.failure_type(503, "queue is full") == "http_status"


def _record(rate_header: str | None, run_rate: int, tmp_path: Path):
    opts = BenchOptions(server="sglang-omni", speaker="ryan")
    ctx = RunContext.for_run(opts, tmp_path, 0.0, run_rate)
    ex = Exchange(0, Prompt("s0", "Hi."), False, t_send=0.0, t_end=1.0, status=200)
    ex.content_type, ex.rate_header = "audio/pcm", rate_header
    ex.times, ex.pieces, ex.ends = [0.5], [b"\x00\x00" * 2400], [True]
    return build_http_record(ctx, ex)


def test_each_record_checks_the_rate_its_response_states(tmp_path):
    assert _record("24000", 24000, tmp_path).ok
    bad = _record("16000", 24000, tmp_path)
    assert not bad.ok and bad.error["type"] == "content_type"
    assert bad.error["message"] == "X-Sample-Rate: 16000 Hz, the run uses 24000 Hz"


def test_launch_command_and_environment():
    spec = ServerSpec(
        launcher="sglang-omni",
        model_id="Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice",
        deploy_config="pipeline.yaml",
        extra_args=["--tts_engine.engine.max_queued_requests", "16"],
    )
    assert build_command(spec, 8000) == [
        "sgl-omni", "serve",
        "--model-path", "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice",
        "--model-name", "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice",
        "--host", "127.0.0.1", "--port", "8000",
        "--config", "pipeline.yaml",
        "--tts_engine.engine.max_queued_requests", "16",
    ]  # fmt: skip
    env = SGLANG_LAUNCHER.launch.env(spec, Path("/run/voices"))
    assert env == {"SGLANG_OMNI_STRICT_PORT": "1", "SPEAKER_SAMPLES_DIR": "/run/voices"}
    assert SGLANG_LAUNCHER.ready_path == "/health" and SGLANG_LAUNCHER.metrics_path is None
    assert SGLANG_LAUNCHER.launch.gpu and SGLANG_LAUNCHER.launch.check_gpu
    assert not SGLANG_LAUNCHER.launch.mps
    assert SGLANG.sample_rate == backends.SAMPLE_RATE_HEADER
    assert SGLANG.sample_rate_header == "X-Sample-Rate"


def test_a_systems_serving_env_names_the_program():
    # The engine tier's CPU venv (tests/engine/sglang), or any second SGLang-Omni build.
    spec = ServerSpec(launcher="sglang-omni", model_id="m", serving_env="/venvs/sglang")
    assert build_command(spec, 8000)[0] == "/venvs/sglang/bin/sgl-omni"
    assert SGLANG_LAUNCHER.system_keys == {"serving_env": False}
