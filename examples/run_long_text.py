"""Speak a long text fast: split it into sentences, send them in parallel, join the audio.

    python examples/run_long_text.py --text-file chapter.txt --concurrency 4 \
        --out chapter.wav [--compare-sequential]

The text is split with `thetalker.text.split_sentences` (abbreviations, decimals, quotes,
ellipses; over-long sentences cut at a clause boundary). All parts are sent at once, at most
`--concurrency` in flight, in text order; the audio is joined in text order whatever order
the parts finish in. One row per part, then the run: wall time, audio, the first byte of the
first part (when a listener could start), and the sequential upper bound (the sum of the
parts' wall times: a one-at-a-time pass would take no longer, since each part ran under
load here). `--compare-sequential` also measures that pass.

A failed part is reported, left out of the audio, and makes the exit status 1.
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
    body_from_args,
    check_voice_arguments,
    stream_speech,
)

from thetalker.metrics import bytes_per_second
from thetalker.text import DEFAULT_MAX_CHARS, split_sentences
from thetalker.wavio import write_wav

__all__ = ["PartResult", "RunResult", "speak_parts", "join_audio", "format_report", "main"]


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


async def speak_parts(texts: list[str], args: argparse.Namespace, concurrency: int) -> RunResult:
    """Send every part (at most `concurrency` at once, in text order); results in text order."""
    limit = asyncio.Semaphore(concurrency)
    t_run = time.perf_counter()

    async def one(session: aiohttp.ClientSession, index: int, text: str) -> PartResult:
        async with limit:
            t_start = time.perf_counter() - t_run
            stream = await stream_speech(
                session, args.base_url, body_from_args(args, text), args.sample_rate, args.timeout
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


def format_report(run: RunResult) -> list[str]:
    lines = [f"{'part':>4}  {'chars':>5}  {'first byte':>10}  {'wall':>7}  {'audio':>7}  text"]
    for p in run.parts:
        s = p.stream
        first = f"{s.chunk_arrival_s[0]:.3f} s" if s.chunk_arrival_s else "-"
        status = "" if s.ok else f"FAILED ({s.error}) "
        preview = p.text if len(p.text) <= 48 else p.text[:45] + "..."
        lines.append(
            f"{p.index + 1:>4}  {len(p.text):>5}  {first:>10}  {s.wall_s:>5.3f} s  "
            f"{_audio_s(s):>5.2f} s  {status}{preview}"
        )
    ok = [p for p in run.parts if p.stream.ok]
    audio = sum(_audio_s(p.stream) for p in ok)
    first_part = run.parts[0] if run.parts else None
    first_byte = (
        f"{first_part.t_start_s + first_part.stream.chunk_arrival_s[0]:.3f} s"
        if first_part and first_part.stream.ok
        else "- (the first part failed)"
    )
    upper = sum(p.stream.wall_s for p in run.parts)
    lines += [
        f"run: {len(run.parts)} parts ({len(ok)} ok, {len(run.failed)} failed)",
        f"  wall time               {run.wall_s:.3f} s",
        f"  audio                   {audio:.2f} s",
        f"  first byte              {first_byte}",
        f"  sequential upper bound  {upper:.3f} s (sum of the parts' wall times)",
    ]
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
    parser.add_argument("--text-file", type=Path, required=True, help="UTF-8 text; - for stdin")
    parser.add_argument("--out", type=Path, default=Path("long_text.wav"), help="joined WAV")
    parser.add_argument("--concurrency", type=int, default=4, help="parts in flight at once")
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
    parts = split_sentences(_read_text(parser, args.text_file), max_chars=args.max_chars)
    if not parts:
        parser.error(f"--text-file {args.text_file}: no text to speak")

    run = asyncio.run(speak_parts(parts, args, args.concurrency))
    print("\n".join(format_report(run)))
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

    status = 1 if run.failed else 0
    if args.compare_sequential:
        sequential = asyncio.run(speak_parts(parts, args, 1))
        speedup = sequential.wall_s / run.wall_s if run.wall_s > 0 else float("nan")
        print(
            f"  sequential pass         {sequential.wall_s:.3f} s measured "
            f"({speedup:.2f}x the parallel wall time, {len(sequential.failed)} failed)"
        )
        status = 1 if sequential.failed else status
    return status


if __name__ == "__main__":
    sys.exit(main())
