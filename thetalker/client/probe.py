"""What the client asks the server before the warmup: its sample rate, from the header of one
non-streamed `wav` request, or (a server that states it, `ServerApi.sample_rate_header`) from
that header of one streamed request, read to its end; and whether it streams the run's
request at all (`check_stream`): a request the server refuses, or answers with another
stream than the one asked for, is refused for every stream, so the run stops there with
the server's reason in one line (`RequestRefusedError`) instead of measuring 100 % errors."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from thetalker.api.speech import error_message, speech_url
from thetalker.backends import SAMPLE_RATE_HEADER, ServerApi
from thetalker.client.exchange import describe, is_stream_type
from thetalker.client.options import (
    ProbeError,
    ProbeRefusedError,
    RequestRefusedError,
    SampleRateError,
)
from thetalker.client.receive import MAX_RESPONSE_BYTES, ResponseTooLarge, read_at_most
from thetalker.data.wavio import WavError, parse_wav_header
from thetalker.util.no_redirect import redirect_answer
from thetalker.util.redact import redact_url

__all__ = ["probe_sample_rate", "check_stream", "refusal"]

# What is read of a refused answer's body (its error message).
_ERROR_READ = 64 * 1024


async def probe_sample_rate(
    session: aiohttp.ClientSession,
    base_url: str,
    body: dict[str, Any],
    timeout_s: float,
    api: ServerApi,
    sse: bool = False,
) -> int:
    """The server's rate from the header of one non-streamed `wav` response: the streamed
    `body` made a probe in the dialect of `api`. A server stating its rate in a streamed
    response's header is asked with the streamed request itself, checked as `check_stream`
    checks it (`sse`: the run asked for SSE)."""
    if api.sample_rate == SAMPLE_RATE_HEADER and api.sample_rate_header:
        return await _rate_from_header(
            session, base_url, api.body.probe(body), timeout_s, api.sample_rate_header, sse
        )
    probe = api.body.probe(body)
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
                failed = ProbeRefusedError if resp.status < 500 else ProbeError
                raise failed(f"sample-rate request to {shown}: HTTP {resp.status}: {message}")
    except (TimeoutError, aiohttp.ClientError, ResponseTooLarge) as exc:
        raise _request_error(shown, timeout_s, exc) from None
    try:
        return parse_wav_header(data, source="sample-rate response").sample_rate
    except WavError as exc:
        raise SampleRateError(f"{exc}; give sample_rate explicitly") from None


def _refuse_redirect(
    resp: aiohttp.ClientResponse, shown: str, what: str = "sample-rate request"
) -> None:
    """A redirect is the server's answer, never followed (the request carries the key)."""
    note = redirect_answer(resp)
    if note is not None:
        raise ProbeError(f"{what} to {shown}: {note}")


def _request_error(
    shown: str, timeout_s: float, exc: Exception, what: str = "sample-rate request"
) -> ProbeError:
    """The one-line error of a probe request that timed out or failed to connect."""
    if isinstance(exc, TimeoutError):
        return ProbeError(f"{what} to {shown}: no answer within {timeout_s:g} s")
    if isinstance(exc, ResponseTooLarge):
        return ProbeError(f"{what} to {shown}: {exc}")
    return ProbeError(f"{what} to {shown}: {describe(exc)}")


async def _rate_from_header(
    session: aiohttp.ClientSession,
    base_url: str,
    body: dict[str, Any],
    timeout_s: float,
    header: str,
    sse: bool,
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
            if resp.status >= 400 or not is_stream_type(resp.content_type, sse):
                data = await resp.content.read(_ERROR_READ)
                refused = refusal(redact_url(url), resp.status, resp.content_type, data, sse)
                if refused is not None:
                    raise refused
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


def refusal(
    shown: str, status: int, content_type: str | None, data: bytes, sse: bool
) -> RequestRefusedError | None:
    """The error that stops a run whose streamed request the server refuses as it will
    every one: a 4xx (the request itself is wrong for this server: a field, a format, a
    model), or a success that is not the stream asked for (a whole body where SSE was
    asked). None for what may pass (a 5xx, e.g. not ready or overloaded, is the server's
    state, not the request's: the requests record it)."""
    if 400 <= status < 500:
        message = error_message(data, status, content_type)
        return RequestRefusedError(f"streamed request to {shown}: HTTP {status}: {message}")
    if status < 400 and not is_stream_type(content_type, sse):
        asked = "text/event-stream (stream_format sse)" if sse else "audio (stream_format audio)"
        return RequestRefusedError(
            f"streamed request to {shown}: HTTP {status} {content_type or 'with no type'}, "
            f"not the {asked} asked for: the server answers every request so"
        )
    return None


async def check_stream(
    session: aiohttp.ClientSession, base_url: str, body: bytes, timeout_s: float, sse: bool
) -> None:
    """Send the run's streamed request once (`body`, as a scored request sends it) and read
    it to its end: RequestRefusedError when the server refuses it as it will every stream
    (`refusal`). Anything else (a 5xx, a cut body, a timeout) is a fate one request may
    meet: the requests meet it again and record it, so it passes here."""
    url = speech_url(base_url)
    headers = {"Content-Type": "application/json"}
    refused = None
    try:
        async with (
            asyncio.timeout(timeout_s),
            session.post(url, data=body, headers=headers, allow_redirects=False) as resp,
        ):
            _refuse_redirect(resp, redact_url(url), "streamed request")
            if resp.status >= 400 or not is_stream_type(resp.content_type, sse):
                data = await resp.content.read(_ERROR_READ)
                refused = refusal(redact_url(url), resp.status, resp.content_type, data, sse)
            else:
                room = MAX_RESPONSE_BYTES  # to its end, not aborted, within the bound
                async for data in resp.content.iter_any():
                    room -= len(data)
                    if room < 0:
                        resp.close()
                        break
    except (TimeoutError, aiohttp.ClientError):
        return
    if refused is not None:
        raise refused
