"""The published matrix's SGLang-Omni system, as Snakemake plans it: one bench job per model
it serves (Qwen3-TTS 1.7B and 0.6B CustomVoice), started by the `sglang-omni` launcher with
the admission ceiling set, no vllm-omni deploy file, and its WER run on the -Base checkpoint.
(The server itself is checked by its contract tier, tests/contract_sglang.)"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.workflow_copy import copy_workflow, smk

CEILING = [
    "--tts_engine.engine.max_running_requests", "64",
    "--tts_engine.engine.max_queued_requests", "64",
]  # fmt: skip


def test_published_plans_sglang_omni_on_the_qwen3_tts_checkpoints(tmp_path: Path):
    workflow = copy_workflow(tmp_path / "wf")
    result = smk(workflow, "-n", "-p", "--configfile", "config/published.yaml")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    jobs = [line for line in result.stdout.splitlines() if "serve_and_sweep --job" in line]
    parsed = [json.loads(line.split("--job '", 1)[1].split("'", 1)[0]) for line in jobs]
    sglang = [job for job in parsed if job["launcher"] == "sglang-omni"]
    assert sorted((j["system"], j["model"], j["model_id"]) for j in sglang) == [
        ("sglang-omni", "qwen3tts06b", "Qwen/Qwen3-TTS-12Hz-0.6B-Base"),
        ("sglang-omni", "qwen3tts06b", "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"),
        ("sglang-omni", "qwen3tts17b", "Qwen/Qwen3-TTS-12Hz-1.7B-Base"),
        ("sglang-omni", "qwen3tts17b", "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"),
    ]
    for job in sglang:
        assert job["extra_args"] == CEILING and job["deploy_file"] is None
        assert job["sample_rate"] == 24000 and job["mps"] is False
    speed = [j for j in sglang if j["model_id"].endswith("CustomVoice")]
    assert all(j["voice"] == {"task_type": "CustomVoice", "speaker": "ryan"} for j in speed)
    assert "results/quality/sglang-omni/qwen3tts17b/wer.json" in result.stdout
