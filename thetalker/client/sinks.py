"""Record sinks: exchanges in, records built and appended to records.jsonl off the loop."""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import multiprocessing.forkserver
import os
import queue
import sys
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from thetalker.client.child import ParentWatch
from thetalker.client.context import RecordSink, RunContext
from thetalker.client.handoff import QuietHandoff
from thetalker.client.options import BenchError, effective_workers
from thetalker.client.receive import _describe, _Exchange
from thetalker.client.record import build_record
from thetalker.data.appender import RecordAppender
from thetalker.data.records import RecordWriteError, read_records

__all__ = ["PROCESS_SINK_FROM", "RecordSink", "ThreadSink", "ProcessSink", "open_sink"]

# Streams from which records are built in a process of their own (benchmarks/README.md): at
# 64 streams a writer thread building a wave's records still held the GIL while the next
# wave's first chunks came (client p99 1.2x the bare loop's, 0.9x with the process), and at
# one stream a record built while the next request's first chunk came made that stream's
# every delta late (2.5x against 0.9-1.1x). From the first stream, then; tests raise it to
# exercise the thread.
PROCESS_SINK_FROM = 1
# The GIL switch interval while a writer thread runs beside the receive loop (see ThreadSink).
_SWITCH_INTERVAL_S = 0.0002


def open_sink(path: Path, ctx: RunContext) -> RecordSink:
    """A writer process when this process runs the scored streams itself (from
    `PROCESS_SINK_FROM` streams, the first; any open loop), else a thread (with workers,
    records arrive built and this process only drains a queue)."""
    opts = ctx.opts
    many = opts.request_rate is not None or opts.concurrency >= PROCESS_SINK_FROM
    if effective_workers(opts) == 1 and many:
        return ProcessSink(path, ctx)
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
        self._writes = _Writes(out, self._report)
        self._queue: queue.SimpleQueue[_Exchange | dict[str, Any] | None] = queue.SimpleQueue()
        self._handoff = QuietHandoff(self._queue.put)  # see put
        self._thread = threading.Thread(target=self._run, name="thetalker-records", daemon=True)
        # A thread holding the GIL keeps it up to the switch interval (5 ms by default) after
        # the receive loop asks for it: a chunk's stamp would wait that long behind a record.
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch_interval, _SWITCH_INTERVAL_S))
        self._thread.start()

    def put(self, ex: _Exchange | dict[str, Any]) -> None:
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

    def _keep(self, ex: _Exchange | dict[str, Any]) -> None:
        record = ex if isinstance(ex, dict) else build_record(self.ctx, ex).to_json()
        if self._writes.out is not None:
            self._writes.out.append(record)
        if self._forward is not None:
            self._forward(record)
        self.records.append(record)

    def _report(self, exc: BaseException) -> None:
        if self.on_failure is not None:
            self.on_failure(_describe_write(exc))

    def close(self) -> list[dict[str, Any]]:
        self._handoff.flush()
        self._queue.put(None)
        self._thread.join()
        sys.setswitchinterval(self._switch_interval)
        if self._writes.error is not None:
            raise BenchError(f"writing records failed: {_describe_write(self._writes.error)}")
        return sorted(self.records, key=lambda r: r["request_index"])


class _Writes:
    """One writer's records file (None: records forwarded, no file) and its first failure,
    reported once: after it nothing more is written, and what was written before it is
    still synced at the end. Shared by the writer thread and the writer process."""

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


