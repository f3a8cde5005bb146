"""Before a start: stop (or refuse) what an earlier run of the same job left running.

A launcher SIGKILLed after its server started leaves the server's record behind
(``thetalker.lifecycle.leftover``). ``clear_leftover`` reads it before the next start: the
recorded process group, and any process still carrying the earlier run's server token (a
server that daemonized), are stopped (policy ``"stop"``) or refused in one line naming them
and the command that would stop them (``"refuse"``); then the MPS daemon that run started, if
it is still there. A leftover whose launcher still runs is never touched: it is another run's
server, not a leftover.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from thetalker.lifecycle import leftover
from thetalker.lifecycle.gpu import stop_leftover_mps
from thetalker.lifecycle.processes import signals_held
from thetalker.lifecycle.readiness import ServerStartError

__all__ = ["LEFTOVER_POLICIES", "clear_leftover", "mps_record_path"]

LEFTOVER_POLICIES = ("stop", "refuse")


def mps_record_path(record_path: Path) -> Path:
    """The record of the MPS daemon a server ran in, beside the server's own record."""
    return record_path.with_name(record_path.name.removesuffix(".pid.json") + ".mps.json")


def clear_leftover(record_path: Path, policy: str, grace_s: float) -> None:
    """Stop (or refuse, `policy`) a server an earlier run of this job left running, then the
    MPS daemon it ran in (a job SIGKILLed after starting the daemon); see the docstring."""
    _clear_leftover_server(record_path, policy, grace_s)
    with signals_held():
        stop_leftover_mps(mps_record_path(record_path), os.environ)


def _clear_leftover_server(record_path: Path, policy: str, grace_s: float) -> None:
    record = leftover.read_record(record_path)
    found = leftover.find_leftover(record_path)
    if found is not None:
        where = f"{found.describe()}, recorded in {record_path}"
        pgid = found.pgid
        _stop_leftover(
            where,
            found.launcher_pid,
            policy,
            lambda: leftover.stop_group(pgid, grace_s),
            f"kill -TERM -- -{pgid}",
        )
    # What carries the earlier run's token outside its group (a server that daemonized) is
    # that server too: gone only when none remains.
    token = record.get("token") if record else None
    carriers = leftover.token_carriers(token) if isinstance(token, str) else []
    if carriers:
        assert isinstance(token, str) and record is not None
        where = (
            f"{', '.join(leftover.describe_pid(p) for p in carriers[:3])} carrying the server "
            f"token of {record_path}"
        )
        launcher = leftover.launcher_alive(record)
        _stop_leftover(
            where,
            launcher,
            policy,
            lambda: leftover.stop_carriers(token, grace_s),
            "kill -TERM " + " ".join(map(str, carriers)),
        )
    leftover.remove_record(record_path)


def _stop_leftover(
    where: str,
    launcher_pid: int | None,
    policy: str,
    stop: Callable[[], bool],
    by_hand: str,
) -> None:
    """Stop what an earlier run left (or refuse, `policy`); ServerStartError when it cannot
    be stopped or its launcher still runs."""
    if launcher_pid is not None:
        raise ServerStartError(f"{where}, is still served by a running launcher PID {launcher_pid}")
    if policy == "refuse":
        raise ServerStartError(f"{where}, is left from an earlier run; stop it with: {by_hand}")
    print(f"thetalker.lifecycle.launch: stopping leftover {where}", file=sys.stderr, flush=True)
    try:
        with signals_held():
            gone = stop()
    except PermissionError:
        gone = False
    if not gone:
        raise ServerStartError(f"{where}, could not be stopped (permission denied?)")
