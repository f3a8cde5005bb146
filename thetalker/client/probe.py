"""The server's sample rate, from one non-streamed `wav` request before the warmup."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from thetalker import backends
from thetalker.api.speech import error_message, speech_url
from thetalker.client.options import ProbeError, SampleRateError
from thetalker.client.receive import _describe
from thetalker.data.wavio import WavError, parse_wav_header
from thetalker.util.redact import redact_url

__all__ = ["probe_sample_rate"]


async def probe_sample_rate(
    session: aiohttp.ClientSession,
    base_url: str,
    body: dict[str, Any],
    timeout_s: float,
    server: str = backends.DEFAULT,
) -> int:
    """The server's rate from the header of one non-streamed `wav` response: the streamed
    `body` made a probe in the dialect of `server` (thetalker.backends)."""
    probe = backends.get(server).body.probe(body)
    url = speech_url(base_url)
    shown = redact_url(url)  # what is printed: no password
    try:
        async with (
            asyncio.timeout(timeout_s),
            session.post(url, json=probe) as resp,
        ):
            data = await resp.read()
            if resp.status >= 400:
                message = error_message(data, resp.status, resp.content_type)
                raise ProbeError(f"sample-rate request to {shown}: HTTP {resp.status}: {message}")
    except TimeoutError:
        raise ProbeError(
            f"sample-rate request to {shown}: no answer within {timeout_s:g} s"
        ) from None
    except aiohttp.ClientError as exc:
        raise ProbeError(f"sample-rate request to {shown}: {_describe(exc)}") from None
    try:
        return parse_wav_header(data, source="sample-rate response").sample_rate
    except WavError as exc:
        raise SampleRateError(f"{exc}; give sample_rate explicitly") from None
