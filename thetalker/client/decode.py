"""From the raw pieces of a body to audio chunks: server chunks, SSE events, WAV header."""

from __future__ import annotations

import base64
import bisect
import re
from collections.abc import Sequence

from thetalker.client.events import BadEvent, load_event, short_text
from thetalker.client.receive import MAX_RESPONSE_READS, too_many
from thetalker.data.wavio import WavError, parse_wav_header

__all__ = ["server_chunks", "sse_chunks", "strip_wav_header", "drop_front"]


def server_chunks(
    times: Sequence[float], pieces: Sequence[bytes], ends: Sequence[bool]
) -> tuple[list[float], list[int]]:
    """Group pieces into the server's chunks; a chunk arrives with its last piece. A body
    without chunk ends (Content-Length) is one chunk."""
    arrivals: list[float] = []
    sizes: list[int] = []
    pending = 0
    for t, data, end in zip(times, pieces, ends, strict=True):
        pending += len(data)
        if end:
            arrivals.append(t)
            sizes.append(pending)
            pending = 0
    if pending:
        arrivals.append(times[-1])
        sizes.append(pending)
    return arrivals, sizes


_SSE_EVENT_END = re.compile(rb"\r?\n\r?\n")


def sse_chunks(
    times: Sequence[float],
    pieces: Sequence[bytes],
    error_events: Sequence[str] = ("speech.audio.error",),
) -> tuple[list[float], list[bytes], tuple[str, str] | None]:
    """Audio of each `speech.audio.delta` event and when its last byte arrived; a failure
    for an error event (`error_events`: the server's types, vllm-omni's
    `speech.audio.error`, sglang-omni's `error`), an event that cannot be read
    (`bad_event`), more audio events than `MAX_RESPONSE_READS` (`too_large`: each costs
    what a read does), or a stream that ended without `speech.audio.done`."""
    buf = b"".join(pieces)
    piece_ends: list[int] = []
    total = 0
    for data in pieces:
        total += len(data)
        piece_ends.append(total)
    arrivals: list[float] = []
    audio: list[bytes] = []
    start = 0
    for match in _SSE_EVENT_END.finditer(buf):
        event, start_next = buf[start : match.start()], match.end()
        when = times[bisect.bisect_left(piece_ends, match.end())]
        start = start_next
        data = b"\n".join(
            line[5:].strip() for line in event.splitlines() if line.startswith(b"data:")
        )
        if not data or data == b"[DONE]":
            continue
        try:
            payload = load_event(data)
        except BadEvent as exc:
            return arrivals, audio, ("bad_event", str(exc))
        kind = payload.get("type") if isinstance(payload, dict) else None
        if kind == "speech.audio.delta":
            try:
                chunk = base64.b64decode(payload.get("audio") or "", validate=True)
            except ValueError:
                return arrivals, audio, ("sse_error", "speech.audio.delta: audio is not base64")
            if chunk:
                if len(audio) >= MAX_RESPONSE_READS:
                    return arrivals, audio, ("too_large", too_many(MAX_RESPONSE_READS, "events"))
                arrivals.append(when)
                audio.append(chunk)
        elif kind == "speech.audio.done":
            return arrivals, audio, None
        elif kind in error_events:
            err = payload.get("error")
            if isinstance(err, dict) and isinstance(err.get("error"), dict):
                err = err["error"]
            message = err.get("message") if isinstance(err, dict) else err
            return arrivals, audio, ("sse_error", short_text(message or f"{kind} event"))
    return arrivals, audio, ("truncated", "SSE stream ended without speech.audio.done")


def strip_wav_header(
    sizes: list[int], arrivals: list[float], pcm: bytes, sample_rate: int
) -> tuple[list[float], list[int], bytes, tuple[str, str] | None]:
    """Drop the RIFF header from the front of a `wav` stream, checking its rate."""
    try:
        info = parse_wav_header(pcm[:4096], source="stream")
    except WavError as exc:
        return arrivals, sizes, pcm, ("content_type", f"response_format wav: {exc}")
    failure = None
    if info.sample_rate != sample_rate:
        why = f"WAV header says {info.sample_rate} Hz, the run uses {sample_rate} Hz"
        failure = ("content_type", why)
    arrivals, sizes = drop_front(arrivals, sizes, info.data_offset)
    return arrivals, sizes, pcm[info.data_offset :], failure


def drop_front(
    arrivals: Sequence[float], sizes: Sequence[int], skip: int
) -> tuple[list[float], list[int]]:
    """A timeline without its first `skip` bytes (a WAV header): entries left empty go."""
    arrivals, sizes = list(arrivals), list(sizes)
    while skip and sizes:
        take = min(skip, sizes[0])
        sizes[0] -= take
        skip -= take
        if sizes[0] == 0:
            del sizes[0], arrivals[0]
    return arrivals, sizes
