"""Speak a long text fast: split it into sentences, send them in parallel, join the audio.

    python examples/run_long_text.py --ref-audio reference/ref.wav \
        --ref-text "$(cat reference/ref.txt)" --text-file chapter.txt \
        --concurrency 8 --out chapter.wav [--compare-sequential]
    python examples/run_long_text.py --port 8091 --voice joe --text-file chapter.txt  # local

The server and voice options are run_streaming.py's (`--host`/`--port` or `--base-url`,
`--voice`, `--speaker`, `--ref-audio`/`--ref-text`, `--sample-rate`). The text (`--text-file`,
or `--text`) is split with `thetalker.util.text.split_sentences` (abbreviations, decimals,
quotes, ellipses; over-long sentences cut at a clause boundary). All parts are sent at once,
at most `--concurrency` in flight, in text order; the audio is joined in text order whatever
order the parts finish in.

It prints one row per part (index, characters, first byte and done, both counted from the
start of the run, audio seconds), then the run: parts and concurrency, total wall time,
total audio, the first audio byte (when a listener could start), and the sequential upper
bound (the sum of the parts' own request times, measured while they competed for the
server: one part after another would take no longer), or with `--compare-sequential` a
measured second pass that sends the same parts one after another.

A failed part is reported in its row, left out of the audio, and makes the exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from run_streaming import (
    StreamResult,
    add_voice_arguments,
    check_voice_arguments,
    options_from_args,
    request_body,
    stream_speech,
)

from thetalker.client import BenchOptions
from thetalker.data.wavio import wav_data_uri, write_wav
from thetalker.metrics import bytes_per_second
from thetalker.util.text import DEFAULT_MAX_CHARS, split_sentences

__all__ = [
    "PartResult",
    "RunResult",
    "speak_parts",
    "join_audio",
    "format_rows",
    "format_summary",
    "main",
]


@dataclass
class PartResult:
    index: int
    text: str
    t_start_s: float  # when it was sent, since the run started
    stream: StreamResult


@dataclass
class RunResult:
    parts: list[PartResult]
    wall_s: float

    @property
    def failed(self) -> list[PartResult]:
        return [p for p in self.parts if not p.stream.ok]


async def speak_parts(texts: list[str], opts: BenchOptions, concurrency: int) -> RunResult:
    """Send every part (at most `concurrency` at once, in text order); results in text order."""
    limit = asyncio.Semaphore(concurrency)
    ref_audio_uri = wav_data_uri(opts.ref_audio) if opts.ref_audio else None  # read once
    t_run = time.perf_counter()

    async def one(session: aiohttp.ClientSession, index: int, text: str) -> PartResult:
        async with limit:
            t_start = time.perf_counter() - t_run
            body = request_body(opts, text, ref_audio_uri)
            stream = await stream_speech(
                session, opts.base_url, body, opts.sample_rate, opts.timeout_s
            )
            return PartResult(index, text, t_start, stream)

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        parts = await asyncio.gather(*(one(session, i, t) for i, t in enumerate(texts)))
    return RunResult(list(parts), time.perf_counter() - t_run)


def join_audio(run: RunResult) -> tuple[bytes, int | None]:
    """The successful parts' PCM in text order, and their common sample rate."""
    ok = [p for p in run.parts if p.stream.ok]
    rates = {p.stream.sample_rate for p in ok}
    if len(rates) > 1:
        raise ValueError(f"parts came back at different sample rates: {sorted(rates)}")
    return b"".join(p.stream.pcm for p in ok), (rates.pop() if rates else None)


def _audio_s(stream: StreamResult) -> float:
    if not stream.sample_rate:
        return 0.0
    return sum(stream.chunk_bytes) / bytes_per_second(stream.sample_rate)


def format_rows(run: RunResult) -> list[str]:
    """One row per part: index, characters, first byte and done (since the run started)."""
    lines = [f"{'part':>4}  {'chars':>5}  {'first byte':>10}  {'done':>9}  {'audio':>7}  text"]
    for p in run.parts:
        s = p.stream
        preview = p.text if len(p.text) <= 48 else p.text[:45] + "..."
        if s.ok:
            first = f"{p.t_start_s + s.chunk_arrival_s[0]:.3f} s"
            done = f"{p.t_start_s + s.wall_s:.3f} s"
            lines.append(
                f"{p.index + 1:>4}  {len(p.text):>5}  {first:>10}  {done:>9}  "
                f"{_audio_s(s):>5.2f} s  {preview}"
            )
        else:
            lines.append(f"{p.index + 1:>4}  {len(p.text):>5}  FAILED ({s.error})  {preview}")
    return lines


