"""Imported by the record writer's fork server when it starts, and nowhere else.

A SIGTERM to a bench job's process group (Slurm's scancel, a supervisor) reaches the fork
server too. Were it to die of it, multiprocessing could no longer tell the writer's exit
(it reads the writers' exit codes from the server) and would report a live writer as
gone. So the server
ignores SIGTERM; it still ends when the process that started it does (its `alive` pipe
closes, once the writers it forked, which hold that pipe too, have ended).
"""

from __future__ import annotations

import signal

__all__: list[str] = []  # imported for its one effect

signal.signal(signal.SIGTERM, signal.SIG_IGN)
