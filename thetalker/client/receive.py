"""The receive loop: send one request, stamp every piece of its body.

Everything done between two chunk reads delays the next timestamp, and
`benchmarks/client_fidelity.py` measures this exact code. Per piece (a read: the records keep
each one, `read_arrival_s`) it stamps `time.perf_counter()` once and appends to three lists;
all decoding happens later (`thetalker.client.decode`, `thetalker.client.record`). The
request's own stamps (connection held, body sent) come from its body and the pool
(`StampedBody`, `StampingConnector`), off this loop.
`receive_response` is this package's seam to it; what it fills is an `Exchange`
(thetalker.client.exchange).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

from thetalker.client.exchange import ERROR_BODY_LIMIT, Exchange, describe, is_stream_type
from thetalker.client.handoff import note_read
from thetalker.util.no_redirect import redirect_answer

__all__ = [
    "MAX_RESPONSE_BYTES",
    "MAX_RESPONSE_READS",
    "ResponseTooLarge",
    "StampedBody",
    "StampingConnector",
    "read_at_most",
    "receive_response",
    "too_large",
    "too_many",
]

# The most one response may bring (its audio, or a probe's): past it the request fails
# (`too_large`) and the rest is not read. Without it a server streaming without end fills
# memory at the network's pace until the timeout (5.2 GB in 3 s on loopback). The agent
# socket's frame bound is the same figure (thetalker.client.websocket.MAX_FRAME_BYTES);
# 64 MiB is ~23 minutes of 24 kHz 16-bit audio.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
# And the most reads (non-empty pieces) it may bring: each costs ~150 bytes of lists here and
# ~50 characters of its record, whatever its size, so 1-byte chunks under the byte bound
# cost 716 MB of memory and a 161 MB records line for 4 MB of audio. Past it: `too_large`,
# the rest not read. 100,000 reads is ~17 minutes of audio in 10 ms pieces; an SSE stream's
# audio events are bounded alike (thetalker.client.decode).
MAX_RESPONSE_READS = 100_000


async def receive_response(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    timeout_s: float,
    sse: bool,
    ex: Exchange,
    rate_header: str | None = None,
) -> None:
    """Send one request and collect its body; never raises except CancelledError.
    `rate_header` names the response header stating the sample rate (sglang-omni's
    `X-Sample-Rate`), kept in `ex.rate_header`."""
    times, pieces, ends = ex.times, ex.pieces, ex.ends
    room = MAX_RESPONSE_BYTES  # bytes this response may still bring
    reads_left = MAX_RESPONSE_READS
    ex.t_send = time.perf_counter()
    try:
        async with (
            asyncio.timeout(timeout_s),
            # Never redirected: the request carries the API key (thetalker.util.http_get).
            session.post(url, data=StampedBody(body, ex.trace), allow_redirects=False) as resp,
        ):
            ex.status = resp.status
            ex.content_type = resp.content_type
            if rate_header is not None:
                ex.rate_header = resp.headers.get(rate_header)
            note = redirect_answer(resp, url)
            if note is not None:
                ex.failure = ("http_status", note)
                return
            if resp.status >= 400 or not is_stream_type(resp.content_type, sse):
                ex.error_body = await resp.content.read(ERROR_BODY_LIMIT)
                return
            # The hot loop: one clock read, three appends, the read noted and counted, its
            # size counted.
            async for data, end_of_chunk in resp.content.iter_chunks():
                if data:
                    t = time.perf_counter()
                    if not reads_left:
                        ex.failure = ("too_large", too_many(MAX_RESPONSE_READS, "reads"))
                        resp.close()  # the connection goes: the rest is never read
                        return
                    reads_left -= 1
                    times.append(t)
                    pieces.append(data)
                    ends.append(end_of_chunk)
                    note_read(t)  # the record hand-off waits for a quiet moment
                    room -= len(data)
                    if room < 0:
                        ex.failure = ("too_large", too_large(MAX_RESPONSE_BYTES))
                        resp.close()
                        return
                elif end_of_chunk and ends:
                    ends[-1] = True
    except TimeoutError:
        ex.failure = ("timeout", f"no complete response within {timeout_s:g} s")
    except aiohttp.ClientPayloadError as exc:
        ex.failure = ("truncated", f"body cut short: {describe(exc)}")
    except (aiohttp.ClientError, OSError) as exc:
        kind = "connection" if ex.status is None else "truncated"
        ex.failure = (kind, describe(exc))
    finally:
        ex.t_end = time.perf_counter()


def too_large(limit: int) -> str:
    """The message of a response cut at `limit` bytes."""
    return f"the response passed {limit} bytes ({limit / 2**20:.3g} MiB); the rest was not read"


def too_many(limit: int, what: str, whole: str = "response") -> str:
    """The message of a response (or session) cut at `limit` reads, events or messages."""
    return f"the {whole} passed {limit} {what}; the rest was not read"


class ResponseTooLarge(Exception):
    """A body past `MAX_RESPONSE_BYTES`; the message is `too_large`'s."""


async def read_at_most(resp: aiohttp.ClientResponse) -> bytes:
    """A whole response body, or ResponseTooLarge past `MAX_RESPONSE_BYTES` (the connection
    closed, the rest not read)."""
    parts: list[bytes] = []
    limit = room = MAX_RESPONSE_BYTES
    async for data in resp.content.iter_any():
        room -= len(data)
        if room < 0:
            resp.close()
            raise ResponseTooLarge(too_large(limit))
        parts.append(data)
    return b"".join(parts)


class StampedBody(aiohttp.BytesPayload):
    """A request's JSON body that stamps `sent` in its exchange's `trace` when aiohttp
    starts writing it (the request leaves: its headers go out with the body) and then calls
    the trace's `on_wire` (the sender's in-flight count), once.

    Stamped here and in `StampingConnector` rather than by an `aiohttp.TraceConfig`: a trace
    config makes aiohttp build and await about a dozen signals per request, ~70 us of the
    loop thread's ~400 (benchmarks/README.md), all of it at the moments a wave of requests
    starts and its first chunks must be stamped."""

    def __init__(self, body: bytes, trace: dict[str, Any]) -> None:
        super().__init__(body, content_type="application/json")
        self.trace = trace

    def _stamp(self) -> None:
        trace = self.trace
        if "sent" not in trace:
            trace["sent"] = time.perf_counter()
            on_wire = trace.get("on_wire")
            if on_wire is not None:
                on_wire()

    async def write(self, writer: Any) -> None:  # aiohttp before 3.12
        self._stamp()
        await super().write(writer)

    async def write_with_length(self, writer: Any, content_length: int | None) -> None:
        self._stamp()
        await super().write_with_length(writer, content_length)


def _trace_of(req: Any) -> dict[str, Any] | None:
    return getattr(getattr(req, "body", None), "trace", None)


class StampingConnector(aiohttp.TCPConnector):
    """The run's connection pool; per request whose body is a `StampedBody` it stamps
    `connect_start`/`connect_end` around opening a new connection, `reused` for a kept-alive
    one, and `conn` when the request holds a connection (after any wait for the pool)."""

    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
        conn = await super().connect(req, traces, timeout)
        trace = _trace_of(req)
        if trace is not None:
            trace["conn"] = time.perf_counter()
            if "connect_start" not in trace:
                trace["reused"] = True
        return conn

    async def _create_connection(self, req: Any, traces: Any, timeout: Any) -> Any:
        trace = _trace_of(req)
        if trace is not None:
            trace["connect_start"] = time.perf_counter()
        proto = await super()._create_connection(req, traces, timeout)
        if trace is not None:
            trace["connect_end"] = time.perf_counter()
        return proto
