"""The record writer process: a run's exchanges in, records.jsonl out, off the receive loop.

Why a process (benchmarks/README.md, client fidelity): building a record (metrics, JSON:
~0.2 ms per request) in a thread of the receive loop's process holds the GIL while chunks
arrive, and their stamps wait; in a process of its own at nice 10 the OS runs it when the
loop is idle. Exchanges reach it at the loop's quiet moments (`QuietHandoff`), pickled and
written to its pipe by a sending thread (so `put` never blocks the loop); it appends each
record to the OS at once and fsyncs in groups (`RecordAppender`).

The protocol (`WriterMessage`) runs over two one-way pipes. To the writer: `CONTEXT` (the
run's `RunContext`, ahead of the first exchange), `EXCHANGE`s (an exchange, or a record
built already), `CLOSE`. From it: `READY` (with the file it runs), `ERROR` (the first failed
write), `END` (last, with the failure if any). Each end of each pipe is held by one process
only, so the death of either side reads as the end of the pipe on the other: the writer
never waits on its parent without a deadline, and a dead parent means "write what is whole,
then end" (a message cut short by a SIGKILL is not whole); a dead writer stops the run.
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import multiprocessing
import multiprocessing.forkserver
import os
import queue
import signal
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from thetalker.client.child import ParentWatch
from thetalker.client.context import RunContext
from thetalker.client.exchange import Exchange
from thetalker.client.handoff import QuietHandoff
from thetalker.client.options import BenchError
from thetalker.client.record import build_record
from thetalker.client.writes import RecordWrites, describe_write
from thetalker.data.appender import RecordAppender
from thetalker.data.record_reads import read_records

__all__ = ["RecordWriterProcess", "WriterMessage"]

# The writer looks for its parent at least this often while no message comes.
PARENT_CHECK_S = 1.0


class WriterMessage(enum.Enum):
    """What crosses between the run and its writer, each as (kind, payload)."""

    CONTEXT = "context"  # to the writer: the RunContext records are built with
    EXCHANGE = "exchange"  # to the writer: a finished exchange, or a record built already
    CLOSE = "close"  # to the writer: nothing more; write what you hold and end
    READY = "ready"  # from the writer: started, running the named file
    ERROR = "error"  # from the writer: the first failed write, described
    END = "end"  # from the writer, last: None, or the failure


class RecordWriterProcess:
    """One run's record writer process: `start`, `wait_ready`, `put`, `close` (and
    `on_failure`, called from a thread of this process at its first failed write or its
    death). The `RecordSink` of a run whose scored streams this process runs itself."""

    def __init__(self, path: Path, ctx: RunContext) -> None:
        self.path = path
        self.on_failure: Callable[[str], None] | None = None
        self._ctx = ctx
        self._ready = threading.Event()
        self._settled = threading.Event()  # ready, or the process gone before it
        self._error: str | None = None  # the first failed write, as the process said it
        self._end: str | None = "the record writer process ended without a word"

    def start(self) -> RecordWriterProcess:
        mp = _writer_context()
        from_run, self._to_writer = mp.Pipe(duplex=False)
        self._from_writer, to_run = mp.Pipe(duplex=False)
        self.path.open("w", encoding="utf-8").close()  # the file exists from the start
        self._proc = mp.Process(
            target=_writer_main,
            args=(str(self.path), from_run, to_run),
            name="thetalker-records",
            daemon=True,
        )
        _start_fork_server_deaf_to_the_group()
        self._proc.start()
        from_run.close()  # the writer's ends are the writer's alone (see the module doc)
        to_run.close()
        _open_writers.add(self)
        # The sending thread holds no reference to self: a run that fails leaves no cycle
        # keeping the pipes open to the interpreter's end.
        self._outgoing: queue.SimpleQueue[tuple[WriterMessage, Any]] = queue.SimpleQueue()
        self._handoff = QuietHandoff(self._outgoing.put)  # see put
        self._sender = threading.Thread(
            target=_send_all, args=(self._outgoing, self._to_writer, self._ctx),
            name="thetalker-records-send", daemon=True,
        )  # fmt: skip
        self._sender.start()
        # Reads the process's messages as they come: a failed write is known at once.
        self._watcher = threading.Thread(
            target=self._watch, name="thetalker-records-watch", daemon=True
        )
        self._watcher.start()
        return self

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

    def put(self, ex: Exchange | dict[str, Any]) -> None:
        """Held while the receive loop is busy, to the writer at its first quiet moment
        (thetalker.client.handoff); everything held goes at close."""
        self._handoff.put((WriterMessage.EXCHANGE, ex))

    def close(self) -> list[dict[str, Any]]:
        """Everything held sent, the writer's END awaited: the records, sorted, or BenchError."""
        self._finish()
        error = self._error or self._end
        if error is not None:
            raise BenchError(f"writing records failed: {error}")
        return sorted(read_records(self.path), key=lambda r: r["request_index"])

    def _finish(self) -> None:
        """CLOSE after everything held; the process ends by itself (within 10 s of its END,
        or it is killed)."""
        self._handoff.flush()
        self._outgoing.put((WriterMessage.CLOSE, None))
        self._watcher.join()
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        self._sender.join()  # sent CLOSE, or found the pipe's reader gone
        self._to_writer.close()
        self._from_writer.close()
        _open_writers.discard(self)

    def _watch(self) -> None:
        try:
            while True:
                try:
                    kind, text = self._from_writer.recv()
                except (EOFError, OSError):  # every end of its pipe closed: it is gone
                    self._died()
                    return
                if kind is WriterMessage.END:
                    self._end = text
                    return
                self._take(kind, text)
        finally:  # gone: whoever waits for its start waits no longer
            self._settled.set()

    def _take(self, kind: WriterMessage, text: str | None) -> None:
        if kind is WriterMessage.READY:
            same = text is not None and os.path.realpath(text) == os.path.realpath(__file__)
            if not same and self._error is None:  # see _writer_main
                self._error = (
                    f"the record writer process runs {text}, this process {__file__}: "
                    "multiprocessing's fork server does not take this process's sys.path; "
                    "install the copy you run, or put it on PYTHONPATH"
                )
            self._ready.set()
            self._settled.set()
        elif kind is WriterMessage.ERROR and self._error is None:
            self._error = text
            if self.on_failure is not None:
                self.on_failure(str(text))

    def _died(self) -> None:
        """The process ended without its END: what it held is lost and what is sent from
        now on would be, so the run stops (`on_failure`), naming why where it can."""
        self._proc.join(10)  # its pipe closes as it exits: the exit code is moments away
        code = self._proc.exitcode
        if self._ready.is_set():
            self._end = f"the record writer process ended (exit code {code}) mid-run"
        else:
            self._end = f"the record writer process ended (exit code {code}) before it started"
            self._end += _main_module_hint()
        if self._error is None and self.on_failure is not None:
            self.on_failure(self._end)


