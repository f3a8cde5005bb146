"""One record writer's file and its first failure, for the writer thread and process alike.

After a failed write nothing more is written (the point stops there), and what was written
before it is still synced at the end.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from thetalker.client.exchange import describe
from thetalker.data.appender import RecordAppender
from thetalker.data.record_writes import RecordWriteError

__all__ = ["RecordWrites", "describe_write"]


class RecordWrites:
    """A writer's records file (None: records forwarded, no file) and its first failure,
    given to `report` once."""

    def __init__(self, out: RecordAppender | None, report: Callable[[BaseException], None]) -> None:
        self.out = out
        self.error: BaseException | None = None
        self._report = report

    def wait_s(self, longest: float | None) -> float | None:
        """How long to wait for the next record: until the unsynced records are due, at
        most `longest` (None: no limit); after a failure nothing is synced on the way."""
        due = self.out.sync_due_in() if self.out is not None and self.error is None else None
        if due is None:
            return longest
        return due if longest is None else min(due, longest)

    def run(self, step: Callable[[], None]) -> None:
        if self.error is not None:
            return  # after a failed write nothing more is written (the point stops)
        try:
            step()
        except BaseException as exc:  # the caller's report, and its close()
            self.error = exc
            self._report(exc)

    def sync_if_due(self) -> None:
        if self.out is not None:
            self.run(self.out.sync_if_due)

    def finish(self) -> None:
        """Sync (a failure reported) and close; after a failure, sync what came before."""
        if self.out is None:
            return
        if self.error is None:
            self.run(self.out.sync)
        else:
            with contextlib.suppress(OSError):
                self.out.sync()
        with contextlib.suppress(OSError):  # a failed flush was reported already
            self.out.fh.close()


def describe_write(exc: BaseException) -> str:
    """A write failure's own message (it names the file); anything else as `describe`."""
    return str(exc) if isinstance(exc, RecordWriteError) else describe(exc)
