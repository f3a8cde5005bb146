"""The JSON body of a streamed speech request, and its encoder for the hot path."""

from __future__ import annotations

import json
from typing import Any

from thetalker.client.options import BenchOptions

__all__ = ["build_request_body", "BodyEncoder", "voice_fields"]


def voice_fields(opts: BenchOptions, ref_audio_uri: str | None, speaker_key: str) -> dict[str, Any]:
    """What says who speaks and how, shared by the HTTP body and the WebSocket's
    `session.config`: task, model, language, then one voice source (an uploaded voice, the
    inline reference clip for Base, else the built-in speaker under `speaker_key`)."""
    fields: dict[str, Any] = {"task_type": opts.task_type}
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


def build_request_body(
    opts: BenchOptions, text: str, ref_audio_uri: str | None = None
) -> dict[str, Any]:
    """The JSON body of one streamed request (speech-api.md). `ref_audio_uri` is the data
    URI of `opts.ref_audio`, passed in so the file is read once per run."""
    body: dict[str, Any] = {"input": text, **voice_fields(opts, ref_audio_uri, "speaker")}
    # `stream: true` alone means SSE on recent servers: always say which stream is wanted.
    body["stream"] = True
    body["stream_format"] = opts.stream_format
    body["response_format"] = opts.response_format
    return body


class BodyEncoder:
    """Bytes of each request body from a template, so a large `ref_audio` data URI is
    serialised once per run rather than once per request."""

    def __init__(self, opts: BenchOptions, ref_audio_uri: str | None) -> None:
        common = build_request_body(opts, "", ref_audio_uri)
        del common["input"]
        self._tail = "," + json.dumps(common, separators=(",", ":"))[1:] if common else "}"

    def encode(self, text: str) -> bytes:
        return ('{"input":' + json.dumps(text) + self._tail).encode("utf-8")
