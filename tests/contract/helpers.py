"""What the contract modules share: the models they serve, and `thetalker-bench` run as a
user runs it against a fake-engine server."""

from __future__ import annotations

import json
from pathlib import Path

from tests.contract.conftest import thetalker_cli
from tests.contract.schedule import PROFILES, chunk_samples
from thetalker.data.record_reads import read_records
from thetalker.lifecycle.deploy import resolve

__all__ = [
    "QWEN",
    "QWEN_BASE",
    "QWEN_DEPLOY",
    "QWEN_EXTRA",
    "REF_TEXT",
    "expected_bytes",
    "prompts",
    "bench",
]

QWEN = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"
QWEN_BASE = "Qwen/Qwen3-TTS-12Hz-1.7B-Base"
QWEN_DEPLOY = resolve("qwen3tts17b").path
# The project's deploy: a first chunk of 16 frames, then 75 (1920 samples a frame).
QWEN_EXTRA = {"initial_codec_chunk_frames": 16, "codec_chunk_frames": 75}


def expected_bytes(model: str, frames: int = 166, extra: dict | None = None) -> list[int]:
    profile = PROFILES[model]
    return [2 * n for n in chunk_samples(profile, extra or QWEN_EXTRA, frames)]


def prompts(tmp: Path, texts: list[str]) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "prompts.jsonl"
    with path.open("w") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"sample_id": f"s{i}", "text": text}) + "\n")
    return path


def bench(server, tmp: Path, texts: list[str], *args: str) -> tuple[list[dict], dict, str]:
    out = tmp / "out"
    result = thetalker_cli(
        "thetalker-bench",
        "--base-url", server.base_url,
        "--texts-jsonl", str(prompts(tmp, texts)),
        "--out-dir", str(out),
        "--max-error-rate", "1.0",
        "--timeout", "60",
        *args,
    )  # fmt: skip
    assert (out / "summary.json").is_file(), result.stderr[-2000:]
    records = list(read_records(out / "records.jsonl"))
    summary = json.loads((out / "summary.json").read_text())
    return records, summary, result.stderr


REF_TEXT = "This is the reference clip."  # the transcript of the `ref_clip` fixture
