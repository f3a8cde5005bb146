"""The embedded server (`python -m thetalker.server`, Piper on the CPU): TheTalker's own
implementation of the speech API vllm-omni serves, so it takes the same body, streams, agent
socket and voice upload (local voices only; it cannot clone), with its own `/metrics`."""

from __future__ import annotations

import sys
from typing import Any

from thetalker.backends import vllm_omni
from thetalker.backends.base import Backend, Launch, optional_flags

__all__ = ["BACKEND"]


def command(spec: Any, port: int) -> list[str]:
    cmd = [sys.executable, "-m", "thetalker.server", "--host", spec.host, "--port", str(port)]
    return cmd + optional_flags(
        ("--deploy-config", spec.deploy_config), ("--voices-dir", spec.voices_dir)
    )


BACKEND = Backend(
    name="local",
    summary="the embedded Piper server (python -m thetalker.server), same speech API",
    launch=Launch(
        command=command,
        env_defaults={"PYTHONUNBUFFERED": "1"},  # log lines reach the file as they happen
        probe_python="self",
        deploy_files=True,
        mps=True,  # as the workflow always passed a model's `mps` on (a CPU server ignores it)
    ),
    body=vllm_omni.DIALECT,
    ready_path="/health",
    stream_formats=("audio", "sse"),
    agent=vllm_omni.AGENT,
    metrics_path="/metrics",
    voice_upload=True,
)
