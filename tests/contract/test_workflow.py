"""The workflow's bench jobs with the `vllm-omni` launcher pointed at 0.30.0's own speech layer
(a `vllm-omni` program on PATH that is the fake-engine server): both published systems, the
deploy file's chunking for one and the bundled stock file's for the other."""

from __future__ import annotations

import os
import stat

import pytest
import yaml

from tests.contract.conftest import SERVER
from tests.contract.schedule import PROFILES, chunk_samples
from tests.support.workflow_copy import STANDINS, copy_workflow, smk
from thetalker.data.record_reads import read_records

QWEN = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"

CONFIG = {
    "prompts": "prompts/seed_tts_eval_en_100.jsonl",
    "seed": 42,
    "warmup": 1,
    "concurrency": [1, 2],
    "requests": {1: 2, 2: 2},
    "request_timeout_s": 60,
    "health_timeout_s": 400,
    "max_error_rate": 0.0,
    "reference": {"audio": "reference/ref.wav", "text": "reference/ref.txt"},
    "report": {
        "headline_concurrency": 2,
        "gpu_hour_usd": 2.99,
        "min_continuity_pct": 0,
        "ratio": ["thestage-vllm-omni", "vllm-omni"],
    },
    "systems": {
        "vllm-omni": {"launcher": "vllm-omni", "use_deploy_file": True},
        "thestage-vllm-omni": {"launcher": "vllm-omni", "use_deploy_file": False},
    },
    "models": {
        "qwen3tts17b": {
            "model_id": QWEN,
            "deploy": "qwen3tts17b",
            "sample_rate": 24000,
            "mps": True,
            "voice": {"task_type": "CustomVoice", "speaker": "ryan"},
        }
    },
}


@pytest.mark.timeout(1500)
def test_bench_jobs_on_0_30s_layer(contract_python, tmp_path):
    workflow = copy_workflow(tmp_path / "wf")
    (workflow / "configs").mkdir()
    (workflow / "configs" / "contract.yaml").write_text(yaml.safe_dump(CONFIG, sort_keys=False))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "vllm-omni"
    program.write_text(f'#!/bin/sh\nexec "{contract_python}" "{SERVER}" "$@"\n')
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    # The fake-engine `vllm-omni` first; nvidia-smi and MPS control from the stand-ins.
    path = os.pathsep.join([str(bin_dir), str(STANDINS), os.environ["PATH"]])
    env = {**os.environ, "PATH": path}
    args = ("--cores", "2", "--configfile", "configs/contract.yaml")
    result = smk(workflow, *args, env=env, timeout=1400)
    assert result.returncode == 0, result.stderr[-4000:]
    profile = PROFILES[QWEN]
    stock = {"initial_codec_chunk_frames": 1, "codec_chunk_frames": 25}  # qwen3_tts.yaml
    ours = {"initial_codec_chunk_frames": 16, "codec_chunk_frames": 75}  # qwen3tts17b.yaml
    for system, extra in (("vllm-omni", ours), ("thestage-vllm-omni", stock)):
        want = [2 * n for n in chunk_samples(profile, extra, 166)]
        for c in (1, 2):
            run = workflow / f"results/runs/{system}/qwen3tts17b/c{c}"
            records = list(read_records(run / "records.jsonl"))
            assert records and all(r["ok"] for r in records), system
            assert all(r["chunk_bytes"] == want and r["sample_rate"] == 24000 for r in records)
    log = (workflow / "results/logs/vllm-omni/qwen3tts17b/server.log").read_text()
    assert "Resolved TTS serving adapter: Qwen3TTSAdapter" in log