def _send_all(outgoing: queue.SimpleQueue[Any], pipe: Connection, ctx: RunContext) -> None:
    """The sending thread: each message pickled and written in order, the context ahead of
    the first exchange (complete, its sample rate known, once requests finish), until CLOSE
    or a pipe the writer no longer reads (its death, which the watcher reports)."""
    context_sent = False
    while True:
        kind, payload = outgoing.get()
        try:
            if kind is WriterMessage.EXCHANGE and not context_sent:
                pipe.send((WriterMessage.CONTEXT, ctx))
                context_sent = True
            pipe.send((kind, payload))
        except OSError:
            return
        if kind is WriterMessage.CLOSE:
            return


def _writer_main(path: str, from_run: Connection, to_run: Connection) -> None:
    """The writer process: exchanges in, JSONL lines out (fsynced in groups), until CLOSE or
    its parent's end."""
    # The parent stops it, after its records: a SIGTERM to the process group (Slurm's
    # scancel, a supervisor) must not end it with records still in its pipe.
    watch = ParentWatch(ignore_term=True)
    with contextlib.suppress(OSError):
        os.nice(10)

    def say(kind: WriterMessage, text: str | None) -> None:
        with contextlib.suppress(OSError):  # a parent gone hears nothing
            to_run.send((kind, text))

    # Its own file: the fork server imports thetalker by its own sys.path (not the parent's),
    # so a parent running another copy (a checkout put first on sys.path) is told so.
    say(WriterMessage.READY, __file__)
    ctx: RunContext | None = None
    out = RecordAppender(open(path, "a", encoding="utf-8"))  # noqa: SIM115 (closed by finish)
    writes = RecordWrites(out, lambda exc: say(WriterMessage.ERROR, describe_write(exc)))
    for kind, item in _messages(from_run, writes, watch):
        if kind is WriterMessage.CONTEXT:
            ctx = item
            continue

        def keep(item: Any = item, ctx: RunContext | None = ctx) -> None:
            assert ctx is not None  # sent ahead of the first exchange
            out.append(item if isinstance(item, dict) else build_record(ctx, item).to_json())

        writes.run(keep)
    writes.finish()
    say(WriterMessage.END, None if writes.error is None else describe_write(writes.error))


