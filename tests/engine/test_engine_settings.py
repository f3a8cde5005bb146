"""The settings search on the real engine: `snakemake --cores 2 results/tables/settings.md
--configfile config/settings-engine-cpu.yaml` (the shipped file, with this session's model
folder, venv and deploy folder put in, and its knob of the ramp's first chunk left out: two
engine starts instead of four, so the tier stays short; the by-hand run of the whole file
is in benchmarks/README.md) serves vllm-omni 0.30.0's own engine once per setting of the
talker stage's `max_num_seqs`, writes settings.md, its CSV and best.yaml from those engines'
records, and leaves no engine process.

What must hold on any machine: one sequence admitted at a time makes every stream past the
first wait for a whole generation before its first audio, so `max_num_seqs: 1` holds fewer
streams than the stock 8 (which admits every load of the grid) under the config's level; the
stock setting wins, and the table states whether it is distinguishable from the
runner-up."""

from __future__ import annotations

import csv
import json
import uuid

import pytest
import yaml

from tests.engine.conftest import HERE, engine_groups
from tests.support.paths import REPO
from tests.support.workflow_copy import copy_workflow, smk, smk_env, write_config
from thetalker.lifecycle.leftover import group_members

SYSTEM, MODEL = "vllm-omni-cpu", "tiny-qwen3-tts"
SEQS = "stages.0.max_num_seqs"
CHUNK = "connectors.connector_of_shared_memory.extra.initial_codec_chunk_frames"
RUN = f"results/settings/{SYSTEM}/{MODEL}"


@pytest.mark.timeout(1800)  # two engine starts on a shared 2-core machine
def test_the_settings_search_runs_on_the_real_engine(engine_tier, tiny_model, tmp_path):
    config = yaml.safe_load((REPO / "config" / "settings-engine-cpu.yaml").read_text())
    marker = uuid.uuid4().hex
    config["deploy_dir"] = str(HERE / "deploy")
    config["models"][MODEL]["model_id"] = str(tiny_model)
    system = config["systems"][SYSTEM]
    system["serving_env"] = str(engine_tier)
    system["env"]["THETALKER_ENGINE_TEST_RUN"] = marker
    del system["settings"][CHUNK]
    workdir = copy_workflow(tmp_path / "wf")
    path = write_config(workdir, "settings-engine-cpu.yaml", config)
    with engine_groups(marker) as groups:
        done = smk(workdir, "--cores", "2", "results/tables/settings.md", "--configfile", path,
                   env=smk_env(standins=False), timeout=1700)  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    assert len(groups) >= 2, f"an engine per setting, saw the groups {sorted(groups)}"
    left = [pid for pgid in groups for pid in group_members(pgid)]
    assert left == [], f"engine processes left after the settings search: {left}"

    screen = json.loads((workdir / RUN / "screen.json").read_text())
    seqs = {s["label"]: s["values"][SEQS] for s in screen["settings"]}
    assert seqs == {"stock": 8, "max_num_seqs=1": 1} and all(s["kept"] for s in screen["settings"])
    with (workdir / "results" / "tables" / "settings.csv").open(encoding="utf-8") as f:
        rows = {r["setting"]: r for r in csv.DictReader(f)}
    assert set(rows) == set(seqs)
    for label, row in rows.items():  # each served from its own file, recorded by sha256
        prov = json.loads((workdir / RUN / label / "c1" / "provenance.json").read_text())
        assert prov["config"]["deploy_sha256"] == row["sha256"]
        assert prov["serving_env"]["packages"]["vllm-omni"] == "0.30.0"

    def held(label: str) -> float:  # streams held; `never` (no load holds) is 0
        return float(rows[label]["capacity_streams"] or 0)

    assert held("max_num_seqs=1") < held("stock"), {x: r["capacity_label"] for x, r in rows.items()}
    (winner,) = [x for x, r in rows.items() if r["winner"] == "True"]
    assert winner == "stock"
    assert rows[winner]["distinguishable"] in ("True", "False")
    table = (workdir / "results" / "tables" / "settings.md").read_text()
    assert f"**Winner: {winner}**" in table and "distinguishable" in table
    best = (workdir / RUN / "best.yaml").read_text()
    assert f"Best setting of {SYSTEM} / {MODEL}: {winner}" in best
    assert yaml.safe_load(best)["stages"][0]["max_num_seqs"] == 8  # a deploy file to serve
