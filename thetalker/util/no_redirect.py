"""The no-redirect rule for aiohttp: one 3xx check, and a session trace for the one request
that takes no `allow_redirects` switch.

Every request TheTalker sends may carry the API key, so none follows a redirect (the rule
and its reason: `thetalker.util.http_get`). The HTTP calls (speech, probe, voices) pass
`allow_redirects=False` and say a 3xx through `redirect_answer`. The agent mode's WebSocket
handshake is aiohttp's `ws_connect`, which would follow one: the run's session carries
`refuse_redirects()`, whose trace raises `RedirectRefused` before aiohttp follows it, so the
redirect is the session's recorded answer and the other origin hears nothing.
"""

from __future__ import annotations

from types import SimpleNamespace

import aiohttp

from thetalker.util.http_get import redirect_note

__all__ = ["RedirectRefused", "redirect_answer", "refuse_redirects"]


class RedirectRefused(aiohttp.ClientError):
    """A redirect aiohttp was about to follow, refused; `note` says it (`redirect_note`)."""

    def __init__(self, status: int, note: str) -> None:
        super().__init__(note)
        self.status = status
        self.note = note


def redirect_answer(resp: aiohttp.ClientResponse, url: str | None = None) -> str | None:
    """A 3xx answer's note (`HTTP 302: a redirect to <origin>, not followed`), None for any
    other status; a relative `Location` is read against `url` (default: the response's)."""
    if not 300 <= resp.status < 400:
        return None
    return redirect_note(resp.status, resp.headers.get("Location"), url or str(resp.url))


async def _refuse(
    session: aiohttp.ClientSession,
    context: SimpleNamespace,
    params: aiohttp.TraceRequestRedirectParams,
) -> None:
    resp = params.response
    note = redirect_answer(resp, str(params.url)) or f"HTTP {resp.status}"
    resp.close()  # its connection is dropped, not handed back to the pool half-read
    raise RedirectRefused(resp.status, note)


def refuse_redirects() -> aiohttp.TraceConfig:
    """A session trace that refuses every redirect aiohttp would follow (`RedirectRefused`)."""
    trace = aiohttp.TraceConfig()
    trace.on_request_redirect.append(_refuse)
    return trace