def _messages(
    from_run: Connection, writes: RecordWrites, watch: ParentWatch
) -> Iterator[tuple[WriterMessage, Any]]:
    """Each whole message until CLOSE, or until the parent is gone: its end of the pipe
    closed (after every whole message it sent), or found dead at a wait."""
    while True:
        if not from_run.poll(writes.wait_s(PARENT_CHECK_S)):
            writes.sync_if_due()
            if not watch.parent_alive():
                return
            continue
        try:
            kind, item = from_run.recv()
        except (EOFError, OSError):  # the parent's end closed; a message cut short is lost
            return
        if kind is WriterMessage.CLOSE:
            return
        yield kind, item


# Writer processes not closed yet: closed at exit (a program that never reached `close`
# would otherwise wait at exit on a writer that ignores SIGTERM).
_open_writers: weakref.WeakSet[RecordWriterProcess] = weakref.WeakSet()


def _close_unclosed_writers() -> None:
    """At exit, a writer never closed gets its CLOSE (what it holds is written) and is
    waited for: a run's processes are gone when it is. (Its fork server ends as this
    process does: its `alive` pipe closes.)"""
    for writer in list(_open_writers):
        with contextlib.suppress(OSError, ValueError):
            writer._finish()


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


def _start_fork_server_deaf_to_the_group() -> None:
    """Start the writers' fork server (once) ignoring SIGINT and SIGTERM from its first
    instruction: a Ctrl-C or scancel to the job's group while it imports its preload (about
    a second) killed it before multiprocessing's forkserver.main ignores SIGINT, and the run
    ended in an EOFError. An ignored signal stays ignored across exec; here both are blocked
    meanwhile, so one that reaches this process is delivered once its handler is back (Linux
    never discards a blocked signal as ignored). Only the main thread may set handlers."""
    if threading.current_thread() is not threading.main_thread():
        return
    group = (signal.SIGINT, signal.SIGTERM)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, group)
    handlers = {sig: signal.getsignal(sig) for sig in group}
    try:
        for sig in group:
            signal.signal(sig, signal.SIG_IGN)
        multiprocessing.forkserver.ensure_running()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _writer_context() -> Any:
    """Writer processes forked from a server process that has imported this module (and
    numpy, the record builder) once: the first costs a fresh interpreter's start (~0.6 s of
    CPU, before the scored requests), each later one in the same process a fork. Never a
    plain fork of this process: its threads (the sampler's, aiohttp's resolver) could hold
    locks the child would inherit held. The server ignores SIGTERM (`writer_server`) and
    ends when this process does."""
    global _exit_hook_registered
    mp = multiprocessing.get_context("forkserver")
    mp.set_forkserver_preload(["thetalker.client.writer_server", __name__])
    if not _exit_hook_registered:
        atexit.register(_close_unclosed_writers)
        _exit_hook_registered = True
    return mp


_exit_hook_registered = False
