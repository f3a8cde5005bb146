"""Audio containers the server writes and reads: WAV headers, FLAC, and WAV duration.

Kept inside the server package so that it needs nothing but the standard library (and
`soundfile`, optionally, for FLAC).
"""

from __future__ import annotations

import io
import struct

__all__ = [
    "STREAMING_SIZE",
    "AudioFormatError",
    "wav_header",
    "wav_bytes",
    "flac_bytes",
    "flac_available",
    "wav_duration_s",
]

# A streamed WAV cannot know its length: RIFF and data sizes are this, as vllm-omni writes them.
STREAMING_SIZE = 0xFFFFFFFF


class AudioFormatError(ValueError):
    """An audio file the server cannot read (message says why)."""


def wav_header(sample_rate: int, data_bytes: int = STREAMING_SIZE, channels: int = 1) -> bytes:
    """The 44-byte RIFF header of s16le PCM; `data_bytes` defaults to the streaming marker."""
    riff_size = STREAMING_SIZE if data_bytes == STREAMING_SIZE else 36 + data_bytes
    block_align = 2 * channels
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        riff_size,
        b"WAVE",
        b"fmt ",
        16,
        1,  # PCM
        channels,
        sample_rate,
        sample_rate * block_align,
        block_align,
        16,
        b"data",
        data_bytes,
    )


def wav_bytes(pcm: bytes, sample_rate: int) -> bytes:
    """A complete mono s16le WAV file."""
    return wav_header(sample_rate, len(pcm)) + pcm


def flac_available() -> bool:
    """FLAC needs the optional `soundfile` package (bundles libsndfile)."""
    try:
        import soundfile  # noqa: F401
    except (ImportError, OSError):
        return False
    return True


def flac_bytes(pcm: bytes, sample_rate: int) -> bytes:
    """A mono 16-bit FLAC file of the PCM (needs `soundfile`)."""
    import numpy as np
    import soundfile

    samples = np.frombuffer(pcm, dtype="<i2")
    out = io.BytesIO()
    soundfile.write(out, samples, sample_rate, format="FLAC", subtype="PCM_16")
    return out.getvalue()


def wav_duration_s(data: bytes) -> float:
    """Duration of a RIFF/WAVE file from its `fmt ` and `data` chunks (any PCM/float layout)."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise AudioFormatError("not a WAV file (no RIFF/WAVE header)")
    pos = 12
    byte_rate = None
    data_size = None
    while pos + 8 <= len(data):
        chunk_id = data[pos : pos + 4]
        (size,) = struct.unpack_from("<I", data, pos + 4)
        body = pos + 8
        if chunk_id == b"fmt ":
            if size < 16 or body + 16 > len(data):
                raise AudioFormatError("WAV fmt chunk too short")
            _fmt, channels, rate, rate_bytes, block_align, _bits = struct.unpack_from(
                "<HHIIHH", data, body
            )
            if channels < 1 or rate < 1 or block_align < 1:
                raise AudioFormatError("WAV fmt chunk has zero channels, rate or block size")
            byte_rate = rate * block_align
        elif chunk_id == b"data":
            # A streamed header says 0xFFFFFFFF: the real size is what is there.
            data_size = min(size, len(data) - body)
            break
        pos = body + size + (size & 1)
    if byte_rate is None:
        raise AudioFormatError("WAV file has no fmt chunk")
    if data_size is None:
        raise AudioFormatError("WAV file has no data chunk")
    return data_size / byte_rate
