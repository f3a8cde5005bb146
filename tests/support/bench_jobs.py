"""A bench job spec for the scripted server, and the records files a job writes: shared by the
capacity search's tests and the rerun tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from thetalker.pipeline.job import BenchJob

__all__ = ["job", "records_files"]


def job(tmp_path: Path, **changes: Any) -> BenchJob:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"sample_id": f"s{i}", "text": f"Sentence {i}."}) + "\n" for i in range(40)
        )
    )
    spec: dict[str, Any] = dict(
        system="scripted",
        model="m",
        launcher="local",
        model_id="scripted-model",
        deploy_file=None,
        deploy_sha256=None,
        env={},
        extra_args=(),
        mps=False,
        sample_rate=None,
        language="English",
        voice={"speaker": "joe"},
        ref_audio=None,
        ref_text=None,
        prompts=str(prompts),
        concurrency=(1, 2, 8),
        requests={1: 2, 2: 4, 8: 8},
        warmup=0,
        seed=1,
        request_timeout_s=30,
        health_timeout_s=30,
        max_error_rate=0.0,
        save_audio=False,
        capacity={"max_steps": 3, "min_continuity_pct": 95.0, "ttfa_slo_s": None},
    )
    spec.update(changes)
    return BenchJob(**spec)


def records_files(run: Path, spec: BenchJob) -> list[Path]:
    rounds = [f"round{k}" for k in range(1, spec.repeats + 1)] if spec.repeats > 1 else [""]
    return [run / label / r / "records.jsonl" for label in spec.point_labels() for r in rounds]
