"""One GET to a server TheTalker measures or watches, bounded in time and size, never redirected.

`http_get(url, timeout_s, max_bytes, headers)` is every plain GET the pipeline sends (the
server's health, `/version`, `/v1/models`, `/metrics`). Three rules, each from a red-team
finding (issue 36):

- **Bounded by total time.** A socket timeout bounds each read, not the answer: a server
  trickling a byte a second would hold the job for ever. A timer shuts the socket down at
  `timeout_s` from the start, whatever stage the exchange is in.
- **Bounded in size.** More than `max_bytes` of body is an error, not a buffer that grows.
- **No redirect followed.** urllib copies every header onto a redirect, an API key's
  `Authorization` included, whatever the new host: a request carrying a credential would hand
  it to whoever the server points at. A 3xx is the answer (`status`, `location`), said as
  `redirect_note`; the client's aiohttp requests follow none either, for the same reason
  (`thetalker.util.no_redirect`).

No proxy is used: the servers are the job's own or named by their URL.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

__all__ = ["GetError", "GetAnswer", "http_get", "origin", "redirect_origin", "redirect_note"]


class GetError(Exception):
    """No usable answer: refused, cut, too slow or too large (one line, the reason)."""


@dataclass(frozen=True)
class GetAnswer:
    """The status, the body (at most `max_bytes`), and a redirect's target, not followed."""

    status: int
    reason: str
    body: bytes
    content_type: str | None
    location: str | None = None

    @property
    def redirect(self) -> bool:
        return 300 <= self.status < 400


def origin(url: str) -> str:
    """`scheme://host:port` of a URL, without its user, password, path or query."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname or ''}{port}"


def redirect_origin(location: str | None, url: str) -> str | None:
    """The origin a redirect of `url`'s answer points at (a relative `location` is `url`'s);
    None without a location, or where it is no URL (the server writes it: a port out of
    range, a broken IPv6 host)."""
    if not location:
        return None
    try:
        return origin(urljoin(url, location))
    except ValueError:
        return None


def redirect_note(status: int, location: str | None, url: str) -> str:
    """What a redirect not followed is recorded as: the status and the target's origin
    only (a URL's path or query may carry a token); a relative `location` is `url`'s."""
    where = redirect_origin(location, url)
    if where is None:
        where = "an address that is no URL" if location else "nowhere"
    return f"HTTP {status}: a redirect to {where}, not followed"


def http_get(
    url: str,
    timeout_s: float,
    max_bytes: int,
    headers: Mapping[str, str] | None = None,
) -> GetAnswer:
    """GET `url`; GetError when no whole answer came within `timeout_s` or it is larger
    than `max_bytes`. Any status is an answer (a 3xx is not followed)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise GetError(f"not an http(s) URL: {origin(url)}")
    try:
        port = parts.port
    except ValueError as exc:
        raise GetError(f"bad port in the URL: {exc}") from None
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname, port, timeout=timeout_s)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    expired = threading.Event()

    def cut() -> None:  # the deadline: a blocked read returns at once
        expired.set()
        sock = conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(timeout_s, cut)
    timer.daemon = True
    started = time.monotonic()
    timer.start()
    try:
        conn.request("GET", target, headers=dict(headers or {}))
        response = conn.getresponse()
        body = response.read(max_bytes + 1)
        if expired.is_set():
            raise GetError(f"timed out: no whole answer within {timeout_s:g} s")
        if len(body) > max_bytes:
            raise GetError(f"answer larger than {max_bytes} bytes")
        return GetAnswer(
            status=response.status,
            reason=response.reason,
            body=body,
            content_type=response.getheader("Content-Type"),
            location=response.getheader("Location"),
        )
    except GetError:
        raise
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if expired.is_set() or time.monotonic() - started >= timeout_s:
            raise GetError(f"timed out: no whole answer within {timeout_s:g} s") from None
        text = str(exc).strip() or type(exc).__name__
        raise GetError(f"{type(exc).__name__}: {text}") from None
    finally:
        timer.cancel()
        conn.close()
