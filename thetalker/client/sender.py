"""Sending one request: the run's HTTP session and the `send` every schedule calls.

The in-process run and each worker process open one session (`open_session`) and one
`Sender`; the sender encodes the body, runs the receive loop, and hands the exchange to the
run's record sink, also when the run is cancelled mid-request (recorded as `cancelled`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import aiohttp

from thetalker.api.auth import auth_headers
from thetalker.api.speech import speech_url
from thetalker.backends import ServerApi
from thetalker.client.body import BodyEncoder
from thetalker.client.context import RecordSink
from thetalker.client.exchange import Exchange
from thetalker.client.options import BenchOptions
from thetalker.client.receive import StampingConnector, receive_response
from thetalker.client.schedule import Item
from thetalker.util.no_redirect import refuse_redirects

__all__ = ["open_session", "InFlight", "Sender"]


def open_session(opts: BenchOptions, streams: int) -> aiohttp.ClientSession:
    """Keep-alive, its pool sized to the streams; a timeout per request, not per session."""
    # Open loop sends on schedule: a pool limit would queue requests and hide the lag.
    limit = 0 if opts.request_rate is not None else streams
    return aiohttp.ClientSession(
        headers=auth_headers(opts.api_key_env),  # Authorization: Bearer, when a key is set
        connector=StampingConnector(limit=limit),  # stamps connection setup per request
        timeout=aiohttp.ClientTimeout(total=None),  # per request, by asyncio.timeout
        trace_configs=[refuse_redirects()],  # the WebSocket handshake follows none either
    )


class InFlight:
    """The streams in flight (and their peak) around each exchange a sender runs; every
    exchange reaches the sink, a cancelled one marked `cancelled`. Shared by the HTTP and the
    WebSocket senders.

    A request counts as in flight while it is on the wire: from its body's first byte
    written (HTTP) or its handshake done (WebSocket) to the end of its exchange. A request
    still waiting for the connection pool, or for a connection being opened, is not (issue
    25: counted before the pool handed one out, a pool of 2 read as 8 in flight)."""

    _exchange_type: Callable[..., Any]  # (request_index, prompt, warmup, scheduled) -> exchange

    def __init__(self, sink: RecordSink, on_done: Callable[[Any], None] | None) -> None:
        self._sink = sink  # every exchange reaches it, finished or cancelled
        self._on_done = on_done
        self.in_flight = 0
        self.max_in_flight = 0

    def _on_wire(self, ex: Any) -> None:
        """`ex` is on the wire now; called once per exchange from the send path."""
        ex.on_wire = True
        self.in_flight += 1
        if self.in_flight > self.max_in_flight:
            self.max_in_flight = self.in_flight

    def drop(self, item: Item, scheduled: float) -> None:
        """An open-loop arrival dropped at the cap on requests in flight: recorded (error
        `dropped`, sent at its due time, no response), never sent."""
        index, prompt, warmup = item
        ex = self._exchange_type(index, prompt, warmup, scheduled)
        ex.t_send = scheduled
        ex.failure = ("dropped", f"{self.in_flight} requests in flight at its arrival")
        self._sink.put(ex)
        if self._on_done is not None:
            self._on_done(ex)

    async def _track(self, ex: Any, exchange: Awaitable[None], what: str) -> None:
        try:
            await exchange
        except asyncio.CancelledError:
            ex.failure = ("cancelled", f"the run stopped before this {what} finished")
            self._done(ex)
            self._sink.put(ex)
            raise
        self._done(ex)
        self._sink.put(ex)
        if self._on_done is not None:
            self._on_done(ex)

    def _done(self, ex: Any) -> None:
        trace = getattr(ex, "trace", None)
        if trace is not None:  # the exchange crosses to the writer: no callable with it
            trace.pop("on_wire", None)
        if ex.on_wire:
            self.in_flight -= 1
            ex.on_wire = False


class Sender(InFlight):
    """`await sender(item, scheduled)` sends one request; counts what is in flight."""

    _exchange_type = Exchange

    def __init__(
        self,
        session: aiohttp.ClientSession,
        opts: BenchOptions,
        encoder: BodyEncoder,
        sink: RecordSink,
        api: ServerApi,
        on_done: Callable[[Exchange], None] | None = None,
    ) -> None:
        self._session = session
        self._url = speech_url(opts.base_url)
        self._timeout_s = opts.timeout_s
        self._sse = opts.stream_format == "sse"
        self._rate_header = api.sample_rate_header
        self._encoder = encoder
        super().__init__(sink, on_done)

    async def __call__(self, item: Item, scheduled: float | None) -> None:
        index, prompt, warmup = item
        ex = Exchange(index, prompt, warmup, scheduled)
        ex.trace["on_wire"] = partial(self._on_wire, ex)
        body = self._encoder.encode(prompt.text, index)
        receive = receive_response(
            self._session, self._url, body, self._timeout_s, self._sse, ex, self._rate_header
        )
        await self._track(ex, receive, "request")
