"""One record from one finished exchange, HTTP or WebSocket: the one entry the sinks call."""

from __future__ import annotations

from thetalker.client.context import RunContext
from thetalker.client.exchange import Exchange, WsExchange
from thetalker.client.http_record import build_http_record
from thetalker.client.ws_record import build_ws_record
from thetalker.data.records import Record

__all__ = ["build_record"]


def build_record(ctx: RunContext, ex: Exchange | WsExchange) -> Record:
    """Decode the exchange, type its failure, derive its figures, save its audio."""
    if isinstance(ex, WsExchange):  # the agent mode's session
        return build_ws_record(ctx, ex)
    return build_http_record(ctx, ex)
