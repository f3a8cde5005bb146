"""The A/B on the real engine: `snakemake --cores 2 results/tables/ab.md` with two pairs on
vllm-omni 0.30.0's own engine, every arm a fresh engine, interleaved A B, B A, ...:

- `planted` (3 rounds): the same build against itself with one deploy change that must slow
  it: B admits one sequence at a time (`max_num_seqs` 1 against 8) at 4 streams, so three of
  every four streams wait whole generations before their first audio. ab.md must call first
  audio a regression.
- `same` (2 rounds, A B B A): the same build and deploy file on both arms, an A/A: every
  figure must read "no change the run can show". A verdict needs 3 rounds (ab_verdicts'
  MIN_ROUNDS: this test's A/A with 2 found why, its two B starts stalling alike), so at 2
  it checks that the A/A's chain runs and names nothing; the rule's false alarms at 3 rounds
  are the unit tests' and benchmarks/README.md's (200 resampled A/As). A 3-round A/A would
  add two engine starts to a tier at the edge of `.ci/run`'s 45 minutes.

Sizes, from by-hand runs on this machine kind (benchmarks/README.md): the stock engine's first
audio at 4 streams moved by up to 3 s from one start to the next, and with the random model's
own stream ends one sequence's wait depended on which prompts were ahead in its queue. So the
planted pair's streams are each exactly 400 talker tokens (`ignore_eos`; 32 s of audio), and
a queued stream waits whole generations of seconds: its first audio p95 about 15 s, several
times the stock engine's spread, beyond 3 rounds' between-rounds interval (9.9 standard
errors at 99%) even with one stock start 3 s slow. The A/A
keeps the tier's 100 tokens (its arms are only started and measured). Stopping and resuming
an A/B is the workflow test's (tests/workflow/test_workflow_ab.py); the two-build run (0.28.0
against 0.30.0, config/engine-ab.yaml) is benchmarks/README.md's and tests/engine/builds/."""

from __future__ import annotations

import csv
import uuid
from pathlib import Path

import pytest
import yaml

from tests.engine.conftest import HERE, engine_groups
from tests.support.paths import REPO
from tests.support.workflow_copy import copy_workflow, smk, smk_env, write_config
from thetalker.lifecycle.leftover import group_members

SYSTEM, MODEL = "vllm-omni-cpu", "tiny-qwen3-tts"
# First audio by each of its figures; the duration-free one (per second of audio) is a
# ratio, judged on the log scale, where the start-to-start spread of a CPU's speed is smaller.
FIRST_AUDIO = ("first byte p50", "first byte p95", "audible first audio p50",
               "audible first audio p95", "first audio per audio second p50")  # fmt: skip
NO_CHANGE = "no change the run can show"
TOKENS = 400  # talker tokens a stream of the planted pair: 32 s of audio


def _deploy(tmp_path: Path, name: str, seqs: int, tokens: int) -> str:
    """The tier's deploy file with the talker's `max_num_seqs` and every stream exactly
    `tokens` long (`ignore_eos`: the random model's own ends made a queued stream's wait
    depend on which prompts happened to be ahead of it)."""
    text = (HERE / "deploy" / "tiny-qwen3-tts.yaml").read_text()
    assert text.count("max_num_seqs: 8  # stock: 64") == 2
    assert text.count("max_tokens: 100  # stock: 4096") == 1
    assert text.count("      min_tokens: 2\n") == 1
    text = text.replace("max_num_seqs: 8  #", f"max_num_seqs: {seqs}  #", 1)
    text = text.replace("max_tokens: 100  #", f"max_tokens: {tokens}  #")
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        text.replace("      min_tokens: 2\n", "      min_tokens: 2\n      ignore_eos: true\n")
    )
    return str(path)


def _config(engine_tier: Path, tiny_model: Path, tmp_path: Path, marker: str) -> dict:
    config = yaml.safe_load((REPO / "config" / "engine-ab.yaml").read_text())
    env = config["systems"]["vllm-omni-0.30.0"]["env"]
    config["systems"] = {
        SYSTEM: {
            "launcher": "vllm-omni",
            "use_deploy_file": True,
            "serving_env": str(engine_tier),
            "env": {**env, "THETALKER_ENGINE_TEST_RUN": marker},
        }
    }
    config["report"]["ratio"] = [SYSTEM, SYSTEM]
    config["concurrency"] = [4]
    config["requests"] = {4: 4}
    config["models"][MODEL]["model_id"] = str(tiny_model)
    config["deploy_dir"] = str(HERE / "deploy")
    stock = {"system": SYSTEM, "deploy": _deploy(tmp_path, "stock-400", 8, TOKENS)}
    one = {"system": SYSTEM, "deploy": _deploy(tmp_path, "one-sequence-400", 1, TOKENS)}
    config["ab"]["pairs"] = {
        "planted": {"a": stock, "b": one, "rounds": 3},
        "same": {"a": SYSTEM, "b": SYSTEM, "rounds": 2},
    }
    return config


@pytest.mark.timeout(2400)  # ten engine starts on a shared 2-core machine
def test_a_planted_regression_is_found_and_an_aa_run_finds_none(engine_tier, tiny_model, tmp_path):
    marker = uuid.uuid4().hex
    workdir = copy_workflow(tmp_path / "wf")
    path = write_config(
        workdir, "engine-ab.yaml", _config(engine_tier, tiny_model, tmp_path, marker)
    )
    with engine_groups(marker) as groups:
        done = smk(workdir, "--cores", "2", "results/tables/ab.md", "--configfile", path,
                   env=smk_env(standins=False), timeout=2300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    assert len(groups) >= 10, f"an engine per arm, saw the groups {sorted(groups)}"
    left = [pid for pgid in groups for pid in group_members(pgid)]
    assert left == [], f"engine processes left after the A/B: {left}"

    with (workdir / "results" / "tables" / "ab.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    verdicts = {(r["pair"], r["figure"]): r["verdict"] for r in rows}
    table = (workdir / "results" / "tables" / "ab.md").read_text()
    planted = {f: verdicts[("planted", f)] for f in FIRST_AUDIO}
    assert "regression" in planted.values(), table
    assert "improvement" not in planted.values(), table
    aa = {f: v for (pair, f), v in verdicts.items() if pair == "same"}
    assert len(aa) >= 10 and set(aa.values()) == {NO_CHANGE}, table
    # Both arms named with the build they ran, the deploy file each served recorded.
    assert "| A | vllm-omni-cpu | " in table and "0.30.0" in table
    for pair, rounds in (("planted", 3), ("same", 2)):
        for k in range(1, rounds + 1):
            for arm in ("a", "b"):
                point = workdir / "results" / "ab" / pair / MODEL / f"round{k}" / arm / "c4"
                assert (point / "records.jsonl").is_file()
    assert not (workdir / "results" / "ab" / "same" / MODEL / "round3").exists()