class ProcessSink:
    """Builds and appends records in a process of its own, at a lower CPU priority.

    From `PROCESS_SINK_FROM` streams up, building records in a thread (metrics, JSON:
    ~0.2 ms per request) competes with the receive loop for the GIL and delays its
    timestamps; in another process it does not, and the OS runs it when the receive loop
    is idle. The exchanges cross over an unbounded `multiprocessing.Queue` (pickled by its
    feeder thread, so `put` never blocks the loop), at the loop's quiet moments
    (`QuietHandoff`: the feeder and the writer then work while no chunk is being stamped).
    Same interface as `ThreadSink`."""

    def __init__(self, path: Path, ctx: RunContext) -> None:
        self.path = path
        self.on_failure: Callable[[str], None] | None = None
        mp = _writer_context()
        self._queue = mp.Queue()
        self._done = mp.Queue()
        self._handoff = QuietHandoff(_ToWriter(self._queue, ctx))  # see put
        path.open("w", encoding="utf-8").close()  # the file exists from the start
        self._proc = mp.Process(
            target=_sink_process_main,
            args=(str(path), self._queue, self._done),
            name="thetalker-records",
            daemon=True,
        )
        self._proc.start()
        _open_writers.add(self)
        # The queue's feeder thread pickles each exchange in this process, holding the GIL
        # as the writer thread would (see ThreadSink): the same short switch interval.
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch_interval, _SWITCH_INTERVAL_S))
        self._ready = threading.Event()
        self._settled = threading.Event()  # ready, or the process gone before it
        self._error: str | None = None  # the first failed write, as the process said it
        self._end: str | None = "the record writer process ended without a word"
        # Reads the process's messages as they come: a failed write is known at once.
        self._watcher = threading.Thread(target=self._watch, name="thetalker-records-watch")
        self._watcher.daemon = True
        self._watcher.start()

    def _watch(self) -> None:
        try:
            self._read_messages()
        finally:  # gone: whoever waits for its start waits no longer
            self._settled.set()

    def _read_messages(self) -> None:
        while True:
            try:
                message = self._done.get(timeout=0.5)
            except queue.Empty:
                if self._proc.is_alive():
                    continue
                # Gone: read what it said between the last wait and its exit (its `end`).
                with contextlib.suppress(queue.Empty, OSError, EOFError):
                    while not self._take(self._done.get(timeout=0.1)):
                        pass
                    return
                self._died()  # no `end`: killed, or failed before its loop
                return
            if self._take(message):
                return

    def _died(self) -> None:
        """The process ended without its `end`: what it held is lost and what is sent from
        now on would be, so the run stops (`on_failure`), naming why where it can."""
        self._queue.cancel_join_thread()  # its feeder may block on a pipe no one reads
        code = self._proc.exitcode
        if self._ready.is_set():
            self._end = f"the record writer process ended (exit code {code}) mid-run"
        else:
            self._end = f"the record writer process ended (exit code {code}) before it started"
            self._end += _main_module_hint()
        if self._error is None and self.on_failure is not None:
            self.on_failure(self._end)

    def _take(self, message: tuple[str, str | None]) -> bool:
        """Act on one message of the process; True for its last (`end`)."""
        kind, text = message
        if kind == "ready":
            same = text is not None and os.path.realpath(text) == os.path.realpath(__file__)
            if not same and self._error is None:  # see _sink_process_main
                self._error = (
                    f"the record writer process runs {text}, this process {__file__}: "
                    "multiprocessing's fork server does not take this process's sys.path; "
                    "install the copy you run, or put it on PYTHONPATH"
                )
            self._ready.set()
            self._settled.set()
        elif kind == "error" and self._error is None:
            self._error = text
            if self.on_failure is not None:
                self.on_failure(str(text))
        elif kind == "end":
            self._end = text
            return True
        return False

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Block until the writer process has started (its imports cost ~1 s of CPU that
        must not overlap the scored requests); call it when nothing is in flight. A process
        that ended before it started raises BenchError here, before any scored request."""
        self._settled.wait(timeout_s)
        gone_early = not self._ready.is_set() and not self._proc.is_alive()
        if gone_early:
            self._watcher.join()  # its last word (`_end`) is in
        if gone_early or self._error is not None:  # or e.g. another copy of thetalker there
            raise BenchError(f"writing records failed: {self._error or self._end}")

    def put(self, ex: _Exchange | dict[str, Any]) -> None:
        """Held while the receive loop is busy, to the writer at its first quiet moment
        (thetalker.client.handoff); everything held goes at close."""
        self._handoff.put(ex)

    def close(self) -> list[dict[str, Any]]:
        self._handoff.flush()
        self._queue.put(None)
        self._watcher.join()
        sys.setswitchinterval(self._switch_interval)
        error = self._error or self._end
        self._end_process()
        self._queue.close()
        if error is not None:
            raise BenchError(f"writing records failed: {error}")
        records = list(read_records(self.path))
        return sorted(records, key=lambda r: r["request_index"])

    def _end_unclosed(self) -> None:
        """At exit, a writer never closed: its None, then its end (what it holds is written)."""
        self._handoff.flush()
        self._queue.put(None)
        self._end_process()

    def _end_process(self) -> None:
        """After its None: the process ends by itself (within 10 s, or it is killed)."""
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        _open_writers.discard(self)


class _ToWriter:
    """Puts exchanges on the writer process's queue, the run's context ahead of the first.
    Apart from the sink, so that its hand-off holds no reference back to the sink (a cycle
    would keep the queue's semaphores alive to the interpreter's end when a run fails)."""

    def __init__(self, inbox: Any, ctx: RunContext) -> None:
        self._inbox = inbox
        self._ctx: RunContext | None = ctx

    def __call__(self, ex: _Exchange | dict[str, Any]) -> None:
        if self._ctx is not None:  # complete (sample rate known) once requests finish
            self._inbox.put(self._ctx)
            self._ctx = None
        self._inbox.put(ex)


# Writer processes not closed yet: ended at exit before the fork server (a program that
# never reached `close` would otherwise wait at exit on a writer that ignores SIGTERM).
_open_writers: weakref.WeakSet[ProcessSink] = weakref.WeakSet()


def _main_module_hint() -> str:
    """Why a writer process most often dies before it starts: multiprocessing runs the
    program's main file again in it, and a file that calls the client at its top level
    starts the client again there (which multiprocessing refuses)."""
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if main_file is None:
        return ""
    return (
        f"; multiprocessing runs {main_file} again in that process, so a program that "
        'calls the client must do so under `if __name__ == "__main__":`'
    )


def _writer_context() -> Any:
    """Writer processes forked from a server process that has imported this module (and
    numpy, the record builder) once: the first costs a fresh interpreter's start (~0.6 s of
    CPU, before the scored requests), each later one in the same process a fork. Never a
    plain fork of this process: its threads (the sampler's, aiohttp's resolver) could hold
    locks the child would inherit held. The server ignores SIGTERM (`writer_server`) and
    ends when this process does."""
    global _server_stop_registered
    mp = multiprocessing.get_context("forkserver")
    mp.set_forkserver_preload(["thetalker.client.writer_server", __name__])
    if not _server_stop_registered:
        atexit.register(_stop_writer_server)
        _server_stop_registered = True
    return mp


_server_stop_registered = False


def _stop_writer_server() -> None:
    """At exit, stop the fork server and wait for it: it would end on its own once this
    process is gone, but a moment later, and a run's processes must be gone when it is.
    Writers never closed get their None first (what they hold is written)."""
    for sink in list(_open_writers):
        with contextlib.suppress(OSError, ValueError):
            sink._end_unclosed()
    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    stop = getattr(server, "_stop", None)  # the standard library's own (for its tests)
    if stop is not None:
        with contextlib.suppress(OSError, ChildProcessError):
            stop()


def _sink_process_main(path: str, inbox: Any, done: Any) -> None:
    """The record writer process: exchanges in, JSONL lines out (fsynced in groups), until
    None."""
    # The parent stops it, after its records: a SIGTERM to the process group (Slurm's
    # scancel, a supervisor) must not end it with records still in its queue.
    watch = ParentWatch(ignore_term=True)
    with contextlib.suppress(OSError):
        os.nice(10)
    # Its own file: the fork server imports thetalker by its own sys.path (not the parent's),
    # so a parent running another copy (a checkout put first on sys.path) is told so.
    done.put(("ready", __file__))
    ctx: RunContext | None = None
    out = RecordAppender(open(path, "a", encoding="utf-8"))  # noqa: SIM115 (closed by finish)
    writes = _Writes(out, lambda exc: done.put(("error", _describe_write(exc))))
    while True:
        try:  # the parent is watched at least once a second
            item = inbox.get(timeout=writes.wait_s(1.0))
        except queue.Empty:
            writes.sync_if_due()
            if not watch.parent_alive():  # the parent was killed outright
                break
            continue
        if item is None:
            break
        if isinstance(item, RunContext):
            ctx = item
            continue

        def keep(item: Any = item, ctx: RunContext | None = ctx) -> None:
            assert ctx is not None  # sent ahead of the first exchange
            out.append(item if isinstance(item, dict) else build_record(ctx, item).to_json())

        writes.run(keep)
    writes.finish()
    done.put(("end", None if writes.error is None else _describe_write(writes.error)))


def _describe_write(exc: BaseException) -> str:
    """A write failure's own message (it names the file); anything else as `_describe`."""
    return str(exc) if isinstance(exc, RecordWriteError) else _describe(exc)
