"""The JSON body of a streamed speech request, and its encoder for the hot path.

Which fields a server accepts is its API's body dialect (thetalker.backends.ServerApi): the
run resolves the API once (`options.server_api`) and hands it here, so a field one server
refuses is never sent to it."""

from __future__ import annotations

import json
from typing import Any

from thetalker.backends import ServerApi
from thetalker.backends.vllm_omni import voice_fields
from thetalker.client.options import BenchOptions, server_api

__all__ = ["build_request_body", "probe_request_body", "BodyEncoder", "voice_fields"]


def build_request_body(
    opts: BenchOptions, text: str, ref_audio_uri: str | None = None, api: ServerApi | None = None
) -> dict[str, Any]:
    """The JSON body of one streamed request in the dialect of `api` (default: the one
    `opts.server` names). `ref_audio_uri` is the data URI of `opts.ref_audio`, passed in so
    the file is read once per run."""
    return (api or server_api(opts)).body.build(opts, text, ref_audio_uri)


def probe_request_body(
    opts: BenchOptions, body: dict[str, Any], api: ServerApi | None = None
) -> dict[str, Any]:
    """The non-streamed `wav` request that reads the sample rate, from a streamed body."""
    return (api or server_api(opts)).body.probe(body)


class BodyEncoder:
    """Bytes of each request body from a template, so a large `ref_audio` data URI is
    serialised once per run rather than once per request. Fields that must differ per
    request (the dialect's `per_request`, e.g. Nari's `seed`) go after the template's."""

    def __init__(
        self, opts: BenchOptions, ref_audio_uri: str | None, api: ServerApi | None = None
    ) -> None:
        api = api or server_api(opts)
        common = build_request_body(opts, "", ref_audio_uri, api)
        del common["input"]
        self._per_request = api.body.per_request
        self._opts = opts
        for key in self._per_request(opts, 0) if self._per_request else ():
            common.pop(key, None)
        self._tail = "," + json.dumps(common, separators=(",", ":"))[1:] if common else "}"

    def encode(self, text: str, index: int = 0) -> bytes:
        head = '{"input":' + json.dumps(text)
        if self._per_request is not None:
            extra = json.dumps(self._per_request(self._opts, index), separators=(",", ":"))
            head += "," + extra[1:-1]
        return (head + self._tail).encode("utf-8")
