"""Whose listener is on a port: the launcher's readiness counts only the server's own.

The launcher picks a free port and starts the server, which binds it only once its model is
loaded (a vllm-omni engine: a minute on a CPU, minutes on a GPU). Another process that takes
the port in that window would answer ``/health`` and be measured as the server. So readiness
asks the kernel who listens there: ``/proc/net/tcp`` and ``tcp6`` list each listening socket
(address, owner uid, inode), and ``/proc/PID/fd`` names the processes holding that inode. A
listener is the server's when its process is in the server's process group or carries the
run's server token (``thetalker.lifecycle.leftover.TOKEN_VAR``: a server that left its
group); any other listener on the port is foreign and named.
"""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from thetalker.lifecycle import leftover as _leftover

__all__ = ["CONTAINER_FORWARDERS", "Listener", "listeners", "foreign_listener"]

_PROC = Path("/proc")
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column
_WILDCARDS = {"0.0.0.0", "::"}
# A `command` server run in a container (`docker run -p {port}:8000 ...`) is reached through
# the container runtime's port forwarder, a process outside the server's group by design: its
# listener stands for the server. Matched on /proc/PID/comm, the executable's own name.
CONTAINER_FORWARDERS = frozenset({"docker-proxy", "rootlesskit", "slirp4netns", "pasta", "gvproxy"})


@dataclass
class Listener:
    """A listening socket on the port: its address, owner uid, and the PIDs that hold it."""

    address: str
    uid: int
    inode: int
    pids: list[int] = field(default_factory=list)


def _address(hex_addr: str) -> str:
    """`/proc/net/tcp`'s address (32-bit words in host byte order) as text."""
    raw = bytes.fromhex(hex_addr)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    family = socket.AF_INET if len(words) == 4 else socket.AF_INET6
    return socket.inet_ntop(family, words)


def _host_addresses(host: str) -> set[str]:
    """The addresses a connection to ``host`` may reach, plus the wildcards."""
    found = {host, *_WILDCARDS}
    with contextlib.suppress(OSError, UnicodeError):
        for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP):
            found.add(str(info[4][0]))
    return found | {f"::ffff:{a}" for a in found if "." in a}


def _socket_table(port: int, addresses: set[str]) -> dict[int, Listener] | None:
    """Listening sockets on ``port`` at one of ``addresses``, by inode; None when the kernel's
    tables cannot be read (not Linux)."""
    found: dict[int, Listener] = {}
    read_any = False
    for name in ("tcp", "tcp6"):
        try:
            lines = (_PROC / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue
        read_any = True
        for line in lines:
            cols = line.split()
            if len(cols) < 10 or cols[3] != _LISTEN:
                continue
            hex_addr, _, hex_port = cols[1].partition(":")
            if int(hex_port, 16) != port:
                continue
            address = _address(hex_addr)
            if address in addresses:
                found[int(cols[9])] = Listener(address, int(cols[7]), int(cols[9]))
    return found if read_any else None


def listeners(host: str, port: int) -> list[Listener] | None:
    """Every socket listening on ``host:port`` (a wildcard address included) with the PIDs
    holding it (those this user can see); None when ``/proc`` cannot tell."""
    table = _socket_table(port, _host_addresses(host))
    if not table:
        return None if table is None else []
    wanted = {f"socket:[{inode}]": inode for inode in table}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue  # gone, or another user's
        for fd in fds:
            with contextlib.suppress(OSError):
                inode = wanted.get(os.readlink(fd))
                if inode is not None and int(entry.name) not in table[inode].pids:
                    table[inode].pids.append(int(entry.name))
    return list(table.values())


def _command_name(pid: int) -> str:
    try:
        return (_PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


def _ours(pid: int, pgid: int, token: str | None) -> bool:
    in_group = _leftover.process_group(pid) == pgid
    return (
        in_group
        or (token is not None and _leftover.carries_token(pid, token))
        or _command_name(pid) in CONTAINER_FORWARDERS
    )


def foreign_listener(host: str, port: int, pgid: int, token: str | None) -> str | None:
    """Who listens on ``host:port`` other than the server (process group ``pgid``, a process
    carrying its ``token``, or a container runtime's port forwarder), described in words; None
    when every listener there is the server's, none listens yet, or ``/proc`` cannot tell."""
    for sock in listeners(host, port) or []:
        others = [p for p in sock.pids if not _ours(p, pgid, token)]
        if others:
            return _leftover.describe_pid(others[0])
        if not sock.pids:  # held by a process this user cannot see: not the server we started
            return f"a process of uid {sock.uid} this user cannot see (socket inode {sock.inode})"
    return None
