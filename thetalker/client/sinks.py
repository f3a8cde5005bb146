"""Record sinks: exchanges in, records built and appended to records.jsonl off the loop.

Two kinds, one interface (`context.RecordSink`): the record writer process
(`thetalker.client.writer_process`), whenever this process runs the scored streams itself,
and a writer thread, where worker processes run them (a worker builds its records in a
thread and forwards them; the parent's thread only appends records built already).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from thetalker.client.context import RecordSink, RunContext
from thetalker.client.exchange import Exchange
from thetalker.client.handoff import QuietHandoff
from thetalker.client.options import BenchError, effective_workers
from thetalker.client.record import build_record
from thetalker.client.writer_process import RecordWriterProcess
from thetalker.client.writes import RecordWrites, describe_write
from thetalker.data.appender import RecordAppender

__all__ = ["RecordSink", "ThreadSink", "open_sink"]


def open_sink(path: Path, ctx: RunContext) -> RecordSink:
    """The writer process when this process runs the scored streams itself, from the first
    stream (benchmarks/README.md: at one stream a record built in a thread while the next
    request's first chunk came made that stream's every delta late, 2.5x the bare loop's
    error against 0.9-1.1x; at 64 streams 1.2x against 0.9x); else (workers) a thread."""
    if effective_workers(ctx.opts) == 1:
        return RecordWriterProcess(path, ctx).start()
    return ThreadSink(path, ctx)


class ThreadSink:
    """Builds and appends records in a thread of its own, off the event loop.

    `put` takes an exchange (built here) or a record a worker process built already. With
    `forward` (a worker's sink) records go to that callable instead of a file."""

    def __init__(
        self,
        path: Path | None,
        ctx: RunContext,
        forward: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.ctx = ctx
        self.records: list[dict[str, Any]] = []
        self.on_failure: Callable[[str], None] | None = None
        self._forward = forward
        out = RecordAppender(path.open("w", encoding="utf-8")) if path is not None else None
        self._writes = RecordWrites(out, self._report)
        self._queue: queue.SimpleQueue[Exchange | dict[str, Any] | None] = queue.SimpleQueue()
        self._handoff = QuietHandoff(self._queue.put)  # see put
        self._thread = threading.Thread(target=self._run, name="thetalker-records", daemon=True)
        self._thread.start()

    def put(self, ex: Exchange | dict[str, Any]) -> None:
        """Held while the receive loop is busy, to the thread at its first quiet moment
        (thetalker.client.handoff); everything held goes at close."""
        self._handoff.put(ex)

    def wait_ready(self) -> None:
        """Ready from the start: the thread costs nothing to start."""

    def _run(self) -> None:
        writes = self._writes
        while True:
            try:
                ex = self._queue.get(timeout=writes.wait_s(None))
            except queue.Empty:  # only with a file: without, no limit
                writes.sync_if_due()
                continue
            if ex is None:
                break
            writes.run(lambda ex=ex: self._keep(ex))
        writes.finish()

    def _keep(self, ex: Exchange | dict[str, Any]) -> None:
        record = ex if isinstance(ex, dict) else build_record(self.ctx, ex).to_json()
        if self._writes.out is not None:
            self._writes.out.append(record)
        if self._forward is not None:
            self._forward(record)
        self.records.append(record)

    def _report(self, exc: BaseException) -> None:
        if self.on_failure is not None:
            self.on_failure(describe_write(exc))

    def close(self) -> list[dict[str, Any]]:
        self._handoff.flush()
        self._queue.put(None)
        self._thread.join()
        if self._writes.error is not None:
            raise BenchError(f"writing records failed: {describe_write(self._writes.error)}")
        return sorted(self.records, key=lambda r: r["request_index"])
