"""The GPU side of a launch: nvidia-smi's compute processes (the empty-GPU check) and the NVIDIA
MPS daemon a server may run inside (its pipe and log folders private to the job)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thetalker.lifecycle import leftover as _leftover
from thetalker.lifecycle.processes import log_tail

__all__ = [
    "Gpu",
    "node_gpus",
    "visible_gpus",
    "compute_apps",
    "GpuBusyError",
    "MpsStartError",
    "gpu_compute_pids",
    "gpu_is_empty",
    "check_gpu_empty",
    "MpsDaemon",
    "start_mps",
    "stop_mps",
    "stop_leftover_mps",
]

MPS_RECORD_SCHEMA = "thetalker.mps-record/1"


class GpuBusyError(RuntimeError):
    """The GPU a measured run needs is in use (the message names the holders)."""


class MpsStartError(RuntimeError):
    """The MPS daemon could not be started; `log_tail` is its control log's end."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


@dataclass(frozen=True)
class Gpu:
    """One GPU as nvidia-smi lists it: `index` (its order, PCI bus order), `uuid`, and what
    provenance records of it."""

    index: str
    uuid: str
    name: str | None = None
    driver_version: str | None = None
    memory_total_mib: float | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _nvidia_smi(args: list[str]) -> str | None:
    """nvidia-smi's stdout, None when it is not installed; RuntimeError when it fails."""
    program = shutil.which("nvidia-smi")
    if program is None:
        return None
    result = subprocess.run(
        [program, *args], capture_output=True, text=True, timeout=60, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"nvidia-smi failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None  # [N/A], [Not Supported]


def _csv_rows(args: list[str], width: int) -> list[list[str]] | None:
    """The cells of each row of a `--query-... --format=csv` answer that has `width` cells
    (one per queried field) and a number first; None without nvidia-smi."""
    out = _nvidia_smi(args)
    if out is None:
        return None
    rows = []
    for line in out.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == width and cells[0].isdigit():
            rows.append(cells)
    return rows


def node_gpus() -> list[Gpu] | None:
    """Every GPU of the node, in nvidia-smi's order; None when nvidia-smi is not installed."""
    rows = _csv_rows(
        [
            "--query-gpu=index,uuid,name,driver_version,memory.total",
            "--format=csv,noheader,nounits",
        ],
        5,
    )
    if rows is None:
        return None
    return [Gpu(c[0], c[1], c[2], c[3], _number(c[4])) for c in rows]


def visible_gpus(env: Mapping[str, str] | None = None) -> list[Gpu] | None:
    """The GPUs this process may use: the node's, narrowed by CUDA_VISIBLE_DEVICES (nvidia-smi
    indices or UUIDs, in its order) when it is set; None when nvidia-smi is not installed.
    An empty or negative CUDA_VISIBLE_DEVICES hides every GPU, as it does for CUDA."""
    gpus = node_gpus()
    if gpus is None:
        return None
    value = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return gpus
    chosen = []
    for entry in (e.strip() for e in value.split(",")):
        if not entry or entry.startswith("-"):
            break  # CUDA stops at the first invalid entry
        match = [g for g in gpus if entry in (g.index, g.uuid) or g.uuid.startswith(entry)]
        if not match:
            break
        chosen.append(match[0])
    return chosen


def compute_apps() -> list[tuple[int, str]] | None:
    """(pid, GPU uuid) of every compute process on the node; None without nvidia-smi."""
    rows = _csv_rows(["--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"], 2)
    if rows is None:
        return None
    return [(int(c[0]), c[1]) for c in rows]


def gpu_compute_pids(env: Mapping[str, str] | None = None) -> list[int] | None:
    """PIDs of compute processes on the GPUs this job may use (CUDA_VISIBLE_DEVICES), or None
    when ``nvidia-smi`` is not installed. A process on another GPU of the node is no concern
    of this job's: a second job on a free GPU is never refused for the first one's server."""
    apps = compute_apps()
    if apps is None:
        return None
    mine = {g.uuid for g in visible_gpus(env) or []}
    return [pid for pid, uuid in apps if uuid in mine]


def gpu_is_empty(env: Mapping[str, str] | None = None) -> bool | None:
    """True when no process computes on this job's GPUs; None without ``nvidia-smi``."""
    pids = gpu_compute_pids(env)
    return None if pids is None else not pids


def check_gpu_empty() -> None:
    """Refuse (GpuBusyError, naming the holders) when a process computes on this job's GPU."""
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
        shown = ", ".join(f"{g.index} ({g.uuid})" for g in visible_gpus() or [])
        raise GpuBusyError(
            f"the GPU is in use by {holders} (this job's GPU: {shown}); a measured run needs "
            "it empty"
        )


@dataclass
class MpsDaemon:
    env: dict[str, str]  # CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY
    program: str
    pipe_dir: Path
    record: Path | None = None  # where a killed job's daemon is found (stop_leftover_mps)


def start_mps(
    mps_control: str, log_dir: Path, base_env: dict[str, str], record: Path | None = None
) -> MpsDaemon:
    """Start a daemon of the job's own (`-d`, pipe folder private to it). `record` is written
    before the daemon starts and names its pipe folder: a job SIGKILLed once it is written
    leaves a daemon the next run of the job stops (`stop_leftover_mps`); `stop_mps` removes it."""
    program = shutil.which(mps_control, path=base_env.get("PATH"))
    if program is None:
        raise MpsStartError(f"MPS requested but {mps_control!r} is not on PATH")
    # The pipe folder holds a unix socket (path length limit ~108): keep it short, in /tmp.
    pipe_dir = Path(tempfile.mkdtemp(prefix="thetalker-mps-pipe-"))
    mps_log = Path(tempfile.mkdtemp(prefix="mps-log-", dir=log_dir))
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(pipe_dir), "CUDA_MPS_LOG_DIRECTORY": str(mps_log)}
    daemon = MpsDaemon(env=env, program=program, pipe_dir=pipe_dir, record=record)
    if record is not None:
        _write_mps_record(record, daemon)
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
        if record is not None:
            record.unlink(missing_ok=True)
        raise MpsStartError(
            f"{program} -d exited with code {code}", log_tail(mps_log / "control-start.log")
        )
    return daemon


