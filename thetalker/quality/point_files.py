"""What the per-point quality measures share: a point's scored records with their saved
audio read back, the command line of a per-point file, and JSON written without NaN.

thetalker.quality.health (audio health) and thetalker.quality.dnsmos (naturalness) judge the
same streams: each scored record of a point (warm-up left out) in file order, an ok one by
the 16-bit mono WAV its `audio_path` names beside the records. One reader, so both name a
missing or unreadable file alike and a point's two files never disagree on which streams
they hold.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from thetalker.data.record_reads import RecordError, read_records
from thetalker.data.record_writes import write_json
from thetalker.data.wavio import WavError, read_wav

__all__ = ["scored_records", "record_audio", "point_parser", "finite_json", "write_finite_json"]


def scored_records(records_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(`FILE: record N`, record) for each scored record (warm-up left out), in file order;
    RecordError, after the last, when the point has none (an empty run)."""
    found = False
    for n, rec in enumerate(read_records(records_path), start=1):
        if rec.get("warmup"):
            continue
        found = True
        yield f"{records_path}: record {n}", rec
    if not found:
        raise RecordError(f"{records_path}: no scored records (an empty run?)")


def record_audio(rec: Mapping[str, Any], base: Path, where: str) -> tuple[bytes, int] | None:
    """The saved PCM (s16le) of an ok record and its rate; None for one with no audio.
    `base`: the records file's folder (a relative `audio_path` is beside it)."""
    if not float(rec.get("audio_s") or 0.0) > 0:
        return None
    rel = rec.get("audio_path")
    if not rel:
        raise RecordError(f"{where}: ok record has no audio_path (was audio saved?)")
    path = Path(rel) if Path(rel).is_absolute() else base / rel
    try:
        pcm, info = read_wav(path)
    except FileNotFoundError:
        raise RecordError(f"{where}: audio_path {rel} not found (looked at {path})") from None
    except WavError as exc:
        raise RecordError(f"{where}: audio_path {rel}: {exc}") from None
    if info.channels != 1 or info.bits_per_sample != 16:
        raise RecordError(f"{where}: audio_path {rel}: not 16-bit mono")
    return pcm, info.sample_rate


def point_parser(module: str, doc: str | None, out_name: str) -> argparse.ArgumentParser:
    """`python -m MODULE --records records.jsonl --out OUT_NAME` for one point."""
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=(doc or "").split("\n")[0])
    p.add_argument("--records", required=True, help="records.jsonl of a point that saved audio")
    p.add_argument("--out", required=True, help=f"{out_name} to write")
    return p


def finite_json(value: Any) -> Any:
    """`value` with every float that is not finite, at any depth, as None: strict JSON
    readers reject NaN (a WER of no reference words, a level of no frames)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def write_finite_json(path: str | os.PathLike[str], data: Any) -> None:
    """write_json (whole or not at all) of `data` with NaN and infinities as null."""
    write_json(path, finite_json(data))
