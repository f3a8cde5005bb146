"""One streamed speech request, saved as a WAV, then what a listener would have heard.

    python examples/run_streaming.py --ref-audio reference/ref.wav \
        --ref-text "$(cat reference/ref.txt)" \
        --text "The quick brown fox jumps over the lazy dog." --out out.wav
    python examples/run_streaming.py --voice thetalker_ref --text "..." --out out.wav
    python examples/run_streaming.py --sample-rate "$(thetalker-deploy --sample-rate voxcpm2)" ...
    python examples/run_streaming.py --port 8091 --voice joe --text "Hello there."  # local

The voice: `--voice NAME` (an uploaded voice, or a built-in one), `--speaker NAME` (a
built-in speaker), or `--ref-audio` with `--ref-text` (cloning, task_type Base); with none
of them, the embedded server's speaker `joe`. The server: `--host`/`--port` (default
127.0.0.1:8091) or `--base-url`. The body is the benchmark's own
(`thetalker.client.build_request_body`), asking for a raw audio stream in `wav` format so
the server's 44-byte header states the sample rate (`--format pcm` needs `--sample-rate`;
with `wav`, a `--sample-rate` the header contradicts is an error). Each server chunk is
stamped when its last byte arrives (aiohttp's `iter_chunks()`), and every figure printed
comes from `thetalker.metrics`, the same code the benchmark uses:

- the file written, with its audio seconds and chunk count;
- TTFA first byte: when the first audio arrived;
- TTFA audible: when a real-time player that starts at the first byte would play the first
  loud sample, and how much silence the model put before it;
- the longest gap between two chunk arrivals;
- "no stall" or "WOULD HAVE STALLED", with the worst underrun (upstream's definition: the
  smallest prebuffer that would have avoided every underrun).

`stream_speech()` is reused by `run_long_text.py`. Exit status: 0 on success, 1 when the
request failed, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from thetalker import metrics
from thetalker.client import BenchOptions, OptionsError, build_request_body, validate_options
from thetalker.data.wavio import (
    WAV_HEADER_BYTES,
    WavError,
    parse_wav_header,
    wav_data_uri,
    write_wav,
)

__all__ = [
    "StreamResult",
    "add_voice_arguments",
    "options_from_args",
    "request_body",
    "stream_speech",
    "describe_playback",
    "main",
]

SPEECH_PATH = "/v1/audio/speech"
DEFAULT_TEXT = "The quick brown fox jumps over the lazy dog."
LOCAL_SPEAKER = "joe"  # the embedded server's one voice, used when no voice is given


@dataclass
class StreamResult:
    """One streamed request: the raw timeline and audio, or why it failed."""

    sample_rate: int | None = None
    chunk_arrival_s: list[float] = field(default_factory=list)  # since the request was sent
    chunk_bytes: list[int] = field(default_factory=list)
    pcm: bytes = b""
    wall_s: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.pcm)


async def stream_speech(
    session: aiohttp.ClientSession,
    base_url: str,
    body: dict[str, Any],
    sample_rate: int | None = None,
    timeout_s: float = 120.0,
) -> StreamResult:
    """Send one request and record each server chunk's arrival; never raises for the
    server's failures (they come back in `error`, with what arrived before them)."""
    result = StreamResult(sample_rate=sample_rate)
    wav = body.get("response_format") == "wav"
    header = bytearray()
    pcm = bytearray()
    t_send = time.perf_counter()
    try:
        async with session.post(
            base_url.rstrip("/") + SPEECH_PATH,
            json=body,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as response:
            if response.status != 200:
                result.error = f"HTTP {response.status}: {(await response.text())[:300]}"
                return result
            pending = 0  # bytes of the current server chunk seen so far
            header_left = WAV_HEADER_BYTES if wav else 0
            async for data, end_of_chunk in response.content.iter_chunks():
                if header_left:  # the header is not audio: keep it out of the timeline
                    header += data[:header_left]
                    data = data[header_left:]
                    header_left = WAV_HEADER_BYTES - len(header)
                    if not header_left:
                        result.sample_rate = parse_wav_header(bytes(header), "stream").sample_rate
                pcm += data
                pending += len(data)
                if end_of_chunk and pending:
                    # Stamp only: figures are computed after the stream (metrics.md).
                    result.chunk_arrival_s.append(time.perf_counter() - t_send)
                    result.chunk_bytes.append(pending)
                    pending = 0
            if pending:  # a body that ended without a chunk boundary (not chunked)
                result.chunk_arrival_s.append(time.perf_counter() - t_send)
                result.chunk_bytes.append(pending)
    except (aiohttp.ClientError, TimeoutError, WavError) as exc:
        result.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    result.wall_s = time.perf_counter() - t_send
    result.pcm = bytes(pcm)
    if result.error is None:
        if not result.pcm:
            result.error = "the response carried no audio"
        elif len(result.pcm) % 2:
            result.error = "the stream ended with half a sample"
        elif result.sample_rate is None:
            result.error = "unknown sample rate: use --format wav or pass --sample-rate"
        elif sample_rate and result.sample_rate != sample_rate:
            result.error = (
                f"the server streams {result.sample_rate} Hz, --sample-rate says {sample_rate}"
            )
    return result


def describe_playback(result: StreamResult, out: Path, threshold_s: float) -> list[str]:
    """What a listener would have heard, as printable lines (figures from metrics)."""
    assert result.sample_rate is not None
    figures = metrics.request_metrics(
        result.chunk_arrival_s, result.chunk_bytes, result.pcm, result.sample_rate, threshold_s
    )
    arrivals = result.chunk_arrival_s
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    if gaps:
        longest = max(gaps)
        gap = f"{longest:.3f} s (before chunk {gaps.index(longest) + 2})"
    else:
        gap = "n/a (one chunk)"
    underrun = figures["max_underrun_s"]
    if figures["continuity_ok"]:
        verdict = f"no stall (worst underrun {underrun:.3f} s, budget {threshold_s:.3f} s)"
    else:
        verdict = (
            f"WOULD HAVE STALLED: worst underrun {underrun:.3f} s (budget {threshold_s:.3f} s), "
            f"{figures['stalls']} stall(s), {figures['stall_s']:.3f} s silent"
        )
    return [
        f"wrote {out} ({figures['audio_s']:.2f} s of audio at {result.sample_rate} Hz "
        f"in {len(arrivals)} chunk{'' if len(arrivals) == 1 else 's'}, "
        f"{result.wall_s:.3f} s wall)",
        f"TTFA first byte : {figures['ttfa_s']:.3f} s",
        f"TTFA audible    : {figures['ttfa_audible_s']:.3f} s "
        f"(leading silence {figures['leading_silence_s']:.3f} s)",
        f"longest gap     : {gap}",
        f"playback        : {verdict}",
    ]


def add_voice_arguments(parser: argparse.ArgumentParser) -> None:
    """Server and voice options shared with run_long_text.py (the original's flags too)."""
    where = parser.add_argument_group("server")
    where.add_argument("--host", default="127.0.0.1")
    where.add_argument("--port", type=int, default=8091)
    where.add_argument("--base-url", default=None, help="e.g. http://h:8091 (overrides host/port)")
    where.add_argument("--model", default=None, help="served model name (sent when set)")
    voice = parser.add_argument_group("voice")
    voice.add_argument("--voice", default=None, help="an uploaded (or built-in) voice NAME")
    voice.add_argument("--speaker", default=None, help="built-in speaker (Qwen3-TTS: ryan, ...)")
    voice.add_argument("--ref-audio", type=Path, default=None, help="clone this WAV (Base)")
    voice.add_argument("--ref-text", default=None, help="transcript of --ref-audio")
    voice.add_argument(
        "--task-type", default=None, help="default: Base with --ref-audio, else CustomVoice"
    )
    voice.add_argument("--instruct", "--instructions", default=None, help="VoiceDesign style")
    voice.add_argument("--language", default="English")
    voice.add_argument("--max-new-tokens", type=int, default=None, help="cap on codec tokens")
    audio = parser.add_argument_group("audio")
    audio.add_argument(
        "--format", choices=("wav", "pcm"), default="wav", dest="response_format",
        help="wav (default): the header states the rate; pcm needs --sample-rate",
    )  # fmt: skip
    audio.add_argument(
        "--sample-rate", type=int, default=None,
        help="the model's rate (thetalker-deploy --sample-rate NAME); checked against wav",
    )  # fmt: skip
    audio.add_argument("--timeout", "--timeout-s", type=float, default=120.0, help="s/request")
    audio.add_argument(
        "--threshold", "--continuity-threshold-s", type=float,
        default=metrics.CONTINUITY_THRESHOLD_S, help="underrun budget, s (vllm-omni: 0.1)",
    )  # fmt: skip


def options_from_args(args: argparse.Namespace) -> BenchOptions:
    """The request's options in the benchmark's own terms (validated by the library)."""
    task_type = args.task_type or ("Base" if args.ref_audio else "CustomVoice")
    no_voice = not (args.voice or args.speaker or args.ref_audio)
    speaker = LOCAL_SPEAKER if no_voice and task_type == "CustomVoice" else args.speaker
    return BenchOptions(
        base_url=(args.base_url or f"http://{args.host}:{args.port}").rstrip("/"),
        model=args.model,
        task_type=task_type,
        speaker=speaker,
        voice=args.voice,
        ref_audio=str(args.ref_audio) if args.ref_audio else None,
        ref_text=args.ref_text,
        instructions=args.instruct,
        language=args.language or None,
        max_new_tokens=args.max_new_tokens,
        response_format=args.response_format,
        sample_rate=args.sample_rate,
        timeout_s=args.timeout,
        threshold_s=args.threshold,
    )


def check_voice_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors (exit 2) before anything is sent; the library names the bad field."""
    if args.response_format == "pcm" and not args.sample_rate:
        parser.error("--format pcm needs --sample-rate (a pcm stream does not state its rate)")
    if args.ref_audio is not None and not args.ref_audio.is_file():
        parser.error(f"--ref-audio: no such file: {args.ref_audio}")
    try:
        validate_options(options_from_args(args))
    except OptionsError as exc:
        parser.error(str(exc))


def request_body(opts: BenchOptions, text: str, ref_audio_uri: str | None = None) -> dict[str, Any]:
    """The benchmark's body for `text`; pass `ref_audio_uri` to read the clip once per run."""
    if opts.ref_audio and ref_audio_uri is None:
        ref_audio_uri = wav_data_uri(opts.ref_audio)
    return build_request_body(opts, text, ref_audio_uri)


async def _run(opts: BenchOptions, text: str, out: Path) -> int:
    async with aiohttp.ClientSession() as session:
        result = await stream_speech(
            session, opts.base_url, request_body(opts, text), opts.sample_rate, opts.timeout_s
        )
    if not result.ok:
        print(f"error: {result.error}", file=sys.stderr)
        return 1
    assert result.sample_rate is not None
    write_wav(out, result.pcm, result.sample_rate)
    print("\n".join(describe_playback(result, out, opts.threshold_s)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="One streamed request and what a player heard.")
    text = parser.add_mutually_exclusive_group()
    text.add_argument("--text", default=None, help=f"what to say (default: {DEFAULT_TEXT!r})")
    text.add_argument("--text-file", type=Path, help="read what to say from this file")
    parser.add_argument("--out", type=Path, default=Path("out.wav"), help="WAV to write")
    add_voice_arguments(parser)
    args = parser.parse_args(argv)
    check_voice_arguments(parser, args)
    if args.text_file is not None:
        try:
            content = args.text_file.read_text(encoding="utf-8")
        except OSError as exc:
            parser.error(f"--text-file {args.text_file}: {exc.strerror}")
    else:
        content = DEFAULT_TEXT if args.text is None else args.text
    if not content.strip():
        parser.error("the text is empty")
    return asyncio.run(_run(options_from_args(args), content.strip(), args.out))


if __name__ == "__main__":
    sys.exit(main())
