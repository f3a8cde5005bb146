"""One streamed speech request, saved as a WAV, then what a listener would have heard.

    python examples/run_streaming.py --base-url http://127.0.0.1:8091 \
        --text "Hello there. This is a streamed answer." --out hello.wav

The request asks for a raw audio stream in `wav` format, so the server's 44-byte header
states the sample rate (a `pcm` stream carries none: pass `--format pcm --sample-rate`).
Each server chunk is stamped when its last byte arrives (aiohttp's `iter_chunks()`), and
every figure printed comes from `thetalker.metrics`, the same code the benchmark uses:

- first byte: when the first audio arrived;
- audible: when a real-time player that starts at the first byte would play the first
  loud sample, and how much silence the model put before it;
- longest gap between two chunk arrivals;
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
from thetalker.wavio import (
    WAV_HEADER_BYTES,
    WavError,
    parse_wav_header,
    wav_data_uri,
    write_wav,
)

__all__ = ["StreamResult", "build_body", "stream_speech", "describe_playback", "main"]

SPEECH_PATH = "/v1/audio/speech"


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


def build_body(
    text: str,
    *,
    response_format: str = "wav",
    model: str | None = None,
    speaker: str | None = "joe",
    task_type: str = "CustomVoice",
    language: str = "English",
    ref_audio: str | Path | None = None,
    ref_text: str | None = None,
) -> dict[str, Any]:
    """The request body of the benchmark (docs/speech-api.md), raw audio stream."""
    body: dict[str, Any] = {
        "input": text,
        "task_type": task_type,
        "language": language,
        "stream": True,
        "stream_format": "audio",
        "response_format": response_format,
    }
    if model:
        body["model"] = model
    if ref_audio is not None:
        body["ref_audio"] = wav_data_uri(ref_audio)
        if ref_text:
            body["ref_text"] = ref_text
    elif speaker:
        body["speaker"] = speaker
    return body


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
    return result


def describe_playback(result: StreamResult, threshold_s: float) -> list[str]:
    """What a listener would have heard, as printable lines (figures from metrics)."""
    assert result.sample_rate is not None
    figures = metrics.request_figures(
        result.chunk_arrival_s, result.chunk_bytes, result.pcm, result.sample_rate, threshold_s
    )
    arrivals = result.chunk_arrival_s
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    longest = max(gaps, default=0.0)
    where = f" (before chunk {gaps.index(longest) + 2})" if gaps else " (one chunk)"
    lines = [
        f"audio          {figures['audio_s']:.2f} s at {result.sample_rate} Hz in "
        f"{len(arrivals)} chunks, {result.wall_s:.3f} s wall",
        f"first byte     {figures['ttfa_s']:.3f} s",
        f"audible        {figures['ttfa_audible_s']:.3f} s "
        f"(leading silence {figures['leading_silence_s']:.3f} s)",
        f"longest gap    {longest:.3f} s{where}",
    ]
    underrun = figures["max_underrun_s"]
    if figures["continuity_ok"]:
        lines.append(
            f"player         no stall (worst underrun {underrun:.3f} s <= {threshold_s} s)"
        )
    else:
        lines.append(
            f"player         WOULD HAVE STALLED: worst underrun {underrun:.3f} s "
            f"(> {threshold_s} s), {figures['stalls']} stall(s), {figures['stall_s']:.3f} s silent"
        )
    return lines


def add_voice_arguments(parser: argparse.ArgumentParser) -> None:
    """Server and voice options shared with run_long_text.py."""
    parser.add_argument("--base-url", default="http://127.0.0.1:8091", help="no trailing /v1")
    parser.add_argument("--model", default=None, help="served model name (sent when set)")
    parser.add_argument("--speaker", default="joe", help="preset voice (Qwen3-TTS: ryan, ...)")
    parser.add_argument("--task-type", default=None, help="default CustomVoice, Base with a clip")
    parser.add_argument("--language", default="English")
    parser.add_argument("--ref-audio", type=Path, default=None, help="clone this WAV (Base)")
    parser.add_argument("--ref-text", default=None, help="transcript of --ref-audio")
    parser.add_argument("--format", choices=("wav", "pcm"), default="wav", dest="response_format")
    parser.add_argument("--sample-rate", type=int, default=None, help="needed with --format pcm")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    parser.add_argument("--threshold", type=float, default=metrics.CONTINUITY_THRESHOLD_S)


def body_from_args(args: argparse.Namespace, text: str) -> dict[str, Any]:
    task_type = args.task_type or ("Base" if args.ref_audio else "CustomVoice")
    return build_body(
        text,
        response_format=args.response_format,
        model=args.model,
        speaker=args.speaker,
        task_type=task_type,
        language=args.language,
        ref_audio=args.ref_audio,
        ref_text=args.ref_text,
    )


def check_voice_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.response_format == "pcm" and not args.sample_rate:
        parser.error("--format pcm needs --sample-rate (a pcm stream does not state its rate)")
    if args.ref_audio is not None and not args.ref_audio.is_file():
        parser.error(f"--ref-audio: no such file: {args.ref_audio}")


async def _run(args: argparse.Namespace, text: str) -> int:
    body = body_from_args(args, text)
    async with aiohttp.ClientSession() as session:
        result = await stream_speech(session, args.base_url, body, args.sample_rate, args.timeout)
    if not result.ok:
        print(f"error: {result.error}", file=sys.stderr)
        return 1
    assert result.sample_rate is not None
    write_wav(args.out, result.pcm, result.sample_rate)
    print(f"wrote {args.out}")
    print("\n".join(describe_playback(result, args.threshold)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="One streamed request and what a player heard.")
    text = parser.add_mutually_exclusive_group(required=True)
    text.add_argument("--text", help="what to say")
    text.add_argument("--text-file", type=Path, help="read what to say from this file")
    parser.add_argument("--out", type=Path, default=Path("stream.wav"), help="WAV to write")
    add_voice_arguments(parser)
    args = parser.parse_args(argv)
    check_voice_arguments(parser, args)
    if args.text_file is not None:
        try:
            content = args.text_file.read_text(encoding="utf-8")
        except OSError as exc:
            parser.error(f"--text-file {args.text_file}: {exc.strerror}")
    else:
        content = args.text
    if not content.strip():
        parser.error("the text is empty")
    return asyncio.run(_run(args, content.strip()))


if __name__ == "__main__":
    sys.exit(main())
