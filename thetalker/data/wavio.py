"""WAV files as the speech API uses them: 16-bit PCM in a RIFF container.

A streamed `wav` response starts with a 44-byte header whose size fields are 0xFFFFFFFF
(the length is unknown when it is sent); its sample rate (offset 24) and channel count
(offset 22) are the only reliable statement of a server's rate, which is why the client
reads them. Stdlib only.
"""

from __future__ import annotations

import base64
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "WAV_HEADER_BYTES",
    "STREAMING_SIZE",
    "WavError",
    "WavInfo",
    "iter_wav_chunks",
    "parse_wav_header",
    "build_wav_header",
    "wav_bytes",
    "write_wav",
    "read_wav",
    "wav_seconds",
    "check_reference_clip",
    "REFERENCE_CLIP_S",
    "wav_data_uri",
]

WAV_HEADER_BYTES = 44
# Size value a streaming server writes when it does not know the length yet.
STREAMING_SIZE = 0xFFFFFFFF


class WavError(ValueError):
    """Bytes that are not a WAV this project can read; the message says what is wrong."""


@dataclass(frozen=True)
class WavInfo:
    sample_rate: int
    channels: int
    bits_per_sample: int
    data_offset: int  # where the PCM starts in the file
    data_bytes: int | None  # None when the header says "unknown" (streaming)


def iter_wav_chunks(buf: bytes) -> Iterator[tuple[bytes, int, int]]:
    """(chunk id, offset of its body, its size) for each chunk of a RIFF/WAVE buffer after
    the 12-byte RIFF header, in order; stops at a streamed (unknown) size or the buffer's
    end. The one chunk walker of the project: the header parser and the server's voice
    upload check both use it."""
    pos = 12
    while pos + 8 <= len(buf):
        (size,) = struct.unpack_from("<I", buf, pos + 4)
        yield buf[pos : pos + 4], pos + 8, size
        if size == STREAMING_SIZE:
            return
        pos += 8 + size + (size & 1)  # chunks are word aligned


def parse_wav_header(buf: bytes, source: str = "wav") -> WavInfo:
    """Read the format and the position of the data from a RIFF/WAVE buffer.

    Walks the chunk list, so headers longer than 44 bytes (LIST chunks) work; `buf` may be
    just the header. Raises WavError naming `source` for anything else.
    """
    if len(buf) < 12 or buf[:4] != b"RIFF" or buf[8:12] != b"WAVE":
        raise WavError(f"{source}: not a RIFF/WAVE header")
    fmt: tuple[int, int, int, int] | None = None
    for chunk_id, body, size in iter_wav_chunks(buf):
        if chunk_id == b"fmt ":
            if size < 16 or body + 16 > len(buf):
                raise WavError(f"{source}: fmt chunk too short")
            audio_format, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", buf, body)
            fmt = (audio_format, channels, rate, bits)
        elif chunk_id == b"data":
            if fmt is None:
                raise WavError(f"{source}: data chunk before fmt chunk")
            audio_format, channels, rate, bits = fmt
            # 0xFFFE is WAVE_FORMAT_EXTENSIBLE, used by some writers for plain PCM.
            if audio_format not in (1, 0xFFFE):
                raise WavError(f"{source}: audio format {audio_format} is not PCM")
            if rate <= 0 or channels <= 0:
                raise WavError(f"{source}: bad format (rate {rate}, channels {channels})")
            if bits not in (8, 16, 24, 32, 64):
                raise WavError(f"{source}: bad format ({bits} bits per sample)")
            data_bytes = None if size in (STREAMING_SIZE, 0x7FFFFFFF) else size
            return WavInfo(rate, channels, bits, body, data_bytes)
    raise WavError(f"{source}: no data chunk in the header")


