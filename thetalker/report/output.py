"""Every report file (tables, CSVs, figures) is written whole or not at all, and a failed
write is one line naming the file.

`write_output(path, write)` calls `write(tmp)` on a temporary file beside `path` and renames
it into place: a reader (or `snakemake --report`) never sees half a table, an interrupted
write leaves the old file or none, and a full disk or a read-only folder raises
`ReportWriteError` (`FILE: cannot write: No space left on device`) instead of a traceback.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["ReportWriteError", "write_output", "exit_status"]


class ReportWriteError(OSError):
    """A report file that could not be written; the message names it."""

    def __str__(self) -> str:
        return str(self.strerror)


def write_output(path: str | os.PathLike[str], write: Callable[[Path], Any]) -> Path:
    """Write `path` through `write(tmp)` and an atomic rename; returns `path`."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")  # same suffix: savefig's format
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        _discard(tmp)
        why = "Not a directory" if isinstance(exc, FileExistsError) else exc.strerror or exc
        raise ReportWriteError(exc.errno, f"{path}: cannot write: {why}") from None
    except BaseException:
        _discard(tmp)
        raise
    return path


def _discard(tmp: Path) -> None:
    with contextlib.suppress(OSError):
        tmp.unlink(missing_ok=True)


def exit_status(write: Callable[[], Any]) -> int:
    """A report module's exit status: 0 once `write()` wrote its files, 1 after one line
    on stderr naming the file it could not write."""
    try:
        write()
    except ReportWriteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
