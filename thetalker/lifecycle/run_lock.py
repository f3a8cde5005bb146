"""One writer per run: a bench job holds an exclusive lock for as long as it runs.

A job deletes what an earlier run left (a point's folder, the search's folder) before it
writes anew; if that earlier run is still going (an orphan of a SIGKILLed Snakemake, still
searching), deleting would destroy its data. So a job first takes the run's lock (`flock`
on `<server log stem>.lock` beside its server log) and deletes nothing before it holds it;
a job that cannot take it refuses, naming the holder. The kernel drops the lock when its
holder dies by any means (SIGKILL included), so a lock never outlives its job and needs no
clean-up. `held_locks` lets the workflow's `onstart` refuse a whole run before Snakemake
itself deletes any output of a job whose earlier run still writes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["RunBusyError", "lock_path", "run_lock", "holder", "held_locks"]


class RunBusyError(RuntimeError):
    """Another live process holds the run's lock; the message names it and the lock."""


def lock_path(server_log: str | os.PathLike[str]) -> Path:
    """The lock of the job whose server log this is: `<log stem>.lock` beside it."""
    log = Path(server_log)
    return log.with_name(log.stem + ".lock")


def _holder_text(path: Path) -> str:
    from thetalker.lifecycle.leftover import describe_pid

    try:
        pid = int(path.read_text(encoding="utf-8").split()[0])
    except (OSError, ValueError, IndexError):
        return "another process"
    return describe_pid(pid)


@contextlib.contextmanager
def run_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the lock for the block, or raise RunBusyError at once when another holds it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunBusyError(
                f"{path}: held by {_holder_text(path)}, an earlier run of this job still "
                "writing its results; nothing was deleted (stop it or wait for it)"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)  # releases the lock


def holder(path: str | os.PathLike[str]) -> str | None:
    """Who holds the lock (a line naming the PID), or None when nobody does. Takes and drops
    the lock to find out; a missing file is held by nobody."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder_text(path)
    finally:
        os.close(fd)
    return None


def held_locks(logs_root: str | os.PathLike[str]) -> list[str]:
    """A line for each job lock under the logs folder that a live process holds."""
    lines = []
    for path in sorted(Path(logs_root).rglob("*.lock")):
        who = holder(path)
        if who is not None:
            lines.append(f"{path}: held by {who}")
    return lines
