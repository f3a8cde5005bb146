"""GPU slots on one node: each bench job takes one free GPU of the node for its whole life.

A slot is an exclusive `flock` on `<slots dir>/gpu-<uuid>.lock`. The kernel drops the lock
when the process that holds it exits, however it exits (normal end, failure, Ctrl-C,
SIGTERM, SIGKILL), so a slot held by a dead job is free at once; the holder file beside the
lock (pid, start, label) is only there to say whose it was, and a stale one is reported and
replaced by the next job that takes the GPU. The pool is the node's GPUs as nvidia-smi lists
them, narrowed by CUDA_VISIBLE_DEVICES when the user set it; how many jobs run at once is
Snakemake's `--resources gpu=N`, and a job that finds every GPU of the pool held waits.

While a slot is held, CUDA_VISIBLE_DEVICES is that GPU's nvidia-smi index (with
CUDA_DEVICE_ORDER=PCI_BUS_ID, so CUDA counts as nvidia-smi does) for the server, the sampler
and the empty-GPU check, all of which this process starts: a deploy file's device "0" is
then the job's GPU. Under Slurm (SLURM_JOB_ID with CUDA_VISIBLE_DEVICES set) the GPU is
whatever Slurm gave: nothing is taken or reassigned.

The folder must be the user's own and not writable by others (refused otherwise, one line);
lock and holder files are opened without following links, and the holder is written under a
name nobody can predict (as the voices folder is written, thetalker.server.voices).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thetalker import backends
from thetalker.lifecycle.gpu import Gpu, visible_gpus
from thetalker.util.safe_write import replace_file

__all__ = [
    "GPU_LAUNCHERS",
    "SLOTS_DIR_ENV",
    "GpuSlot",
    "GpuSlotError",
    "gpu_slot",
    "slots_dir",
    "held_slots",
]

# Launchers whose server computes on the node's GPU (`Launch.gpu` in thetalker.backends:
# vllm-omni, nari; the embedded server runs on the CPU, an external server is not ours).
GPU_LAUNCHERS = tuple(n for n in backends.launcher_names() if backends.launcher(n).launch.gpu)
SLOTS_DIR_ENV = "THETALKER_GPU_SLOTS_DIR"
WAIT_ENV = "THETALKER_GPU_WAIT_S"
# While a slot is held, the pool as the user gave it (CUDA_VISIBLE_DEVICES before the slot
# narrowed it to one GPU; "*" when it was unset), so a slot taken inside sees the same pool.
POOL_ENV = "THETALKER_GPU_POOL"
DEFAULT_WAIT_S = 24 * 3600.0  # Snakemake's --resources bounds the wait; this bounds a mistake
_POLL_S = 0.5
_SAY_WAITING_EVERY_S = 60.0


class GpuSlotError(RuntimeError):
    """No GPU of the pool became free in time (the message names the holders)."""


@dataclass
class GpuSlot:
    """The GPU a job holds. `source`: "slot" (taken from the node's pool here) or "slurm"
    (given by Slurm). `freed_stale`: the dead job whose record this one replaced, if any."""

    gpu: Gpu
    source: str
    lock_path: Path | None = None
    freed_stale: dict[str, Any] | None = None
    _fd: int | None = None

    def env(self) -> dict[str, str]:
        """What the job's processes see: the GPU by nvidia-smi's index and order."""
        return {"CUDA_VISIBLE_DEVICES": self.gpu.index, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, **self.gpu.to_json()}
        if self.lock_path is not None:
            out["lock"] = str(self.lock_path)
        if self.freed_stale is not None:
            out["freed_stale_holder"] = self.freed_stale
        return out


def slots_dir(env: Mapping[str, str] | None = None) -> Path:
    """Node-local and shared by every job of the node (one folder per user)."""
    env = os.environ if env is None else env
    value = env.get(SLOTS_DIR_ENV)
    if value:
        return Path(value)
    return Path(tempfile.gettempdir()) / f"thetalker-gpu-slots-{os.getuid()}"


def _pool_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with CUDA_VISIBLE_DEVICES as the user gave it (see POOL_ENV)."""
    out = dict(env)
    pool = out.get(POOL_ENV)
    if pool == "*":
        out.pop("CUDA_VISIBLE_DEVICES", None)
    elif pool is not None:
        out["CUDA_VISIBLE_DEVICES"] = pool
    return out


def _under_slurm(env: Mapping[str, str]) -> bool:
    return bool(env.get("SLURM_JOB_ID")) and env.get("CUDA_VISIBLE_DEVICES") is not None


def _own_folder(folder: Path) -> None:
    """Make the slots folder (0700) and refuse one that is not the user's own: a folder
    another user made first (in a shared /tmp) or can write in could point the job's lock and
    holder writes at a file of their choosing."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(folder)
    except OSError as exc:
        raise GpuSlotError(f"GPU slots folder {folder}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        why = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a folder"
    elif info.st_uid != os.getuid():
        why = f"owned by uid {info.st_uid}, not this user ({os.getuid()})"
    elif info.st_mode & 0o022:
        why = f"writable by others (mode {stat.S_IMODE(info.st_mode):o})"
    else:
        return
    raise GpuSlotError(
        f"GPU slots folder {folder} is {why}: refused (remove it, or set {SLOTS_DIR_ENV} "
        "to a folder of your own)"
    )


def _open_nofollow(path: Path, flags: int, mode: int = 0o600) -> int:
    """os.open that never follows a symbolic link at `path` (GpuSlotError naming it)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise GpuSlotError(f"{path} is a symbolic link: refused") from None
        raise


def _read_holder(path: Path) -> dict[str, Any] | None:
    """The holder file's record; None when missing, unreadable, or no regular file (a link
    is not followed, a FIFO not waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = json.loads(fh.read(1 << 16).decode("utf-8"))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return data if isinstance(data, dict) else None


def _write_holder(holder_path: Path, holder: dict[str, Any]) -> None:
    """Write the holder file whole under a name nobody can predict, renamed over the old one
    (thetalker.util.safe_write: no planted link is written through)."""
    replace_file(holder_path, (json.dumps(holder, sort_keys=True) + "\n").encode(), 0o600)


def _try_take(folder: Path, gpu: Gpu, label: str) -> GpuSlot | None:
    lock_path = folder / f"gpu-{gpu.uuid}.lock"
    fd = _open_nofollow(lock_path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    holder_path = lock_path.with_suffix(".holder.json")
    stale = _read_holder(holder_path)  # we hold the lock: whoever wrote this is gone
    holder = {"pid": os.getpid(), "label": label, "since": time.time(), "gpu": gpu.to_json()}
    _write_holder(holder_path, holder)
    return GpuSlot(gpu, "slot", lock_path, stale, fd)


def held_slots(env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The slots of the node's pool that a live process holds now (for messages and tests):
    a lock that can be taken is free, whatever its holder file says."""
    folder = slots_dir(env)
    held = []
    for lock_path in sorted(folder.glob("gpu-*.lock")):
        try:
            fd = _open_nofollow(lock_path, os.O_RDWR)
        except (GpuSlotError, OSError):
            continue  # a link or a file gone: no slot a job of this user holds
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(lock_path.with_suffix(".holder.json")) or {}
            held.append({"lock": str(lock_path), **holder})
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    return held


def _release(slot: GpuSlot) -> None:
    if slot._fd is None:
        return
    assert slot.lock_path is not None
    holder_path = slot.lock_path.with_suffix(".holder.json")
    holder = _read_holder(holder_path)
    if holder is not None and holder.get("pid") == os.getpid():
        holder_path.unlink(missing_ok=True)
    os.close(slot._fd)  # drops the lock
    slot._fd = None


@contextlib.contextmanager
def gpu_slot(
    label: str,
    env: Mapping[str, str] | None = None,
    wait_s: float | None = None,
    say: Callable[[str], None] | None = None,
) -> Iterator[GpuSlot | None]:
    """Hold one GPU of the node for the block, its CUDA_VISIBLE_DEVICES set in os.environ
    (restored after). Yields None on a node without nvidia-smi or without a visible GPU:
    nothing to hold. `label` names the job in the holder file and in messages."""
    env = os.environ if env is None else env
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    if _under_slurm(env):
        gpus = visible_gpus(env) or []
        yield GpuSlot(gpus[0], "slurm") if gpus else None
        return
    pool = visible_gpus(_pool_env(env))
    if not pool:
        yield None
        return
    folder = slots_dir(env)
    _own_folder(folder)
    if wait_s is None:
        wait_s = float(env.get(WAIT_ENV, DEFAULT_WAIT_S))
    deadline = time.monotonic() + wait_s
    said_at = -_SAY_WAITING_EVERY_S
    slot = None
    while slot is None:
        for gpu in pool:
            slot = _try_take(folder, gpu, label)
            if slot is not None:
                break
        if slot is not None:
            break
        now = time.monotonic()
        holders = ", ".join(
            f"{h.get('label', '?')} (PID {h.get('pid', '?')})" for h in held_slots(env)
        )
        if now >= deadline:
            raise GpuSlotError(
                f"{label}: no GPU of {len(pool)} became free in {wait_s:g} s (held by "
                f"{holders or 'processes that left no record'}; slots in {folder})"
            )
        if now - said_at >= _SAY_WAITING_EVERY_S:
            say(f"{label}: waiting for a free GPU: all {len(pool)} held by {holders}")
            said_at = now
        time.sleep(_POLL_S)
    if slot.freed_stale is not None:
        stale = slot.freed_stale
        say(
            f"{label}: GPU {slot.gpu.index} was last held by {stale.get('label', '?')} "
            f"(PID {stale.get('pid', '?')}), which is gone; its slot is taken over"
        )
    pool_value = env.get(POOL_ENV, env.get("CUDA_VISIBLE_DEVICES", "*"))
    held_env = {**slot.env(), POOL_ENV: pool_value}
    saved = {key: os.environ.get(key) for key in held_env}
    os.environ.update(held_env)
    try:
        yield slot
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _release(slot)
