"""A server left running by an earlier run: its record, how it is found, and who holds a port.

``launch_server`` writes a record the moment its server starts (``write_record``: PID,
process group, port, the leader's start time from ``/proc/PID/stat``) and removes it once
the group is gone. A job killed by SIGKILL (``kill -9``, the OOM killer) cannot clean up, so
its record stays; the next run of the same job reads it (``find_leftover``) and stops that
group or refuses. A PID alone proves nothing (PIDs are reused): the leader counts as the same
process only when its start time matches the record; a group whose leader is gone but whose
members still run is still that group (Linux never reuses a PID that is a live group's id).
Both hold only on the machine and boot that wrote the record (a cluster's shared results
folder is read from other nodes), so the record carries the host name and kernel boot id, and
a record from elsewhere names nothing here.

The server's token (``TOKEN_VAR`` in its environment, inherited by all it starts) is the
proof: a group is signalled only when a member carries the record's token, and a server is
gone only when no process carrying it remains (``token_carriers``): a template that
daemonizes (`setsid`, a double fork) leaves its group, not its environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "RECORD_SCHEMA",
    "Leftover",
    "start_ticks",
    "boot_id",
    "TOKEN_VAR",
    "group_by_token",
    "carries_token",
    "token_carriers",
    "stop_carriers",
    "launcher_alive",
    "write_record",
    "read_record",
    "remove_record",
    "find_leftover",
    "same_command",
    "describe_pid",
    "port_holder",
    "group_members",
    "process_group",
    "stop_group",
    "leftover_warnings",
]

RECORD_SCHEMA = "thetalker.server-record/1"
_PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()  # fields from "state" on (field 3 of proc(5))


def start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks since boot, proc(5) field 22); None when gone or
    a zombie."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def process_group(pid: int) -> int | None:
    """The process group of ``pid``; None when it is gone or not readable."""
    fields = _stat_fields(pid)
    return int(fields[2]) if fields and len(fields) > 2 else None


def boot_id() -> str | None:
    """This boot's id: a PID in a record means something only on the boot that wrote it."""
    try:
        return (_PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) PIDs whose process group is ``pgid``."""
    members = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields and len(fields) > 2 and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def describe_pid(pid: int) -> str:
    """``PID 123 (python -m x ...)``: the command line cut to 120 characters when readable."""
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return f"PID {pid}"
    from thetalker.util.redact import redact_command

    words = redact_command(raw.decode("utf-8", "replace").split("\0")[:-1] or []) or []
    text = " ".join(" ".join(words).split())  # one line, whatever the arguments hold
    return f"PID {pid} ({text[:120]})" if text else f"PID {pid}"


# Set in the server's environment: the record written before the server starts names it by
# this token, so a launcher SIGKILLed between the start and the PID's record leaves a
# server the next run still finds (in /proc/PID/environ, which its children inherit).
TOKEN_VAR = "THETALKER_SERVER_TOKEN"


def write_record(
    path: Path,
    *,
    pid: int | None,
    port: int,
    host: str,
    command: list[str],
    token: str | None = None,
) -> None:
    """Write the server's record atomically (``command`` already redacted). ``pid`` None:
    the record written before the start, naming the server by its ``token`` only."""
    record = {
        "schema_version": RECORD_SCHEMA,
        "pid": pid,
        "pgid": pid,  # start_new_session: the leader's PID is the group's id
        "token": token,
        "port": port,
        "host": host,
        "hostname": socket.gethostname(),
        "boot_id": boot_id(),
        "start_ticks": start_ticks(pid) if pid is not None else None,
        "command": command,
        "launcher_pid": os.getpid(),
        "launcher_start_ticks": start_ticks(os.getpid()),
        "written_at": time.time(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_record(path: Path) -> dict[str, Any] | None:
    """The record, or None when there is none or it cannot be read as one."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    pending = record.get("pgid") is None and isinstance(record.get("token"), str)
    if not isinstance(record.get("pgid"), int) and not pending:
        return None
    return record


def group_by_token(token: str) -> int | None:
    """The process group of a live process started with ``TOKEN_VAR=token`` (a server whose
    launcher died before recording its PID), None when none runs."""
    for pid in token_carriers(token):
        fields = _stat_fields(pid)
        if fields and len(fields) > 2:
            return int(fields[2])
    return None


def carries_token(pid: int, token: str) -> bool:
    """Whether process `pid` was started with ``TOKEN_VAR=token`` (inherited from the
    server it descends from); False when gone or not readable (another user's)."""
    try:
        environ = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return f"{TOKEN_VAR}={token}".encode() in environ.split(b"\0")


def token_carriers(token: str) -> list[int]:
    """Live (not zombie) PIDs carrying the run's server token: the server and whatever it
    started, in its group or not (a template that daemonizes, `setsid`, leaves it)."""
    found = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        fields = _stat_fields(int(entry.name))
        if fields and fields[0] not in ("Z", "X") and carries_token(int(entry.name), token):
            found.append(int(entry.name))
    return found


