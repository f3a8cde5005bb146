"""The JSON body of a streamed speech request, and its encoder for the hot path."""

from __future__ import annotations

import json
from typing import Any

from thetalker.client.options import BenchOptions

__all__ = ["build_request_body", "BodyEncoder"]


def build_request_body(
    opts: BenchOptions, text: str, ref_audio_uri: str | None = None
) -> dict[str, Any]:
    """The JSON body of one streamed request (speech-api.md). `ref_audio_uri` is the data
    URI of `opts.ref_audio`, passed in so the file is read once per run."""
    body: dict[str, Any] = {"input": text, "task_type": opts.task_type}
    if opts.model:
        body["model"] = opts.model
    if opts.language:
        body["language"] = opts.language
    voice = opts.register_voice or opts.voice
    if voice:
        body["voice"] = voice
    elif opts.task_type == "Base" and ref_audio_uri:
        body["ref_audio"] = ref_audio_uri
        if opts.ref_text:
            body["ref_text"] = opts.ref_text
    elif opts.speaker:
        body["speaker"] = opts.speaker
    if opts.instructions:
        body["instructions"] = opts.instructions
    if opts.max_new_tokens is not None:
        body["max_new_tokens"] = opts.max_new_tokens
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
