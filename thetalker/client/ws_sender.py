"""The agent mode's sender: one session per request, on the socket of the server's kind
(vllm-omni's `/v1/audio/speech/stream` in thetalker.client.websocket, Nari's
`nari.speech.v1` in thetalker.client.nari_socket). Apart from both, so neither socket's
module imports the other."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import aiohttp

from thetalker.backends import ServerApi
from thetalker.client.context import RecordSink
from thetalker.client.exchange import WsExchange
from thetalker.client.nari_socket import run_nari_session
from thetalker.client.options import BenchOptions
from thetalker.client.schedule import Item
from thetalker.client.sender import InFlight
from thetalker.client.websocket import TextPlan, run_session, stream_url

__all__ = ["SessionRunner", "session_runner", "WsSender"]


SessionRunner = Callable[
    [
        aiohttp.ClientSession,
        str,
        dict[str, Any],
        Sequence[str],
        Sequence[float],
        float,
        WsExchange,
        Callable[[], None] | None,  # on_open: called when the handshake is done
    ],
    Awaitable[None],
]


def session_runner(protocol: str) -> SessionRunner:
    """The client side of an agent protocol (thetalker.backends.AgentProtocol.name)."""
    if protocol == "vllm-omni.stream":
        return run_session
    if protocol == "nari.speech.v1":
        return run_nari_session
    raise ValueError(f"no client for the agent protocol {protocol!r}")


class WsSender(InFlight):
    """`await sender(item, scheduled)` runs one session; the same interface as the HTTP
    path's `Sender`, so both schedules (closed and open loop) and the workers use it."""

    _exchange_type = WsExchange

    def __init__(
        self,
        session: aiohttp.ClientSession,
        opts: BenchOptions,
        ref_uri: str | None,
        sink: RecordSink,
        api: ServerApi,
        on_done: Callable[[Any], None] | None = None,
        plan: TextPlan | None = None,
    ) -> None:
        agent = api.agent
        if agent is None:
            raise ValueError(f"server {opts.server} has no agent-mode socket")
        self._session = session
        self._url = stream_url(opts.base_url, agent.path)
        self._config = agent.start(opts, ref_uri)
        self._per_request = agent.per_request
        self._opts = opts
        self._run = session_runner(agent.name)
        self._timeout_s = opts.timeout_s
        self._plan = plan or TextPlan.for_run(opts)
        super().__init__(sink, on_done)

    async def __call__(self, item: Item, scheduled: float | None) -> None:
        index, prompt, warmup = item
        ex = WsExchange(index, prompt, warmup, scheduled)
        pieces, offsets = self._plan.pieces(prompt.text, index)
        config = self._config
        if self._per_request is not None:  # e.g. Nari's seed: no two requests alike
            config = {**config, **self._per_request(self._opts, index)}
        on_open = partial(self._on_wire, ex)  # in flight from the handshake's end
        session = self._run(
            self._session, self._url, config, pieces, offsets, self._timeout_s, ex, on_open
        )
        await self._track(ex, session, "session")
