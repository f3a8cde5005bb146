"""`launcher: external`: a server someone else runs, measured at its URL.

Nothing is started or stopped: the system's `base_url` is the server, its API key comes
from the environment variable the system names (`api_key_env`, sent as `Authorization:
Bearer`; the value is never written anywhere), and the API it speaks is the system's
`server` (default vllm-omni's speech API, which OpenAI-compatible TTS endpoints share).
Nothing to wait for: a server that does not answer fails the first request (the sample-rate
probe). Provenance records the URL without credentials (the workflow refuses a URL with
user info or a query) and what `/v1/models` answers, asked with the same key.
"""

from __future__ import annotations

from thetalker.backends import vllm_omni
from thetalker.backends.base import Launch, Launcher

__all__ = ["LAUNCHER"]

LAUNCHER = Launcher(
    name="external",
    summary="a running server at the system's base_url (nothing started or stopped)",
    launch=Launch(command=None),
    api=vllm_omni.API.name,  # unless the system's `server` names another
    any_api=True,
    ready_path=None,
    system_keys={"base_url": True},
)
