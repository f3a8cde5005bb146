"""Imported by the record writer's fork server when it starts, and nowhere else.

A SIGTERM to a bench job's process group (Slurm's scancel, a supervisor) reaches the fork
server too. Were it to die of it, multiprocessing would report the writer it forked as
gone and the job would lose the records still in the writer's queue. So the server
ignores SIGTERM; it still ends when the process that started it does (its `alive` pipe
closes) and at that process's exit (`sinks._stop_writer_server`).
"""

from __future__ import annotations

import signal

signal.signal(signal.SIGTERM, signal.SIG_IGN)