def stop_carriers(token: str, grace_s: float) -> bool:
    """SIGTERM every process carrying `token`, SIGKILL what is left after `grace_s`; True
    when none remains. A server is gone only when no process carrying its token remains."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        carriers = token_carriers(token)
        if not carriers:
            return True
        for pid in carriers:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while token_carriers(token) and time.monotonic() < deadline:
            time.sleep(0.05)
    return not token_carriers(token)


def remove_record(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


@dataclass
class Leftover:
    """A still-running group from a record; ``launcher_pid`` set when its launcher also runs."""

    pid: int
    pgid: int
    port: int | None
    members: list[int]
    launcher_pid: int | None
    token: str | None = None

    def describe(self) -> str:
        port = f", port {self.port}" if self.port else ""
        return f"server {describe_pid(self.members[0])} (process group {self.pgid}{port})"


def same_command(pid: int, command: Any) -> bool:
    """Whether the live process runs the recorded (redacted) command: its arguments are the
    command's, after the program (an interpreter may come first: a `#!` script's cmdline is
    `python /path/script args`)."""
    if not isinstance(command, list) or not command or not all(isinstance(w, str) for w in command):
        return False
    from thetalker.util.redact import redact_command

    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return False
    words = redact_command(raw.decode("utf-8", "replace").split("\0")[:-1]) or []
    n_args = len(command) - 1
    if len(words) < len(command) or (n_args and words[-n_args:] != command[1:]):
        return False
    program = Path(command[0]).name
    return any(Path(w).name == program for w in words[: len(words) - n_args])


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def find_leftover(path: Path, warn: Callable[[str], None] | None = None) -> Leftover | None:
    """The server group a record names, when it still runs and is the same one: the
    leader's start time and command are the recorded ones (or, the leader gone, every member
    started after it), and a member carries the record's server token in its environment (a
    forged record, with a dead leader and a start time of 0, names no group of another's). A
    record that names another group is warned about (`warn`, default stderr) and names
    nothing: no group the project did not start is ever signalled."""
    say = warn or _warn
    record = read_record(path)
    if record is None:
        return None
    if record.get("hostname") != socket.gethostname() or record.get("boot_id") != boot_id():
        return None  # written on another machine, or before a reboot: its PIDs mean nothing here
    if record["pgid"] is None:  # written before the start; the launcher died before the PID
        found = group_by_token(record["token"])
        if found is None:
            return None
        ticks = start_ticks(found)
        record = {**record, "pid": found, "pgid": found, "start_ticks": ticks}
    pid, pgid = record.get("pid"), record["pgid"]
    if pid != pgid:  # write_record makes the leader's PID the group's id, always
        say(
            f"{path}: pid {pid} and pgid {pgid} differ: not a server record this project "
            "wrote; no process signalled"
        )
        return None
    recorded = record.get("start_ticks")
    ticks = start_ticks(pid)
    if ticks is not None:
        if ticks != recorded:
            return None  # the PID now belongs to another process: the recorded group is gone
        if not same_command(pid, record.get("command")):
            say(
                f"{path}: {describe_pid(pid)} is not the recorded server "
                f"({' '.join(map(str, record.get('command') or []))[:120]}); no process signalled"
            )
            return None
    members = group_members(pgid)
    if not members:
        return None
    if ticks is None:  # the leader is gone: its group holds only what started after it
        older = [
            m for m in members if not isinstance(recorded, int) or (start_ticks(m) or 0) < recorded
        ]
        if older:
            say(
                f"{path}: process group {pgid} holds {describe_pid(older[0])}, older than the "
                "recorded server: not its group; no process signalled"
            )
            return None
    token = record.get("token")
    if not isinstance(token, str) or not any(carries_token(m, token) for m in members):
        say(
            f"{path}: process group {pgid} has no process carrying the record's server token "
            f"({TOKEN_VAR}): not the server's group; no process signalled"
        )
        return None
    return Leftover(
        pid=pid,
        pgid=pgid,
        port=record.get("port"),
        members=members,
        launcher_pid=launcher_alive(record),
        token=token,
    )


def launcher_alive(record: dict[str, Any]) -> int | None:
    """The PID of the record's launcher when it still runs (its start time as recorded)."""
    launcher = record.get("launcher_pid")
    alive = (
        isinstance(launcher, int)
        and launcher != os.getpid()
        and start_ticks(launcher) is not None
        and start_ticks(launcher) == record.get("launcher_start_ticks")
    )
    return launcher if alive else None


def stop_group(pgid: int, grace_s: float) -> bool:
    """SIGTERM a group that is not our child, SIGKILL after ``grace_s``; True when it is gone.

    Raises PermissionError when the group belongs to another user."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait_s
        while group_members(pgid):
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        else:
            return True
    return not group_members(pgid)


def port_holder(host: str, port: int) -> int | None:
    """The PID listening on ``host:port`` (None when none is found or it cannot be seen)."""
    try:
        import psutil
    except ImportError:
        return None
    try:
        connections = psutil.net_connections(kind="inet")
    except (psutil.Error, OSError):
        return None
    for conn in connections:
        listening = conn.laddr and conn.status == psutil.CONN_LISTEN and conn.pid
        if listening and conn.laddr.port == port and conn.laddr.ip in (host, "0.0.0.0", "::"):
            return int(conn.pid)
    return None


def leftover_warnings(logs_root: Path) -> list[str]:
    """A line for each server an earlier run left running (its launcher gone) under the
    logs folder, with the command that stops it: said at every workflow start, so a run that
    has nothing to do (and so starts no job that would stop it) still says it."""
    lines = []
    for path in sorted(Path(logs_root).rglob("*.pid.json")):
        found = find_leftover(path)
        if found is not None and found.launcher_pid is None:
            lines.append(
                f"{found.describe()}, recorded in {path}, is left from an earlier run "
                f"(the next run of its job stops it; now: kill -TERM -- -{found.pgid})"
            )
            continue
        record = read_record(path)
        token = record.get("token") if record else None
        if found is None and record is not None and isinstance(token, str):
            carriers = token_carriers(token)  # a server that daemonized, its group gone
            if carriers and launcher_alive(record) is None:
                lines.append(
                    f"server {describe_pid(carriers[0])}, carrying the server token of {path}, "
                    "is left from an earlier run (the next run of its job stops it; now: "
                    f"kill -TERM {' '.join(map(str, carriers))})"
                )
    return lines
