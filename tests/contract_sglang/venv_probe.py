"""Questions for sglang-omni 0.1.9's own code, asked in its contract venv; JSON in, JSON out.

    python tests/contract_sglang/venv_probe.py QUESTIONS.json ANSWERS.json

Input: {"checkpoints": {NAME: DIR, ...}, "bodies": [[NAME, body], ...], "sessions":
[[NAME, session.config], ...]}. Output, in the same order:

- bodies: whether the speech route's own validator (`SpeechRequestValidator.parse_request`,
  built as `create_app` builds it for the checkpoint in DIR: its CustomVoice speakers or
  Base references, its checks) accepts the body, and how 0.1.9 reads it (streamed or not,
  SSE or raw, the voice, task and format it set, the keys its `CreateSpeechRequest` does
  not know).
- sessions: whether the WebSocket handler's `session.config` checks accept the message
  (`SpeechStreamSessionConfig` and its split-granularity and PCM rules).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def validator_for(model_path: str):
    """The validator `create_app` builds, from the pipeline config `sgl-omni serve` picks."""
    from sglang_omni.models.qwen3_tts.config import Qwen3TTSPipelineConfig
    from sglang_omni.serve.speech_service import SpeechRequestValidator
    from sglang_omni.serve.speech_voices import SpeakerSampleStore

    config = Qwen3TTSPipelineConfig(model_path=model_path)
    return SpeechRequestValidator(
        default_model=model_path,
        custom_voice_config=config.resolve_custom_voice_config(),
        requires_uploaded_voice_for_named_voice=config.requires_uploaded_voice_for_named_voice(),
        supports_uploaded_voice_references=config.supports_uploaded_voice_references(),
        required_speech_reference_count=config.required_speech_reference_count,
        speech_reference_text_required=config.speech_reference_text_required,
        speech_reference_text_excludes_instructions=(
            config.speech_reference_text_excludes_instructions
        ),
        additional_speech_languages=config.additional_speech_languages,
        max_speech_input_chars=config.max_speech_input_chars,
        supported_speech_fields=config.supported_speech_fields,
        voice_store=SpeakerSampleStore(),
    )


def known_fields(model) -> set[str]:
    known = set(model.model_fields)
    for field in model.model_fields.values():
        alias = field.validation_alias
        known.update(getattr(alias, "choices", None) or ([alias] if alias else []))
        if field.alias:
            known.add(field.alias)
    return known


def check_body(validator, body: dict) -> dict:
    from sglang_omni.serve.protocol import CreateSpeechRequest
    from sglang_omni.serve.speech_errors import SpeechAPIError

    try:
        request = validator.parse_request(body)
    except SpeechAPIError as exc:
        return {"ok": False, "status": exc.status_code, "error": exc.message}
    return {
        "ok": True,
        "stream": bool(request.stream or request.stream_format == "sse"),
        "sse": request.stream_format == "sse",
        "voice": request.voice,
        "task_type": request.task_type,
        "response_format": request.response_format,
        "unknown_keys": sorted(set(body) - known_fields(CreateSpeechRequest)),
    }


def check_session(validator, message: dict) -> dict:
    from sglang_omni.serve import speech_ws
    from sglang_omni.serve.protocol import SpeechStreamSessionConfig
    from sglang_omni.serve.speech_errors import SpeechAPIError

    raw = {k: v for k, v in message.items() if k != "type"}
    try:  # the checks speech_ws.py runs on session.config, in its order
        validator.validate_raw_speech_fields(raw)
        speech_ws.validate_raw_session_fields(raw)
        validator.validate_supported_fields(raw, SpeechStreamSessionConfig)
        config = SpeechStreamSessionConfig.model_validate(raw)
    except SpeechAPIError as exc:
        return {"ok": False, "error": exc.message}
    except Exception as exc:  # pydantic's ValidationError, as the handler reports it
        return {"ok": False, "error": str(exc).splitlines()[0]}
    if config.split_granularity not in speech_ws.SUPPORTED_SPLIT_GRANULARITIES:
        return {"ok": False, "error": f"split_granularity {config.split_granularity!r}"}
    if config.stream_audio and config.response_format.lower() != "pcm":
        return {"ok": False, "error": "stream_audio=true requires response_format='pcm'"}
    unknown = sorted(set(raw) - known_fields(SpeechStreamSessionConfig))
    return {"ok": True, "split_granularity": config.split_granularity, "unknown_keys": unknown}


def main(argv: list[str]) -> int:
    questions = json.loads(Path(argv[0]).read_text())
    os.environ.setdefault("SPEAKER_SAMPLES_DIR", tempfile.mkdtemp(prefix="sglang-voices-"))
    validators = {name: validator_for(d) for name, d in questions["checkpoints"].items()}
    answers = {
        "bodies": [check_body(validators[n], b) for n, b in questions.get("bodies", [])],
        "sessions": [check_session(validators[n], m) for n, m in questions.get("sessions", [])],
    }
    Path(argv[1]).write_text(json.dumps(answers, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
