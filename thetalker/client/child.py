"""What every process a run spawns (a worker, the record writer) does first.

A terminal's Ctrl-C reaches the whole process group: the parent alone decides, and stops
its children itself (after their records), so a child ignores SIGINT. A parent killed
outright (SIGKILL) cannot stop anything, so each child watches for it and ends by itself.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal

__all__ = ["ParentWatch"]


class ParentWatch:
    """Created first thing in a child: ignores SIGINT (and, with `ignore_term`, SIGTERM) and
    remembers the parent: the process that started it, through multiprocessing's sentinel
    where there is one (a process forked by a fork server has that server as its OS parent,
    which a signal to the group may end while the real parent still runs)."""

    def __init__(self, ignore_term: bool = False) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if ignore_term:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        self._starter = multiprocessing.parent_process()
        self._parent = os.getppid()

    def parent_alive(self) -> bool:
        if self._starter is not None:
            return self._starter.is_alive()
        return os.getppid() == self._parent

    async def cancel_when_gone(self, task: asyncio.Task[object], poll_s: float = 0.5) -> None:
        """Cancel `task` once the parent is gone (so no orphan goes on sending)."""
        while self.parent_alive():
            await asyncio.sleep(poll_s)
        task.cancel()
