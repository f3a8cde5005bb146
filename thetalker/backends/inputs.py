"""What a backend reads of the layers above it: a load point's options and a server's spec.

A server kind's callables take the client's options (`thetalker.client.options.BenchOptions`)
to build a request, and the lifecycle's spec (`thetalker.lifecycle.launch.ServerSpec`) to
build a command line. Both packages sit above this one and import it, so the backends name
what they read as protocols here, not the classes there: no import, not even one for the type
checker, runs upward, and a reader following imports meets no circle
(tests/unit/test_layering.py). Each field reads as the class above defines it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = ["DEFAULT_EXECUTABLE", "LaunchSpec", "RequestOptions"]

# A spec's program unless the system names another: vllm-omni's (found on PATH).
DEFAULT_EXECUTABLE = "vllm-omni"


@runtime_checkable
class RequestOptions(Protocol):
    """What a request body or an agent socket's start message reads of one load point."""

    @property
    def model(self) -> str | None: ...
    @property
    def task_type(self) -> str: ...
    @property
    def speaker(self) -> str | None: ...
    @property
    def voice(self) -> str | None: ...
    @property
    def ref_text(self) -> str | None: ...
    @property
    def instructions(self) -> str | None: ...
    @property
    def language(self) -> str | None: ...
    @property
    def max_new_tokens(self) -> int | None: ...
    @property
    def stream_format(self) -> str: ...
    @property
    def response_format(self) -> str: ...
    @property
    def seed(self) -> int: ...
    @property
    def register_voice(self) -> str | None: ...
    @property
    def split_granularity(self) -> str: ...


@runtime_checkable
class LaunchSpec(Protocol):
    """What a launcher's command line and environment read of what is served."""

    @property
    def model_id(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def deploy_config(self) -> str | Path | None: ...
    @property
    def voices_dir(self) -> str | Path | None: ...
    @property
    def executable(self) -> str: ...
    @property
    def serving_env(self) -> str | Path | None: ...
    @property
    def profile(self) -> str | None: ...
    @property
    def command(self) -> str | None: ...
