"""Hand-built records and result folders, for the report and compare tests."""

from __future__ import annotations

from pathlib import Path

from thetalker.data.record_writes import append_record
from thetalker.data.records import RECORD_FIELDS

__all__ = ["make_record", "with_audio", "write_point"]


def make_record(i: int, *, ok: bool = True, continuous: bool = True, warmup: bool = False):
    """A record whose figures are set by hand (2 s of audio in 0.5 s of wall clock); a
    discontinuous one fell 0.15 s behind (i odd below 3) or 0.4 s (otherwise)."""
    record = {field: None for field in RECORD_FIELDS}
    record.update(
        request_index=i,
        sample_id=f"s{i}",
        text="Hello there.",
        text_chars=12,
        warmup=warmup,
        ok=ok,
        error=None if ok else {"type": "timeout", "message": "t", "status": None},
        t_submit_s=0.1 * i,
        t_connect_s=0.001,
        ttfa_s=0.05 + 0.01 * i if ok else None,
        leading_silence_s=0.02,
        ttfa_audible_s=0.07 + 0.01 * i if ok else None,
        ttfa_audible_naive_s=0.07 + 0.01 * i if ok else None,
        wall_s=0.5,
        chunk_arrival_s=[0.05, 0.3] if ok else [],
        chunk_bytes=[44100, 44100] if ok else [],
        audio_s=2.0 if ok else 0.0,
        sample_rate=22050,
        max_underrun_s=0.0 if continuous else (0.15 if i < 3 else 0.4),
        underrun_events=0 if continuous else 1,
        continuity_ok=ok and continuous,
        stalls=0 if continuous else 1,
        stall_s=0.0 if continuous else 0.4,
    )
    return record


def with_audio(record: dict, seconds: float) -> dict:
    """The record carrying `seconds` of audio: `audio_s` and the chunks' bytes agree (a
    reader refuses a figure its timeline contradicts), in the record's two chunks."""
    total = round(seconds * int(record["sample_rate"]) * 2)
    return {**record, "audio_s": seconds, "chunk_bytes": [total // 2, total - total // 2]}


def write_point(root: Path, system: str, model: str, c: int, records: list[dict]) -> Path:
    path = root / "runs" / system / model / f"c{c}" / "records.jsonl"
    path.parent.mkdir(parents=True)
    with path.open("w", encoding="utf-8") as fh:
        for record in records:
            append_record(fh, record)
    return path
