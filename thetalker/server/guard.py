"""What keeps one client from holding the server: timeouts, the API key, quiet bad requests.

- `ServerLimits`: how long a connection may sit idle or send half a request (`idle_timeout_s`:
  headers not complete by then, or nothing sent after a response), read its body
  (`body_timeout_s`), or leave a write unread (`write_timeout_s`). aiohttp has no header
  timeout, so `guard_connections` sweeps the server's connections once a second and closes the
  ones idle too long; body and write timeouts are applied where the handlers read and write.
- `shed_load_middleware`: the first `connection_cap` connections served, each later one a
  logged 503 and a close instead of a server that runs out of descriptors and falls silent.
- `api_key_middleware`: with a key set, `/v1/*` answers 401 without `Authorization: Bearer
  <key>`; `/health` and the rest stay open (as vllm's `--api-key`).
- `quiet_bad_requests`: a malformed request (bad HTTP, a client gone) logs one warning line,
  not a traceback.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

log = logging.getLogger("thetalker.server")

__all__ = [
    "ServerLimits",
    "FD_RESERVE",
    "connection_cap",
    "shed_load_middleware",
    "API_KEY_ENV",
    "api_key_middleware",
    "guard_connections",
    "quiet_bad_requests",
]

# Read in this order when --api-key is not given; VLLM_API_KEY is what vllm itself reads.
API_KEY_ENV = ("THETALKER_API_KEY", "VLLM_API_KEY")


@dataclass(frozen=True)
class ServerLimits:
    """Per-connection time limits, seconds, and how many connections the server holds."""

    idle_timeout_s: float = 15.0
    body_timeout_s: float = 30.0
    write_timeout_s: float = 30.0
    # A WebSocket utterance (its first input.text to its input.done) must end by then: a
    # trickle of one character now and then keeps a session active, not alive forever.
    utterance_timeout_s: float = 120.0
    # Open connections beyond this get a logged 503 (None: the descriptor limit less a reserve,
    # so /health and the log still have descriptors when clients hold the rest).
    max_connections: int | None = None


FD_RESERVE = 32  # descriptors kept for /health, the log, the engine's files


def connection_cap(limits: ServerLimits) -> int:
    """The most connections served at once: `max_connections`, else RLIMIT_NOFILE less a
    reserve (a quarter of it when the limit is small)."""
    if limits.max_connections is not None:
        return limits.max_connections
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    return max(1, soft - max(FD_RESERVE, soft // 4))


def shed_load_middleware(cap: int) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Serve at most `cap` connections, admitted in the order their first request came; a
    request on any other answers 503 and closes (WebSocket upgrades included), logged at
    most once in 10 s with the count shed; /health is always answered.

    Admitted in order, not judged by the count open: a burst of more than `cap` connections
    opened at once would otherwise find every request over the cap and be refused whole."""
    shed = {"n": 0, "logged_at": -1e9}
    served: set[Any] = set()  # the admitted connections (aiohttp's protocol objects)

    @web.middleware
    async def shed_load(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        conn = request.protocol
        if conn in served or request.path == "/health":
            return await handler(request)
        manager = getattr(conn, "_manager", None)  # aiohttp's web.Server
        open_conns = getattr(manager, "connections", ())
        if len(served) >= cap:  # the admitted ones that closed make room
            still_open = set(open_conns)
            served.intersection_update(still_open)
        if len(served) < cap:
            served.add(conn)
            return await handler(request)
        open_now = len(open_conns)
        shed["n"] += 1
        now = time.monotonic()
        if now - shed["logged_at"] >= 10.0:
            log.warning(
                "shedding load: %d connections open, more than %d; answered 503 (%d shed so far)",
                open_now,
                cap,
                shed["n"],
            )
            shed["logged_at"] = now
        body = {"error": {"message": "server at its connection limit", "code": 503}}
        return web.json_response(body, status=503, headers={"Connection": "close"})

    return shed_load


def api_key_middleware(key: str) -> Callable[..., Awaitable[web.StreamResponse]]:
    expected = f"Bearer {key}".encode()

    @web.middleware
    async def check_key(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path.startswith("/v1/"):
            given = request.headers.get("Authorization", "").encode("utf-8", "replace")
            if not hmac.compare_digest(given, expected):
                return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    return check_key


async def guard_connections(server: Any, limits: ServerLimits, period_s: float = 0.5) -> None:
    """Close connections with no request in progress for longer than `idle_timeout_s`.

    Runs until cancelled. `server` is the aiohttp `web.Server` (`AppRunner.server`).
    """
    idle_since: dict[Any, tuple[int, float]] = {}
    while True:
        await asyncio.sleep(period_s)
        now = time.monotonic()
        seen = set()
        for handler in server.connections:
            seen.add(handler)
            if getattr(handler, "_request_in_progress", False):
                idle_since.pop(handler, None)
                continue
            # A connection serving short requests back to back is rarely caught mid-request:
            # its request count moving on counts as activity too.
            count = int(getattr(handler, "_request_count", 0))
            last_count, since = idle_since.get(handler, (count, now))
            if count != last_count:
                since = now
            idle_since[handler] = (count, since)
            if now - since > limits.idle_timeout_s:
                handler.force_close()
                idle_since.pop(handler, None)
        for gone in set(idle_since) - seen:
            idle_since.pop(gone, None)


def _client_fault(exc: BaseException | None) -> bool:
    """Bad HTTP, a body that cannot be decoded, a client gone: the client's fault."""
    from aiohttp import http_exceptions
    from aiohttp.web_protocol import RequestPayloadError

    return isinstance(
        exc, (http_exceptions.HttpProcessingError, RequestPayloadError, ConnectionError)
    )


class _OneLine(logging.Filter):
    """Turns aiohttp's traceback for a malformed request into one warning line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and _client_fault(record.exc_info[1]):
            exc = record.exc_info[1]
            text = record.getMessage()
            record.msg = "%s (%s: %s)"
            record.args = (text, type(exc).__name__, " ".join(str(exc).split())[:200])
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def quiet_bad_requests() -> None:
    """Install the one-line filter on aiohttp's server logger (idempotent)."""
    logger = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _OneLine) for f in logger.filters):
        logger.addFilter(_OneLine())
