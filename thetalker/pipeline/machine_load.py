"""The machine's load during a point: how much of its CPU went to processes other than the
server and the client (issue 45: a measurement beside another running engine said nothing
of it).

`MachineLoad` takes two snapshots (the resource sampler takes them as it starts and stops,
around a point's requests) and gives:

- `other_cpu_pct`: the CPU time the whole machine spent busy (`psutil.cpu_times()`: all but
  idle and iowait), less the CPU time of the server's process tree and of the client (this
  process, its descendants outside the server's tree, and the children it reaped), as a
  percent of the machine's capacity over the window (wall time x logical CPUs). 0 on an
  otherwise idle machine; a second engine spinning one core of 16 adds about 6.
- `load_average_1m`: the 1-minute load average at the end (runnable processes, all of them).

A point whose `other_cpu_pct` is at least `BUSY_OTHER_CPU_PCT` is named in every table
(`busy_mark`, docs/records.md "Provenance"). A process that exited inside the window takes
its CPU time out of the server's or client's sum, so it counts as another's: the figure
errs towards saying the machine was busy, never towards hiding it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

__all__ = ["BUSY_OTHER_CPU_PCT", "MachineLoad", "busy_mark", "client_pids"]

# At or above it, a point's figures were measured on a machine that other work kept busy: a
# fifth of every core's time (e.g. another engine spinning 4 of 16 cores, or 1 of 4).
BUSY_OTHER_CPU_PCT = 20.0


def busy_mark(other_cpu_pct: Any) -> str:
    """` (busy machine: N% CPU by others)` for a point at or above `BUSY_OTHER_CPU_PCT`, else
    empty (also for no figure: a point recorded before it, or a failed sample)."""
    try:
        pct = float(other_cpu_pct)
    except (TypeError, ValueError):
        return ""
    if not pct >= BUSY_OTHER_CPU_PCT:  # NaN (an empty CSV cell) is no figure
        return ""
    return f" (busy machine: {pct:.0f}% CPU by others)"


def _busy_seconds() -> float:
    """CPU seconds the machine spent not idle, all CPUs (guest time is inside user's)."""
    t = psutil.cpu_times()
    total = sum(getattr(t, f) for f in t._fields if f not in ("guest", "guest_nice"))
    return total - t.idle - getattr(t, "iowait", 0.0)


def client_pids(server: set[int], client_pid: int) -> set[int]:
    """The client's processes: `client_pid` and its descendants, less the server's tree
    (`server`: a launcher's server is the client's child)."""
    try:
        root = psutil.Process(client_pid)
        client = {root.pid} | {p.pid for p in root.children(recursive=True)}
    except psutil.Error:
        client = {client_pid}
    return client - server


@dataclass(frozen=True)
class _Snapshot:
    t: float
    busy_s: float
    cpu_by_pid: dict[int, float]
    reaped_s: float  # CPU of the client's children it has waited for


def _cpu_of(pids: set[int]) -> dict[int, float]:
    out: dict[int, float] = {}
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue  # exited between listing and reading
        out[pid] = times.user + times.system
    return out


class MachineLoad:
    """Two snapshots of the machine's and the measurement's own CPU; `result()` the figures."""

    def __init__(self, server_tree: Callable[[], set[int]], client_pid: int | None = None) -> None:
        self.server_tree = server_tree  # the server's process tree now (empty: no server)
        self.client_pid = os.getpid() if client_pid is None else client_pid
        self._first: _Snapshot | None = None
        self._last: _Snapshot | None = None

    def snapshot(self) -> None:
        """The first call opens the window, each later one closes it."""
        server = self.server_tree()
        client = client_pids(server, self.client_pid)
        reaped = 0.0
        if self.client_pid == os.getpid():
            times = os.times()
            reaped = times.children_user + times.children_system
        snap = _Snapshot(time.monotonic(), _busy_seconds(), _cpu_of(server | client), reaped)
        if self._first is None:
            self._first = snap
        else:
            self._last = snap

    def result(self) -> dict[str, Any]:
        """`other_cpu_pct` (None without two snapshots), `load_average_1m`, `cpus`."""
        cpus = psutil.cpu_count() or 1
        out: dict[str, Any] = {"other_cpu_pct": None, "load_average_1m": None, "cpus": cpus}
        with contextlib.suppress(OSError):  # no load average on this system
            out["load_average_1m"] = round(os.getloadavg()[0], 2)
        first, last = self._first, self._last
        if first is None or last is None or last.t <= first.t:
            return out
        # A process first seen at the end started inside the window: all its time counts.
        own = sum(cpu - first.cpu_by_pid.get(pid, 0.0) for pid, cpu in last.cpu_by_pid.items())
        own += last.reaped_s - first.reaped_s
        other = max(0.0, (last.busy_s - first.busy_s) - max(0.0, own))
        out["other_cpu_pct"] = round(min(100.0, 100.0 * other / ((last.t - first.t) * cpus)), 1)
        return out