def build_wav_header(
    sample_rate: int, data_bytes: int | None = None, channels: int = 1, bits: int = 16
) -> bytes:
    """The canonical 44-byte header; `data_bytes=None` writes the streaming sizes."""
    block_align = channels * bits // 8
    data_size = STREAMING_SIZE if data_bytes is None else data_bytes
    riff_size = STREAMING_SIZE if data_bytes is None else 36 + data_bytes
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        riff_size,
        b"WAVE",
        b"fmt ",
        16,
        1,
        channels,
        sample_rate,
        sample_rate * block_align,
        block_align,
        bits,
        b"data",
        data_size,
    )


def wav_bytes(pcm: bytes, sample_rate: int, channels: int = 1) -> bytes:
    return build_wav_header(sample_rate, len(pcm), channels) + pcm


def write_wav(
    path: str | os.PathLike[str], pcm: bytes, sample_rate: int, channels: int = 1
) -> Path:
    """Write s16le PCM as a WAV file (parents created); returns the path. Written under a
    temporary name and renamed: a write that fails (a full disk) leaves no file whose
    header states more audio than it holds, and the temporary file is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    try:
        _write_file(tmp, wav_bytes(pcm, sample_rate, channels))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _write_file(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def read_wav(path: str | os.PathLike[str]) -> tuple[bytes, WavInfo]:
    """The PCM and format of a WAV file whose header states its length truly: a data size
    beyond the file, or bytes after the data that are no chunk, raise WavError (a reader
    that trusts the header would hear a different length than one that reads the file)."""
    data = Path(path).read_bytes()
    info = parse_wav_header(data, source=str(path))
    if info.data_bytes is None:
        return data[info.data_offset :], info
    end = info.data_offset + info.data_bytes
    if end > len(data):
        raise WavError(
            f"{path}: header says {info.data_bytes} bytes of audio, the file holds "
            f"{len(data) - info.data_offset}"
        )
    _check_trailing_chunks(data, end + (info.data_bytes & 1), info, str(path))
    return data[info.data_offset : end], info


def _check_trailing_chunks(data: bytes, pos: int, info: WavInfo, source: str) -> None:
    """What follows the data chunk must be whole chunks (LIST, id3, ...), not more audio."""
    while pos < len(data):
        if len(data) - pos < 8 or not _is_chunk_id(data[pos : pos + 4]):
            break
        (size,) = struct.unpack_from("<I", data, pos + 4)
        if pos + 8 + size > len(data):
            break
        pos += 8 + size + (size & 1)
    else:
        return
    if len(data) - pos <= 1:  # a pad byte some writers leave
        return
    assert info.data_bytes is not None
    raise WavError(
        f"{source}: header says {info.data_bytes} bytes of audio, but {len(data) - pos} more "
        "bytes follow that are no chunk (the header understates the length)"
    )


def _is_chunk_id(chunk_id: bytes) -> bool:
    return all(32 <= b < 127 for b in chunk_id)


def wav_seconds(path: str | os.PathLike[str]) -> float:
    """Duration of a WAV file's audio in seconds (raises WavError naming the file)."""
    pcm, info = read_wav(path)
    frame = max(1, info.channels * info.bits_per_sample // 8)
    return len(pcm) / frame / info.sample_rate


# What the speech API accepts as a reference clip (vllm-omni answers 400 outside it).
REFERENCE_CLIP_S = (1.0, 30.0)


def check_reference_clip(path: str | os.PathLike[str]) -> float:
    """The clip's duration, or WavError naming the file when it is no WAV or outside 1-30 s."""
    seconds = wav_seconds(path)
    low, high = REFERENCE_CLIP_S
    if not low <= seconds <= high:
        raise WavError(f"{path} is {seconds:.2f} s; a reference clip must be {low:g} to {high:g} s")
    return seconds


def wav_data_uri(path: str | os.PathLike[str]) -> str:
    """`data:audio/wav;base64,...` of a WAV file (checked to be one), for `ref_audio`."""
    data = Path(path).read_bytes()
    parse_wav_header(data, source=str(path))
    return "data:audio/wav;base64," + base64.b64encode(data).decode("ascii")
