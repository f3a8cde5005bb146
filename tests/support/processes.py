"""Looking for processes a test left behind, by PID (never by name), and stopping them.

Shared by the tests that start servers, Snakemake or Slurm jobs and must prove that nothing
outlives them: the examples, the launcher, the workflow and the reliability tests.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

__all__ = [
    "die_with_parent",
    "pid_alive",
    "pipe_write_blocked",
    "cmdline",
    "parent_pid",
    "outermost",
    "processes_in",
    "kill_pids",
    "session_pids",
    "stop_group",
    "wait_healthy",
    "port_open",
    "run_in_group",
    "stop_tree",
]

_PROC = Path("/proc")


def _state(pid: int | str) -> str | None:
    """The one-letter state from /proc/PID/stat, None when the process is gone."""
    try:
        return (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return None


_PR_SET_PDEATHSIG = 1  # prctl(2)
# Looked up here, in the parent: the child between fork and exec must not import or dlopen
# (another thread of the parent may hold a lock the child would wait on for ever).
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def die_with_parent() -> None:
    """`preexec_fn` for a server a test starts in a session of its own: the kernel sends it
    SIGTERM when the test process that started it dies, so a pytest worker ended by a timeout
    or SIGKILL (no finalizer runs) leaves no server behind. Linux only; elsewhere nothing."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def pid_alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent counts as gone)."""
    return _state(pid) not in (None, "Z", "X")


def pipe_write_blocked(pid: int) -> bool:
    """Whether a thread of `pid` sleeps in a pipe write (the kernel's wchan names it): a
    writer stopped by a full pipe, which a test waits for before it kills the reader."""
    for task in (_PROC / str(pid) / "task").iterdir():
        with contextlib.suppress(OSError):
            if "pipe_write" in (task / "wchan").read_text():
                return True
    return False


def cmdline(pid: int) -> str:
    """The command line of `pid`, arguments joined by spaces ('' when it is gone)."""
    try:
        return (_PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def parent_pid(pid: int) -> int | None:
    """The parent's PID from /proc/PID/stat, None when the process is gone."""
    try:
        return int((_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[-1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def outermost(pids: list[int]) -> list[int]:
    """Those of `pids` whose parent is not among them (PIDs gone by now dropped).

    A process's child between its fork and its exec (every `subprocess.run`, e.g. a bench
    job's sampler calling nvidia-smi every half second) still shows the parent's command line
    and working directory: a match by command line finds both for that moment. The program
    itself is the match whose parent is not one."""
    among = set(pids)
    return [pid for pid in pids if (parent := parent_pid(pid)) is not None and parent not in among]


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


def session_pids(sid: int) -> list[int]:
    """Every process of session `sid` (a process started with start_new_session leads one,
    which outlives it while members remain)."""
    pids = []
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == sid:
                    pids.append(int(entry.name))
            except (ProcessLookupError, PermissionError):
                continue
    return pids


def stop_group(proc: subprocess.Popen, grace_s: float = 15) -> None:
    """SIGTERM to the process group `proc` leads, SIGKILL after the grace."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def wait_healthy(base_url: str, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    """Until `base_url/health` answers 200; fails when `proc` exits first or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode} during startup")
        try:
            with urllib.request.urlopen(base_url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{base_url} not healthy after {timeout_s} s")


def port_open(port: int) -> bool:
    """Something listens on 127.0.0.1:`port`."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def stop_tree(proc: subprocess.Popen, cwd: Path | None = None, grace_s: float = 20.0) -> None:
    """Stop what `proc` started: SIGTERM to its process group (Snakemake hands it to its jobs,
    and a bench job stops its server), then SIGKILL to the group and to every process still
    running with its working directory inside `cwd` (servers lead groups of their own but
    inherit the job's folder)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if cwd is not None:
        kill_pids(processes_in(Path(cwd)))
    with contextlib.suppress(subprocess.TimeoutExpired, ValueError, OSError):
        proc.communicate(timeout=10)  # reap it, close its pipes


def run_in_group(
    cmd: list[str],
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float,
    grace_s: float = 20.0,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(cmd, capture_output=True, text=True)` in a session of its own; when it
    times out, or the test is stopped around it (pytest-timeout, Ctrl-C), the whole tree it
    started is stopped (`stop_tree`), not only its first process."""
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        stop_tree(proc, cwd, grace_s)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
