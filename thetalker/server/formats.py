"""Audio containers the server writes and reads: WAV headers, FLAC, and WAV duration.

WAV headers come from `thetalker.data.wavio` (the client parses what the server writes with the
same module); FLAC needs `soundfile`, optionally.
"""

from __future__ import annotations

import io
import struct

from thetalker.data.wavio import STREAMING_SIZE, build_wav_header, iter_wav_chunks, wav_bytes

__all__ = [
    "STREAMING_SIZE",
    "AudioFormatError",
    "wav_header",
    "wav_bytes",
    "flac_bytes",
    "flac_available",
    "wav_duration_s",
]


class AudioFormatError(ValueError):
    """An audio file the server cannot read (message says why)."""


def wav_header(sample_rate: int, data_bytes: int | None = None, channels: int = 1) -> bytes:
    """The 44-byte RIFF header of s16le PCM; no `data_bytes` writes the streaming sizes
    (0xFFFFFFFF, as vllm-omni does). One implementation, shared with the client."""
    return build_wav_header(sample_rate, data_bytes, channels)


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
    byte_rate = None
    data_size = None
    for chunk_id, body, size in iter_wav_chunks(data):
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
    if byte_rate is None:
        raise AudioFormatError("WAV file has no fmt chunk")
    if data_size is None:
        raise AudioFormatError("WAV file has no data chunk")
    return data_size / byte_rate
