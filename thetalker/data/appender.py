"""records.jsonl as a run writes it: every record handed to the OS at once, fsynced in groups."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import IO, Any

from thetalker.data.record_writes import RecordWriteError, append_record
from thetalker.data.records import Record

__all__ = ["SYNC_EVERY_S", "RecordAppender"]

# The most a power loss or kernel crash can take from records.jsonl (`RecordAppender`).
SYNC_EVERY_S = 0.5


class RecordAppender:
    """A run's records.jsonl writer: each record it appends is handed to the OS at once (a
    crash, Ctrl-C or SIGKILL of any process, the writer's own included, loses none of them),
    and fsynced at most `sync_every_s` (default `SYNC_EVERY_S`) later and at `close` (a power
    loss or kernel crash loses at most that).

    Why not fsync every record: each fsync makes the filesystem commit its journal, kernel
    work on the same cores as the receive loop; at 256 streams, one per record put the
    client's p99 timeline error at 1.3-1.5x the bare loop's against 1.0-1.1x without
    (benchmarks/README.md). The caller waits at most `sync_due_in()` for its next record,
    then calls `sync_if_due()`."""

    def __init__(
        self,
        fh: IO[str],
        sync_every_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fh = fh
        self._every = SYNC_EVERY_S if sync_every_s is None else sync_every_s
        self._clock = clock
        self._first_unsynced: float | None = None  # when the oldest unsynced record came

    def append(self, record: Mapping[str, Any] | Record) -> None:
        append_record(self.fh, record, sync=False)
        if self._first_unsynced is None:
            self._first_unsynced = self._clock()
        self.sync_if_due()

    def sync_due_in(self) -> float | None:
        """Seconds until the unsynced records are due (0 when overdue), None when none are."""
        if self._first_unsynced is None:
            return None
        return max(0.0, self._first_unsynced + self._every - self._clock())

    def sync_if_due(self) -> None:
        if self.sync_due_in() == 0.0:
            self.sync()

    def sync(self) -> None:
        """fsync what was appended; RecordWriteError naming the file when it fails."""
        if self._first_unsynced is None:
            return
        self._first_unsynced = None
        try:
            os.fsync(self.fh.fileno())
        except OSError as exc:
            why = exc.strerror or str(exc)
            message = f"{self.fh.name}: cannot sync records: {why}"
            raise RecordWriteError(exc.errno, message) from None

    def close(self) -> None:
        """Sync, then close (a failed sync raises, after the file is closed)."""
        try:
            self.sync()
        finally:
            self.fh.close()
