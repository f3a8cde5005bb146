"""Writing records and JSON files: standard JSON only (a NaN or infinity is refused naming
where it is), a record handed to the OS at once, a JSON file replaced whole; every failure a
`RecordWriteError` naming the file. Reading them back: thetalker.data.record_reads.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from thetalker.data.records import Record

__all__ = ["RecordWriteError", "append_record", "strict_dumps", "write_json"]


class RecordWriteError(OSError):
    """A record could not be written (disk full, file made unwritable); names the file."""

    def __str__(self) -> str:  # the message alone, no `[Errno N]` prefix
        return str(self.strerror)


def append_record(fh: IO[str], record: Mapping[str, Any] | Record, sync: bool = True) -> None:
    """Append one record and hand it to the OS (flushed: a killed process loses nothing),
    and with `sync` push it to disk (fsync: a power loss keeps it too).

    Raises RecordWriteError naming the file when the write, flush or fsync fails."""
    if isinstance(record, Record):
        record = record.to_json()
    line = strict_dumps(record, separators=(",", ":")) + "\n"
    try:
        fh.write(line)
        fh.flush()
        if sync:
            os.fsync(fh.fileno())
    except OSError as exc:
        why = exc.strerror or str(exc)
        index = record.get("request_index")
        raise RecordWriteError(
            exc.errno, f"{fh.name}: cannot write the record of request {index}: {why}"
        ) from None


def strict_dumps(data: Any, **kwargs: Any) -> str:
    """`json.dumps` that writes standard JSON only: a NaN or infinity raises ValueError
    naming the key path that holds it (never the non-standard `NaN` token)."""
    try:
        return json.dumps(data, allow_nan=False, **kwargs)
    except ValueError:
        where = _nonfinite_path(data) or "a value"
        raise ValueError(f"{where}: not a finite number; JSON cannot hold it") from None


def _nonfinite_path(value: Any, at: str = "") -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return at or "the value"
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list | tuple)
        else ()
    )
    for key, v in items:
        found = _nonfinite_path(v, f"{at}.{key}" if at else str(key))
        if found is not None:
            return found
    return None


def write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write JSON atomically (temp file then rename): a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        text = strict_dumps(data, indent=2, sort_keys=False) + "\n"  # before the temp file
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise RecordWriteError(exc.errno, f"{path}: cannot write: {exc.strerror or exc}") from None
