"""What every process a run spawns (a worker, the record writer) does first.

A terminal's Ctrl-C reaches the whole process group: the parent alone decides, and stops
its children itself (after their records), so a child ignores SIGINT. A parent killed
outright (SIGKILL) cannot stop anything, so each child watches for it and ends by itself.
"""

from __future__ import annotations

import asyncio
import os
import signal

__all__ = ["ParentWatch"]


class ParentWatch:
    """Created first thing in a child: ignores SIGINT and remembers the parent."""

    def __init__(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self._parent = os.getppid()

    def parent_alive(self) -> bool:
        return os.getppid() == self._parent

    async def cancel_when_gone(self, task: asyncio.Task[object], poll_s: float = 0.5) -> None:
        """Cancel `task` once the parent is gone (so no orphan goes on sending)."""
        while self.parent_alive():
            await asyncio.sleep(poll_s)
        task.cancel()