def _write_mps_record(path: Path, daemon: MpsDaemon) -> None:
    record = {
        "schema_version": MPS_RECORD_SCHEMA,
        "program": daemon.program,
        "env": daemon.env,
        "hostname": socket.gethostname(),
        "boot_id": _leftover.boot_id(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def stop_leftover_mps(record: Path, base_env: Mapping[str, str]) -> bool:
    """Stop the daemon an earlier, killed run of the job left (its record names the pipe
    folder; `quit` there reaches that daemon and no other). True when there was one to stop.
    A record from another machine or boot names nothing here and is only removed."""
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        data = None
    here = (
        isinstance(data, dict)
        and data.get("schema_version") == MPS_RECORD_SCHEMA
        and data.get("hostname") == socket.gethostname()
        and data.get("boot_id") == _leftover.boot_id()
        and isinstance(data.get("env"), dict)
        and isinstance(data.get("program"), str)
    )
    if not here:
        record.unlink(missing_ok=True)
        return False
    assert isinstance(data, dict)
    env = {str(k): str(v) for k, v in data["env"].items()}
    pipe_dir = Path(env.get("CUDA_MPS_PIPE_DIRECTORY", ""))
    if not pipe_dir.is_absolute() or not pipe_dir.is_dir():
        record.unlink(missing_ok=True)  # no pipe folder, no daemon listening in it
        return False
    print(
        f"thetalker.lifecycle.launch: stopping leftover MPS daemon (pipe folder {pipe_dir}), "
        f"recorded in {record}",
        file=sys.stderr,
        flush=True,
    )
    stop_mps(MpsDaemon(env=env, program=data["program"], pipe_dir=pipe_dir, record=record),
             dict(base_env))  # fmt: skip
    return True


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
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"thetalker.lifecycle.launch: warning: MPS quit failed: {exc}", file=sys.stderr)
    finally:
        shutil.rmtree(daemon.pipe_dir, ignore_errors=True)
        if daemon.record is not None:
            daemon.record.unlink(missing_ok=True)
