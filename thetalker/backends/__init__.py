"""The servers TheTalker measures, on two axes, and the registry that names them.

A system names a launcher (`launcher(name)`: how its server is started and found ready) and,
where that launcher fronts any server (external, command), the API it speaks (`api(name)`:
body, streams, agent socket, errors, sample rate); the API defaults to the launcher's own
(`Launcher.api`: vllm-omni's for external and command). One module per server holds what
differs; the client (thetalker.client), the lifecycle (thetalker.lifecycle.launch) and the
workflow (thetalker.pipeline) ask this registry and never test a server's name.
"""

from __future__ import annotations

import importlib

from thetalker.backends import base
from thetalker.backends.base import *  # noqa: F403 (what a launcher and an API are, re-exported)
from thetalker.backends.base import Launcher, ServerApi

__all__ = [
    *base.__all__,
    "UnknownBackendError",
    "DEFAULT_API",
    "api",
    "api_names",
    "launcher",
    "launcher_names",
]

DEFAULT_API = "vllm-omni"
# name -> module (imported on first use: a server's module may be heavier than the others').
# A module holds `API` (a ServerApi), `LAUNCHER` (a Launcher), or both.
_LAUNCHERS = {
    "vllm-omni": "thetalker.backends.vllm_omni",
    "local": "thetalker.backends.local",
    "nari": "thetalker.backends.nari",
    "external": "thetalker.backends.external",
    "command": "thetalker.backends.command",
    "sglang-omni": "thetalker.backends.sglang_omni",
}
_APIS = {
    "vllm-omni": "thetalker.backends.vllm_omni",
    "local": "thetalker.backends.local",
    "nari": "thetalker.backends.nari",
    "sglang-omni": "thetalker.backends.sglang_omni",
}


class UnknownBackendError(ValueError):
    """A launcher or an API no module describes; the message lists the known ones."""


def launcher_names() -> tuple[str, ...]:
    """Every launcher, in registry order."""
    return tuple(_LAUNCHERS)


def api_names() -> tuple[str, ...]:
    """Every API the client speaks, in registry order."""
    return tuple(_APIS)


def launcher(name: str) -> Launcher:
    """How a server of launcher `name` is started and found ready."""
    module = _LAUNCHERS.get(name)
    if module is None:
        raise UnknownBackendError(f"unknown launcher {name!r} (known: {', '.join(_LAUNCHERS)})")
    found: Launcher = importlib.import_module(module).LAUNCHER
    return found


def api(name: str) -> ServerApi:
    """The API `name` (what the client speaks to the server)."""
    module = _APIS.get(name)
    if module is None:
        what = ": a launcher, not an API" if name in _LAUNCHERS else ""
        raise UnknownBackendError(f"unknown server {name!r}{what} (known: {', '.join(_APIS)})")
    found: ServerApi = importlib.import_module(module).API
    return found
