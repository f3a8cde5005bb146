"""WAV header parse/build, files and data URIs."""

from __future__ import annotations

import base64
import struct

import pytest

from thetalker.data.wavio import (
    STREAMING_SIZE,
    WAV_HEADER_BYTES,
    WavError,
    build_wav_header,
    parse_wav_header,
    read_wav,
    wav_bytes,
    wav_data_uri,
    write_wav,
)


def test_header_is_44_bytes_with_rate_at_24_and_channels_at_22() -> None:
    header = build_wav_header(22050, 1000)
    assert len(header) == WAV_HEADER_BYTES
    assert struct.unpack_from("<I", header, 24)[0] == 22050
    assert struct.unpack_from("<H", header, 22)[0] == 1
    assert struct.unpack_from("<I", header, 40)[0] == 1000
    assert struct.unpack_from("<I", header, 4)[0] == 1036


def test_streaming_header_has_unknown_sizes_and_parses() -> None:
    header = build_wav_header(24000)
    assert struct.unpack_from("<I", header, 40)[0] == STREAMING_SIZE
    info = parse_wav_header(header)
    assert (info.sample_rate, info.channels, info.bits_per_sample) == (24000, 1, 16)
    assert info.data_offset == 44
    assert info.data_bytes is None


def test_header_with_a_list_chunk_finds_the_data() -> None:
    fmt = build_wav_header(16000, 4)[12:36]
    list_chunk = b"LIST" + struct.pack("<I", 5) + b"abcde" + b"\0"  # odd size is padded
    data = b"data" + struct.pack("<I", 4) + b"\1\0\2\0"
    buf = b"RIFF" + struct.pack("<I", 4 + len(fmt) + len(list_chunk) + len(data)) + b"WAVE"
    buf += fmt + list_chunk + data
    info = parse_wav_header(buf)
    assert info.sample_rate == 16000
    assert info.data_offset == len(buf) - 4
    assert info.data_bytes == 4


@pytest.mark.parametrize(
    ("buf", "why"),
    [
        (b"", "not a RIFF/WAVE header"),
        (b'{"error": 1}' + b" " * 40, "not a RIFF/WAVE header"),
        (build_wav_header(24000)[:36], "no data chunk"),
    ],
)
def test_bad_headers_raise_naming_the_source(buf: bytes, why: str) -> None:
    with pytest.raises(WavError, match=f"^resp: {why}"):
        parse_wav_header(buf, source="resp")


def test_non_pcm_format_is_refused() -> None:
    header = bytearray(build_wav_header(24000, 0))
    struct.pack_into("<H", header, 20, 3)  # IEEE float
    with pytest.raises(WavError, match="not PCM"):
        parse_wav_header(bytes(header))


def test_write_then_read_round_trips(tmp_path) -> None:
    pcm = bytes(range(200))
    path = write_wav(tmp_path / "sub" / "a.wav", pcm, 22050)
    data, info = read_wav(path)
    assert data == pcm
    assert info.sample_rate == 22050
    assert path.read_bytes() == wav_bytes(pcm, 22050)


def test_data_uri_carries_the_file(tmp_path) -> None:
    path = write_wav(tmp_path / "ref.wav", b"\1\0" * 10, 24000)
    uri = wav_data_uri(path)
    prefix = "data:audio/wav;base64,"
    assert uri.startswith(prefix)
    assert base64.b64decode(uri[len(prefix) :]) == path.read_bytes()


def test_data_uri_of_a_non_wav_names_the_file(tmp_path) -> None:
    path = tmp_path / "ref.mp3"
    path.write_bytes(b"ID3" + b"\0" * 100)
    with pytest.raises(WavError, match="ref.mp3"):
        wav_data_uri(path)
