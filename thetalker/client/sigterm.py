"""SIGTERM stops a run as Ctrl-C does: the running task is cancelled, so in-flight requests
are recorded as `cancelled` and the summary is written (a supervisor, Slurm's `scancel`).

One rule for every entry point that runs a benchmark (`run_benchmark`, the workers' parent):
a handler the caller set is left alone (the bench job's guard), and outside the main thread
or off Unix nothing is installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["sigterm_cancels_this_task"]


@contextlib.contextmanager
def sigterm_cancels_this_task() -> Iterator[None]:
    """Inside the block, SIGTERM cancels the task running it; the default comes back after."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    handled = False
    main = threading.current_thread() is threading.main_thread()
    if task is not None and main and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
            loop.add_signal_handler(signal.SIGTERM, task.cancel)
            handled = True
    try:
        yield
    finally:
        if handled:
            loop.remove_signal_handler(signal.SIGTERM)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
