"""Process groups of a started server: whether one still runs, stopping it whole, and the
signal handling that keeps a stop from being cut short (a leftover server would hold the GPU
and spoil the next measured run)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["group_alive", "log_tail", "stop_process_group", "signals_held", "TermGuard"]

LOG_TAIL_LINES = 30


def log_tail(path: str | Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file ('' when it cannot be read)."""
    try:
        data = Path(path).read_bytes()[-65536:]
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` still runs (zombies do not count)."""
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: fall back to the signal probe
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command: state, ppid, pgrp, ...
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def _wait_group_gone(proc: subprocess.Popen, pgid: int, deadline: float) -> bool:
    while True:
        proc.poll()  # reap the leader so it does not linger as a zombie
        if not group_alive(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM are only remembered inside the block, then delivered again to the
    handlers that were there before (KeyboardInterrupt, a guard): a second Ctrl-C can no longer
    cut a stop short. Only the main thread may set handlers (signals only arrive there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda signum, _frame: held.append(signum)) for sig in _STOP_SIGNALS
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        for sig in dict.fromkeys(held):  # each signal once, in arrival order
            signal.raise_signal(sig)


def stop_process_group(proc: subprocess.Popen, grace_s: float = 20.0) -> None:
    """SIGTERM the process group of ``proc`` (its own session), then SIGKILL whatever is left
    after ``grace_s``. SIGINT/SIGTERM arriving meanwhile wait until the group is gone."""
    pgid = proc.pid  # start_new_session=True makes the leader's pid the group id
    with signals_held():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        if not _wait_group_gone(proc, pgid, time.monotonic() + grace_s):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            _wait_group_gone(proc, pgid, time.monotonic() + 10.0)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5.0)


class TermGuard:
    """Turns the first SIGTERM into SystemExit(143) so ``finally`` blocks run.

    Only the main thread may set signal handlers; elsewhere the guard does nothing. Once
    cleanup has begun (``disarm``) SIGTERM and SIGINT are only remembered, so neither can cut
    the cleanup short; ``restore`` then raises the first (SystemExit(143) or
    KeyboardInterrupt), unless an exception is already on its way out.
    """

    def __init__(self) -> None:
        self.armed = False
        self.pending: int | None = None
        self._previous: dict[int, Callable | int | None] = {}
        self._installed = threading.current_thread() is threading.main_thread()
        if self._installed:
            self._previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._handle)
            self.armed = True

    def _handle(self, signum: int, frame: object) -> None:
        if self.armed:
            self.armed = False
            raise SystemExit(128 + signum)
        if self.pending is None:
            self.pending = signum

    def disarm(self) -> None:
        self.armed = False
        if self._installed and signal.SIGINT not in self._previous:
            self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._handle)

    def restore(self, unwinding: bool) -> None:
        if not self._installed:
            return
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        if self.pending is not None and not unwinding:
            if self.pending == signal.SIGINT:
                raise KeyboardInterrupt
            raise SystemExit(128 + self.pending)
