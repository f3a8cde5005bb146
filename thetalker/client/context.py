"""What building a record needs besides the exchange, shared by the HTTP and WebSocket
records: the run's context, the identity and figure fields every record has, saved audio,
and the sink a finished exchange goes to (its interface only; `sinks` implements it)."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from thetalker import metrics
from thetalker.backends import ServerApi
from thetalker.client.exchange import Exchange
from thetalker.client.options import BenchOptions, server_api
from thetalker.data.records import RequestFigures, error_info
from thetalker.data.wavio import write_wav

__all__ = ["RunContext", "RecordSink", "identity_fields", "figures_of", "saved_audio"]


@dataclass
class RunContext:
    """What building a record needs besides the exchange (picklable: it crosses to the
    writer process and to workers)."""

    opts: BenchOptions
    # The server's API, resolved once for the run (picklable: its callables are module
    # functions, so it crosses to the writer and the workers with the context).
    api: ServerApi
    out_dir: Path
    t_origin: float  # perf_counter at the run's start: perf_counter is system-wide on Linux
    sample_rate: int = 0
    save_dir: Path | None = None
    save_below_index: int | None = None  # save audio of requests with a smaller index only

    @classmethod
    def for_run(
        cls,
        opts: BenchOptions,
        out_dir: Path,
        t_origin: float,
        sample_rate: int = 0,
        api: ServerApi | None = None,
    ) -> RunContext:
        """The run's context; `api`: the run's resolved API (None: the one `opts.server`
        names). Where audio goes: `save_audio_dir`, only the first `save_audio_count` scored
        requests by sending order (indices after the warmup's)."""
        save_dir = Path(opts.save_audio_dir) if opts.save_audio_dir is not None else None
        below = None
        if save_dir is not None and opts.save_audio_count is not None:
            below = opts.warmup + opts.save_audio_count
        return cls(opts, api or server_api(opts), out_dir, t_origin, sample_rate, save_dir, below)


# Longest sample_id part of a saved audio file's name: far below a file system's 255 bytes.
AUDIO_NAME_ID_CHARS = 64


def audio_file_name(request_index: int, sample_id: str) -> str:
    """`{index:05d}_{id}.wav`, the id's characters other than `A-Za-z0-9._-` as `_`; an id
    longer than AUDIO_NAME_ID_CHARS is cut and given a hash of the whole id, so any id
    makes a valid, distinct name (the record keeps the full id)."""
    safe_id = re.sub(r"[^A-Za-z0-9._-]", "_", sample_id)
    if len(safe_id) > AUDIO_NAME_ID_CHARS:
        digest = hashlib.sha256(sample_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        safe_id = f"{safe_id[:AUDIO_NAME_ID_CHARS]}-{digest}"
    return f"{request_index:05d}_{safe_id}.wav"


def audio_file(ctx: RunContext, ex: Exchange) -> Path:
    assert ctx.save_dir is not None
    return ctx.save_dir / audio_file_name(ex.request_index, ex.prompt.sample_id)


def identity_fields(ex: Any) -> dict[str, Any]:
    """Which request a record is: the fields every record starts with, HTTP or WebSocket."""
    return {
        "request_index": ex.request_index,
        "sample_id": ex.prompt.sample_id,
        "text": ex.prompt.text,
        "text_chars": len(ex.prompt.text),
        "warmup": ex.warmup,
    }


def exchange_fields(
    ctx: RunContext,
    ex: Any,
    failure: tuple[str, str] | None,
    status: int | None,
    t_send: float,
    sent_s: float | None,
    arrivals: list[float],
    sizes: list[int],
    figures: RequestFigures,
    audio_path: str | None,
) -> dict[str, Any]:
    """The record fields an HTTP and a WebSocket exchange fill alike: which request, whether
    it failed and why, when it was sent (`sent_s`: its request out, from `t_send`), its
    chunks and figures, its saved audio."""
    return {
        **identity_fields(ex),
        "ok": failure is None,
        "error": None if failure is None else error_info(failure[0], failure[1], status),
        "http_status": status,
        "t_submit_s": t_send - ctx.t_origin,
        "schedule_lag_s": (t_send - ex.scheduled) if ex.scheduled is not None else None,
        "request_sent_s": sent_s,
        "ttfa_from_sent_s": metrics.first_byte_from_sent_s(figures.ttfa_s, sent_s),
        "wall_s": (ex.t_end or t_send) - t_send,
        "chunk_arrival_s": arrivals,
        "chunk_bytes": sizes,
        "sample_rate": ctx.sample_rate,
        **figures.fields(),
        "audio_path": audio_path,
    }


def figures_of(
    arrivals: list[float],
    sizes: list[int],
    pcm: bytes,
    rate: int,
    threshold_s: float,
    ok: bool,
    read_arrival_s: list[float] | None = None,
    read_bytes: list[int] | None = None,
    onset: metrics.OnsetSettings = metrics.DEFAULT_ONSET,
) -> RequestFigures:
    """The per-request figures of a timeline (thetalker.metrics), from the reads when there
    are any, the audible onset by `onset` (the run's `BenchOptions.onset`); a failed request
    is never continuous, since a player could not have played it."""
    figures = RequestFigures.from_metrics(
        metrics.request_metrics(
            arrivals,
            sizes,
            pcm,
            rate,
            threshold_s,
            read_arrival_s=read_arrival_s,
            read_bytes=read_bytes,
            onset=onset,
        )
    )
    return figures if ok else dataclasses.replace(figures, continuity_ok=False)


def saved_audio(ctx: RunContext, ex: Exchange, ok: bool, pcm: bytes, rate: int) -> str | None:
    """Write a scored, successful request's audio when the run saves it; its shown path.

    Audio that cannot be written (a full disk) costs the audio, never the record: a warning
    names the file and why, the record is kept with no `audio_path` (the quality stage then
    names the record as one whose audio was not saved), and no partial file is left."""
    wanted = ctx.save_below_index is None or ex.request_index < ctx.save_below_index
    if not (ok and not ex.warmup and ctx.save_dir is not None and wanted):
        return None
    path = audio_file(ctx, ex)
    try:
        return display_path(write_wav(path, pcm, rate), ctx.out_dir)
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        print(
            f"warning: {path}: saving the audio of request {ex.request_index} failed: {why};"
            " its record kept without audio_path",
            file=sys.stderr,
            flush=True,
        )
        return None


def display_path(path: Path, out_dir: Path) -> str:
    """Relative to the out dir when the audio lies inside it (the run folder can move),
    else absolute."""
    path, out_dir = path.resolve(), out_dir.resolve()
    try:
        return str(path.relative_to(out_dir))
    except ValueError:
        return str(path)


class RecordSink(Protocol):
    """Where a run's exchanges go. `put` never blocks the event loop; `close` returns every
    record, sorted by `request_index`, and raises BenchError if writing failed.

    `on_failure`, when set, is called (from the writer's thread) once, at the first failed
    write: the run stops the point there rather than send requests whose records are lost.
    Nothing is written after that failure."""

    on_failure: Callable[[str], None] | None

    def put(self, ex: Exchange | dict[str, Any]) -> None: ...

    def wait_ready(self) -> None:
        """Block until the sink can take records without costing the receive loop; call it
        when nothing is in flight."""

    def close(self) -> list[dict[str, Any]]: ...
