"""The servers TheTalker measures, one module per kind, and the registry that names them.

`get(name)` is the `Backend` (thetalker.backends.base) of a server kind; `names()` lists
them. Everything that differs between servers (how each is started and found ready, the
body it accepts, its stream framing, agent socket, sample rate, error meanings, metrics)
lives in its module; the client (thetalker.client), the lifecycle (thetalker.lifecycle.launch)
and the workflow (thetalker.pipeline) ask this registry and never test a server's name.
"""

from __future__ import annotations

import importlib

from thetalker.backends import base
from thetalker.backends.base import *  # noqa: F403 (what a server kind is, re-exported)
from thetalker.backends.base import Backend

__all__ = [
    *base.__all__,
    "UnknownBackendError",
    "DEFAULT",
    "get",
    "names",
]

DEFAULT = "vllm-omni"
# name -> module (imported on first use: a kind's module may be heavier than the others').
_MODULES = {
    "vllm-omni": "thetalker.backends.vllm_omni",
    "local": "thetalker.backends.local",
    "nari": "thetalker.backends.nari",
    "external": "thetalker.backends.external",
    "command": "thetalker.backends.command",
    "sglang-omni": "thetalker.backends.sglang_omni",
}


class UnknownBackendError(ValueError):
    """A server kind no module describes; the message lists the known ones."""


def names(speaking: bool | None = None) -> tuple[str, ...]:
    """Every known server kind, in registry order; `speaking=True`: only the kinds whose
    API the client can speak (not the launchers that front another kind)."""
    if speaking is None:
        return tuple(_MODULES)
    return tuple(n for n in _MODULES if get(n).speaks == speaking)


def get(name: str) -> Backend:
    """The description of server kind `name`."""
    module = _MODULES.get(name)
    if module is None:
        raise UnknownBackendError(f"unknown server {name!r} (known: {', '.join(_MODULES)})")
    backend: Backend = importlib.import_module(module).BACKEND
    return backend
