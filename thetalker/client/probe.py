"""The server's sample rate, asked before the warmup: from the header of one non-streamed `wav`
request, or (a server that states it, `Backend.sample_rate_header`) from that header of one
streamed request, read to its end."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from thetalker import backends
from thetalker.api.speech import error_message, speech_url
from thetalker.client.options import ProbeError, SampleRateError
from thetalker.client.receive import ResponseTooLarge, _describe, read_at_most
from thetalker.data.wavio import WavError, parse_wav_header
from thetalker.util.http_get import redirect_note
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
    backend = backends.get(server)
    if backend.sample_rate == backends.SAMPLE_RATE_HEADER and backend.sample_rate_header:
        return await _rate_from_header(
            session, base_url, backend.body.probe(body), timeout_s, backend.sample_rate_header
        )
    probe = backend.body.probe(body)
    url = speech_url(base_url)
    shown = redact_url(url)  # what is printed: no password
    try:
        async with (
            asyncio.timeout(timeout_s),
            session.post(url, json=probe, allow_redirects=False) as resp,
        ):
            _refuse_redirect(resp, shown)
            data = await read_at_most(resp)
            if resp.status >= 400:
                message = error_message(data, resp.status, resp.content_type)
                raise ProbeError(f"sample-rate request to {shown}: HTTP {resp.status}: {message}")
    except (TimeoutError, aiohttp.ClientError, ResponseTooLarge) as exc:
        raise _request_error(shown, timeout_s, exc) from None
    try:
        return parse_wav_header(data, source="sample-rate response").sample_rate
    except WavError as exc:
        raise SampleRateError(f"{exc}; give sample_rate explicitly") from None


def _refuse_redirect(resp: aiohttp.ClientResponse, shown: str) -> None:
    """A redirect is the server's answer, never followed (the request carries the key)."""
    if 300 <= resp.status < 400:
        note = redirect_note(resp.status, resp.headers.get("Location"), str(resp.url))
        raise ProbeError(f"sample-rate request to {shown}: {note}")


def _request_error(shown: str, timeout_s: float, exc: Exception) -> ProbeError:
    """The one-line error of a sample-rate request that timed out or failed to connect."""
    if isinstance(exc, TimeoutError):
        return ProbeError(f"sample-rate request to {shown}: no answer within {timeout_s:g} s")
    if isinstance(exc, ResponseTooLarge):
        return ProbeError(f"sample-rate request to {shown}: {exc}")
    return ProbeError(f"sample-rate request to {shown}: {_describe(exc)}")


async def _rate_from_header(
    session: aiohttp.ClientSession,
    base_url: str,
    body: dict[str, Any],
    timeout_s: float,
    header: str,
) -> int:
    """The rate the server states in `header` of one streamed response (read to its end, so
    the request finishes rather than being aborted)."""
    url = speech_url(base_url)
    try:
        async with (
            asyncio.timeout(timeout_s),
            session.post(url, json=body, allow_redirects=False) as resp,
        ):
            _refuse_redirect(resp, redact_url(url))
            if resp.status >= 400:
                data = await resp.content.read(64 * 1024)
                message = error_message(data, resp.status, resp.content_type)
                raise ProbeError(f"sample-rate request to {url}: HTTP {resp.status}: {message}")
            stated = resp.headers.get(header)
            await read_at_most(resp)
    except (TimeoutError, aiohttp.ClientError, ResponseTooLarge) as exc:
        raise _request_error(url, timeout_s, exc) from None
    if stated is None or not stated.strip().isdigit() or int(stated) <= 0:
        why = f"the streamed response's {header} header is {stated!r}, not a rate in Hz"
        raise SampleRateError(f"{why}; give sample_rate explicitly")
    return int(stated)
