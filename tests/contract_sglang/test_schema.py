"""What the client sends to `--server sglang-omni`, read by sglang-omni 0.1.9's own checks:
every request body (the speech route's validator) and every agent-mode `session.config`
(the WebSocket handler's), on a CustomVoice and a Base checkpoint folder. One probe run in
the SGLang venv answers every question (`venv_probe.py`)."""

from __future__ import annotations

import itertools

import pytest

from tests.contract_sglang.conftest import run_probe, write_checkpoint
from thetalker import backends
from thetalker.client import BenchOptions, build_request_body
from thetalker.client.body import probe_request_body
from thetalker.client.options import OptionsError, validate_options
from thetalker.client.websocket import session_config

SERVER = "sglang-omni"
# A 16 kHz WAV with no samples: enough for the validator to read a data URI's media type.
REF_URI = "data:audio/wav;base64,UklGRiQAAABXQVZFZm10IBAAAAABAAEAgD4AAAB9AAACABAAZGF0YQAAAAA="


def client_bodies() -> list[tuple[str, str, dict]]:
    """(label, checkpoint, body) for every kind of body the client builds for sglang-omni,
    and the sample-rate request made from each."""
    cases = []
    voices = [
        ("custom", "speaker", {"task_type": "CustomVoice", "speaker": "ryan"}),
        ("custom", "voice", {"task_type": "CustomVoice", "speaker": None, "voice": "Ryan"}),
        ("base", "inline", {"task_type": "Base", "speaker": None, "ref_audio": "x.wav"}),
    ]
    extras = [
        {},
        {"model": "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice", "max_new_tokens": 2048},
        {"language": None},
    ]
    for (checkpoint, name, voice), stream, extra in itertools.product(
        voices, ("audio", "sse"), extras
    ):
        ref_text = {"ref_text": "A short tone."} if voice.get("ref_audio") else {}
        opts = BenchOptions(server=SERVER, stream_format=stream, **voice, **ref_text, **extra)
        uri = REF_URI if opts.ref_audio else None
        body = build_request_body(opts, "Hello there, this is a test.", uri)
        label = f"{name}-{stream}-{sorted(extra)}"
        cases.append((label, checkpoint, body))
        cases.append((label + "-probe", checkpoint, probe_request_body(opts, body)))
    return cases


def client_sessions() -> list[tuple[str, dict]]:
    out = []
    for granularity in backends.api(SERVER).agent.split_granularities:
        opts = BenchOptions(
            server=SERVER, protocol="websocket", speaker="ryan", split_granularity=granularity
        )
        out.append((granularity, session_config(opts)))
    return out


BODIES = client_bodies()
SESSIONS = client_sessions()
WAV_BODY = {"input": "Hi.", "voice": "ryan", "stream": True, "response_format": "wav"}
NONE_SESSION = {**SESSIONS[0][1], "split_granularity": "none"}


@pytest.fixture(scope="module")
def answers(sglang_python, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("checkpoints")
    questions = {
        "checkpoints": {
            "custom": str(write_checkpoint(root, "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice")),
            "base": str(write_checkpoint(root, "Qwen/Qwen3-TTS-12Hz-1.7B-Base")),
        },
        "bodies": [[c, b] for _, c, b in BODIES] + [["custom", WAV_BODY]],
        "sessions": [["custom", m] for _, m in SESSIONS] + [["custom", NONE_SESSION]],
    }
    return run_probe(sglang_python, questions, tmp_path_factory.mktemp("probe"))


@pytest.mark.parametrize("index", range(len(BODIES)), ids=[label for label, _, _ in BODIES])
def test_every_client_body_is_a_valid_0_1_9_request(answers, index):
    label, _, body = BODIES[index]
    answer = answers["bodies"][index]
    assert answer["ok"], f"{label}: sglang-omni refuses {body}: {answer.get('error')}"
    assert answer["unknown_keys"] == [], f"{label}: keys sglang-omni ignores"
    assert answer["stream"], "the client streams every request, the rate probe too"
    assert answer["sse"] is (body["stream_format"] == "sse")
    assert answer["response_format"] == "pcm"
    assert answer["task_type"] == body["task_type"]
    if "voice" in body:
        assert answer["voice"] == body["voice"]
    assert "speaker" not in body, "the built-in speaker goes as `voice` (speaker is an alias)"


def test_streaming_wav_is_refused_by_the_server_and_never_sent(answers):
    answer = answers["bodies"][len(BODIES)]
    assert not answer["ok"] and answer["status"] == 400
    assert "requires response_format='pcm'" in answer["error"]
    opts = BenchOptions(server=SERVER, speaker="ryan", response_format="wav")
    refused = r"^option field response_format: 'wav': server sglang-omni"
    with pytest.raises(OptionsError, match=refused):
        validate_options(opts)


@pytest.mark.parametrize("index", range(len(SESSIONS)), ids=[label for label, _ in SESSIONS])
def test_every_session_config_is_accepted_by_the_socket(answers, index):
    label, message = SESSIONS[index]
    answer = answers["sessions"][index]
    assert answer["ok"], f"{label}: the socket refuses {message}: {answer.get('error')}"
    assert answer["split_granularity"] == label and answer["unknown_keys"] == []


def test_split_granularity_none_is_refused_by_the_socket_and_never_sent(answers):
    assert not answers["sessions"][len(SESSIONS)]["ok"]
    assert "none" not in backends.api(SERVER).agent.split_granularities
    opts = BenchOptions(
        server=SERVER, protocol="websocket", speaker="ryan", split_granularity="none"
    )
    refused = r"^option field split_granularity: 'none': server sglang-omni"
    with pytest.raises(OptionsError, match=refused):
        validate_options(opts)