def format_summary(run: RunResult, concurrency: int, sequential: RunResult | None) -> list[str]:
    """The run: parts, wall time, audio, first audio byte, and the sequential time."""
    ok = [p for p in run.parts if p.stream.ok]
    failed = f", {len(run.failed)} failed" if run.failed else ""
    audio = sum(_audio_s(p.stream) for p in ok)
    first = min((p.t_start_s + p.stream.chunk_arrival_s[0] for p in ok), default=None)
    lines = [
        f"parts                  : {len(run.parts)} at concurrency {concurrency}{failed}",
        f"total wall time        : {run.wall_s:.3f} s",
        f"total audio            : {audio:.2f} s",
        "first audio byte       : "
        + (f"{first:.3f} s" if first is not None else "- (every part failed)"),
    ]
    if sequential is None:
        upper = sum(p.stream.wall_s for p in run.parts)
        lines.append(
            f"sequential upper bound : {upper:.3f} s (sum of the parts' request times, measured "
            "while they competed; --compare-sequential measures it)"
        )
    elif sequential.failed:  # a pass whose parts died fast is no comparison
        lines.append(
            f"sequential wall time   : not comparable, {len(sequential.failed)} of "
            f"{len(sequential.parts)} parts failed in the sequential pass"
        )
    else:
        speedup = sequential.wall_s / run.wall_s if run.wall_s > 0 else float("nan")
        lines.append(
            f"sequential wall time   : {sequential.wall_s:.3f} s (measured, one part after "
            f"another: {speedup:.2f}x the parallel wall time)"
        )
    return lines


def _read_text(parser: argparse.ArgumentParser, path: Path) -> str:
    try:
        return sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    except OSError as exc:
        parser.error(f"--text-file {path}: {exc.strerror}")
    except UnicodeDecodeError:
        parser.error(f"--text-file {path}: not UTF-8 text")
    raise AssertionError("unreachable")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Split a long text, speak it in parallel.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--text-file", type=Path, help="UTF-8 text; - for stdin")
    source.add_argument("--text", help="the text itself")
    parser.add_argument("--out", type=Path, default=Path("long_text.wav"), help="joined WAV")
    parser.add_argument("--concurrency", type=int, default=8, help="parts in flight at once")
    parser.add_argument("--max-chars", type=int, default=DEFAULT_MAX_CHARS, help="longest part")
    parser.add_argument(
        "--compare-sequential", action="store_true", help="also time a one-at-a-time pass"
    )
    add_voice_arguments(parser)
    args = parser.parse_args(argv)
    check_voice_arguments(parser, args)
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    if args.max_chars < 1:
        parser.error("--max-chars must be at least 1")
    text = args.text if args.text is not None else _read_text(parser, args.text_file)
    parts = split_sentences(text, max_chars=args.max_chars)
    if not parts:
        parser.error(f"--text-file {args.text_file}: no text to speak" if args.text_file
                     else "--text: no text to speak")  # fmt: skip
    opts = options_from_args(args)

    run = asyncio.run(speak_parts(parts, opts, args.concurrency))
    print("\n".join(format_rows(run)))
    for p in run.failed:
        print(
            f"error: part {p.index + 1} failed and is left out: {p.stream.error}", file=sys.stderr
        )
    try:
        pcm, rate = join_audio(run)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if pcm and rate:
        write_wav(args.out, pcm, rate)
        print(f"wrote {args.out} ({len(run.parts) - len(run.failed)} parts in text order)")
    else:
        print("wrote nothing: every part failed")
    sequential = asyncio.run(speak_parts(parts, opts, 1)) if args.compare_sequential else None
    print("\n".join(format_summary(run, args.concurrency, sequential)))
    return 1 if run.failed or (sequential is not None and sequential.failed) else 0


if __name__ == "__main__":
    sys.exit(main())
