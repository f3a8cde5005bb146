"""One model on two real servers: `snakemake --cores 2 --resources gpu=1 --configfile
config/engine-servers-cpu.yaml` (the shipped file, with this session's model folder, venvs and
deploy folder put in) writes the throughput, TTFA, continuity, capacity and by-rate tables
with a row for each of vllm-omni 0.30.0's and SGLang-Omni 0.1.9's real engines serving the same
tiny model, and no process of either engine is left afterwards."""

from __future__ import annotations

import uuid

import pytest
import yaml

from tests.engine.conftest import HERE as ENGINE_HERE
from tests.engine.conftest import engine_groups
from tests.engine.conftest import venv_dir as vllm_venv
from tests.engine.conftest import venv_unavailable_reason as vllm_unavailable
from tests.engine.sglang.conftest import STANDIN
from tests.support.paths import REPO
from tests.support.tiers import unavailable
from tests.support.workflow_copy import copy_workflow, smk, smk_env, write_config
from thetalker.data.record_reads import read_records
from thetalker.lifecycle.leftover import group_members

MODEL = "tiny-qwen3-tts"
SYSTEMS = ("vllm-omni-cpu", "sglang-omni-cpu")
TABLES = ("throughput", "ttfa", "continuity", "capacity", "by_rate")


@pytest.fixture
def both_venvs(engine_tier):
    reason = vllm_unavailable()
    if reason is not None:
        unavailable(reason)
    return {"vllm-omni-cpu": vllm_venv(), "sglang-omni-cpu": engine_tier}


def test_one_model_on_two_real_servers(both_venvs, tiny_model, tmp_path):
    config = yaml.safe_load((REPO / "config" / "engine-servers-cpu.yaml").read_text())
    marker = uuid.uuid4().hex
    config["deploy_dir"] = str(ENGINE_HERE / "deploy")
    config["models"][MODEL]["model_id"] = str(tiny_model)
    for name, venv in both_venvs.items():
        system = config["systems"][name]
        system["serving_env"] = str(venv)
        system["env"]["THETALKER_ENGINE_TEST_RUN"] = marker
    config["systems"]["sglang-omni-cpu"]["env"]["PYTHONPATH"] = str(STANDIN)
    workdir = copy_workflow(tmp_path / "wf")
    path = write_config(workdir, "engine-servers-cpu.yaml", config)
    with engine_groups(marker) as groups:  # every engine of the run, both servers'
        done = smk(workdir, "--cores", "2", "--resources", "gpu=1", "--configfile", path,
                   env=smk_env(standins=False), timeout=1500)  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    assert len(groups) >= 2, "both engines were not seen running"
    left = [pid for pgid in groups for pid in group_members(pgid)]
    assert left == [], f"engine processes left after the workflow: {left}"

    tables = workdir / "results" / "tables"
    for name in TABLES:
        text = (tables / f"{name}.md").read_text()
        # Random weights on a CPU: each table says so first (report.note), before its caption.
        assert text.startswith(config["report"]["note"] + "\n\n"), f"{name}.md: no note"
        for system in SYSTEMS:
            assert system in text, f"{name}.md has no row of {system}:\n{text}"
    for system in SYSTEMS:
        for c in config["concurrency"]:
            point = workdir / "results" / "runs" / system / MODEL / f"c{c}"
            records = [r for r in read_records(point / "records.jsonl") if not r["warmup"]]
            assert len(records) == config["requests"][c]
            for r in records:
                if r["ok"]:
                    assert r["sample_rate"] == 24000 and sum(r["chunk_bytes"]) > 0
                else:  # only SGLang-Omni refuses, and only as overloaded (503)
                    assert system == "sglang-omni-cpu" and r["http_status"] == 503, r["error"]
