"""The GPU side of a launch: nvidia-smi's compute processes (the empty-GPU check) and the NVIDIA
MPS daemon a server may run inside (its pipe and log folders private to the job)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from thetalker.lifecycle import leftover as _leftover
from thetalker.lifecycle.processes import log_tail

__all__ = [
    "GpuBusyError",
    "MpsStartError",
    "gpu_compute_pids",
    "gpu_is_empty",
    "check_gpu_empty",
    "MpsDaemon",
    "start_mps",
    "stop_mps",
]


class GpuBusyError(RuntimeError):
    """The GPU a measured run needs is in use (the message names the holders)."""


class MpsStartError(RuntimeError):
    """The MPS daemon could not be started; `log_tail` is its control log's end."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


def gpu_compute_pids() -> list[int] | None:
    """PIDs of compute processes on the GPUs, or None when ``nvidia-smi`` is not installed."""
    program = shutil.which("nvidia-smi")
    if program is None:
        return None
    result = subprocess.run(
        [program, "--query-compute-apps=pid", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"nvidia-smi failed ({result.returncode}): {result.stderr.strip()}")
    return [int(line) for line in result.stdout.split() if line.strip().isdigit()]


def gpu_is_empty() -> bool | None:
    """True when no process computes on a GPU; None when ``nvidia-smi`` is not installed."""
    pids = gpu_compute_pids()
    return None if pids is None else not pids


def check_gpu_empty() -> None:
    try:
        pids = gpu_compute_pids()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        print(
            f"thetalker.lifecycle.launch: warning: GPU check skipped: {exc}",
            file=sys.stderr,
            flush=True,
        )
        return
    if pids:
        holders = ", ".join(_leftover.describe_pid(p) for p in pids)
        raise GpuBusyError(f"the GPU is in use by {holders}; a measured run needs it empty")


@dataclass
class MpsDaemon:
    env: dict[str, str]  # CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY
    program: str
    pipe_dir: Path


def start_mps(mps_control: str, log_dir: Path, base_env: dict[str, str]) -> MpsDaemon:
    program = shutil.which(mps_control, path=base_env.get("PATH"))
    if program is None:
        raise MpsStartError(f"MPS requested but {mps_control!r} is not on PATH")
    # The pipe folder holds a unix socket (path length limit ~108): keep it short, in /tmp.
    pipe_dir = Path(tempfile.mkdtemp(prefix="thetalker-mps-pipe-"))
    mps_log = Path(tempfile.mkdtemp(prefix="mps-log-", dir=log_dir))
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(pipe_dir), "CUDA_MPS_LOG_DIRECTORY": str(mps_log)}
    # Output to a file, never a pipe: the daemon keeps inherited descriptors open.
    with open(mps_log / "control-start.log", "wb") as out:
        code = subprocess.call(
            [program, "-d"],
            env={**base_env, **env},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=60,
        )
    if code != 0:
        shutil.rmtree(pipe_dir, ignore_errors=True)
        raise MpsStartError(
            f"{program} -d exited with code {code}", log_tail(mps_log / "control-start.log")
        )
    return MpsDaemon(env=env, program=program, pipe_dir=pipe_dir)


def stop_mps(daemon: MpsDaemon, base_env: dict[str, str]) -> None:
    try:
        subprocess.run(
            [daemon.program],
            input=b"quit\n",
            env={**base_env, **daemon.env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
    finally:
        shutil.rmtree(daemon.pipe_dir, ignore_errors=True)
