"""Enough file descriptors for the streams a point runs, or a refusal before anything is sent.

Each stream holds one socket; a soft ``ulimit -n`` of 1024 (a common default) lets a
2,048-stream point open only about a thousand, and the rest fail as if the server had refused
them. ``ensure_fd_limit`` raises the soft RLIMIT_NOFILE to what the streams need when the hard
limit allows, and refuses with one line naming the concurrency and the limit when it does
not. ``is_fd_exhaustion`` tells a client-side EMFILE/ENFILE from a server fault, so a record
can say so instead of blaming the server.
"""

from __future__ import annotations

import errno
import resource

__all__ = ["FdLimitError", "FD_RESERVE", "fds_needed", "ensure_fd_limit", "is_fd_exhaustion"]

# Descriptors besides the streams' sockets: the interpreter, records, logs, saved audio, DNS.
FD_RESERVE = 128
_GENEROUS = 65536  # what to ask for when the hard limit is unlimited


class FdLimitError(RuntimeError):
    """The hard limit on open files is below what the streams need; one line."""


def fds_needed(streams: int) -> int:
    return int(streams) + FD_RESERVE


def ensure_fd_limit(streams: int) -> int:
    """Make the soft RLIMIT_NOFILE at least ``fds_needed(streams)``; return the soft limit now
    in force. Raises FdLimitError when the hard limit does not allow it."""
    need = fds_needed(streams)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return soft
    if hard != resource.RLIM_INFINITY and hard < need:
        raise FdLimitError(
            f"concurrency {streams} needs about {need} open files, but the hard limit is {hard} "
            f"(soft {soft}): raise it (ulimit -Hn, limits.conf, LimitNOFILE) or lower the "
            "concurrency"
        )
    # As much as the hard limit allows: more costs nothing and covers what the estimate misses.
    target = hard if hard != resource.RLIM_INFINITY else max(need, _GENEROUS)
    for value in (target, need):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (value, hard))
            return value
        except (ValueError, OSError):
            continue  # e.g. above the kernel's nr_open
    raise FdLimitError(f"concurrency {streams}: could not raise the open-file limit to {need}")


def is_fd_exhaustion(exc: BaseException) -> bool:
    """Whether an error is this process running out of descriptors (EMFILE/ENFILE), anywhere
    in its cause chain: a client-side limit, never a server fault."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.EMFILE, errno.ENFILE):
            return True
        # aiohttp's ClientConnectorError keeps the OSError it wraps as `os_error`.
        wrapped = getattr(current, "os_error", None)
        current = (
            wrapped if isinstance(wrapped, OSError) else current.__cause__ or current.__context__
        )
    return False
