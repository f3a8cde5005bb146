"""The client's API key: read from an environment variable, sent as ``Authorization: Bearer``.

A vllm-omni started with ``--api-key`` (or ``VLLM_API_KEY``) refuses ``/v1/*`` without the
key. The key is never an argument or a config value (both are recorded): the client reads it
from the variable named by ``--api-key-env NAME``, or by default from the first of
``THETALKER_API_KEY``, ``VLLM_API_KEY`` (the one the server reads, so one ``export`` serves
both sides of a local run) and ``OPENAI_API_KEY`` that is set. Only the variable's name is
recorded.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["DEFAULT_API_KEY_ENVS", "ApiKeyError", "api_key_from_env", "auth_headers"]

DEFAULT_API_KEY_ENVS = ("THETALKER_API_KEY", "VLLM_API_KEY", "OPENAI_API_KEY")


class ApiKeyError(ValueError):
    """A named variable that is not set or empty; one line."""


def api_key_from_env(
    name: str | None = None, environ: Mapping[str, str] | None = None
) -> tuple[str | None, str | None]:
    """``(variable name, key)``: the named variable (which must be set and not empty), or the
    first default that is set; ``(None, None)`` when there is no key."""
    env = os.environ if environ is None else environ
    if name:
        value = env.get(name, "")
        if not value:
            raise ApiKeyError(f"--api-key-env: variable {name} is not set or is empty")
        return name, value
    for default in DEFAULT_API_KEY_ENVS:
        if env.get(default):
            return default, env[default]
    return None, None


def auth_headers(
    name: str | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``{"Authorization": "Bearer KEY"}``, or ``{}`` when there is no key."""
    _, key = api_key_from_env(name, environ)
    return {"Authorization": f"Bearer {key}"} if key else {}
