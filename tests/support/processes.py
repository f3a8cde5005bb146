"""Looking for processes a test left behind, by PID (never by name), and stopping them.

Shared by the tests that start servers, Snakemake or Slurm jobs and must prove that nothing
outlives them: the examples, the launcher, the workflow and the reliability tests.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

__all__ = ["pid_alive", "cmdline", "processes_in", "kill_pids"]

_PROC = Path("/proc")


def _state(pid: int | str) -> str | None:
    """The one-letter state from /proc/PID/stat, None when the process is gone."""
    try:
        return (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent counts as gone)."""
    return _state(pid) not in (None, "Z", "X")


def cmdline(pid: int) -> str:
    """The command line of `pid`, arguments joined by spaces ('' when it is gone)."""
    try:
        return (_PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def processes_in(directory: Path) -> list[int]:
    """Live PIDs whose working directory is inside `directory` (servers inherit the job's)."""
    found = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if _state(entry.name) in (None, "Z", "X"):
            continue
        if cwd == str(directory) or cwd.startswith(f"{directory}/"):
            found.append(int(entry.name))
    return found


def kill_pids(pids: list[int]) -> None:
    """SIGKILL what a failed test left (by PID, never by name)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
