"""The embedded server (`python -m thetalker.server`, Piper on the CPU): TheTalker's own
implementation of the speech API vllm-omni serves, so it takes the same body, streams, agent
socket and voice upload (local voices only; it cannot clone), with its own `/metrics`. It
serves one model (`piper-joe`) and reads its deploy file with its own checks."""

from __future__ import annotations

import dataclasses
import sys

from thetalker.backends import vllm_omni
from thetalker.backends.base import Launch, Launcher, optional_flags
from thetalker.backends.inputs import LaunchSpec

__all__ = ["API", "LAUNCHER", "SERVED_MODEL"]

# The one model name it serves (thetalker.server.contract.SERVED_MODEL_NAME; this package cannot
# import the server's, which sits above it: tests/unit/test_backends.py pins them equal).
SERVED_MODEL = "piper-joe"


def command(spec: LaunchSpec, port: int) -> list[str]:
    cmd = [sys.executable, "-m", "thetalker.server", "--host", spec.host, "--port", str(port)]
    return cmd + optional_flags(
        ("--deploy-config", spec.deploy_config), ("--voices-dir", spec.voices_dir)
    )


API = dataclasses.replace(
    vllm_omni.API,
    name="local",
    summary="the embedded server's: vllm-omni's speech API, no cloning",
    clones_voices=False,
)
LAUNCHER = Launcher(
    name="local",
    summary="the embedded Piper server (python -m thetalker.server), same speech API",
    launch=Launch(
        command=command,
        env_defaults={"PYTHONUNBUFFERED": "1"},  # log lines reach the file as they happen
        probe_python="self",
        deploy_files=True,
        mps=True,  # as the workflow always passed a model's `mps` on (a CPU server ignores it)
    ),
    api=API.name,
    ready_path="/health",
    metrics_path="/metrics",
    served_models=(SERVED_MODEL,),
    deploy_check="thetalker.server.settings:load_deploy_config",
)
