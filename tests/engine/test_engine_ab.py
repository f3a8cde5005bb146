"""The A/B on the real engine: `snakemake --cores 2 results/tables/ab.md` with two pairs on
vllm-omni 0.30.0's own engine, every arm a fresh engine, interleaved A B, B A, A B:

- `planted`: the same build against itself with one deploy change that must slow it: B admits
  one sequence at a time (`max_num_seqs` 1 against the tier's 8) at 4 streams, so three of
  every four streams wait whole generations before their first audio. ab.md must call first
  audio a regression.
- `same`: the same build and deploy file on both arms, an A/A: every figure must read "no
  change the run can show".

Snakemake is SIGKILLed while the planted pair's second arm serves, and run again: the arm
that finished is not run again, the killed one is, and no engine process of either run is
left. The two-build run (0.28.0 against 0.30.0, config/engine-ab.yaml) is in
tests/engine/builds/ and benchmarks/README.md."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.engine.conftest import HERE, engine_groups
from tests.support.paths import REPO
from tests.support.workflow_copy import SNAKEMAKE, copy_workflow, smk, smk_env, write_config
from thetalker.lifecycle.leftover import group_members

SYSTEM, MODEL = "vllm-omni-cpu", "tiny-qwen3-tts"
FIRST_AUDIO = ("first byte p50", "first byte p95", "audible first audio p50",
               "audible first audio p95")  # fmt: skip


def _config(engine_tier: Path, tiny_model: Path, tmp_path: Path, marker: str) -> dict:
    config = yaml.safe_load((REPO / "config" / "engine-ab.yaml").read_text())
    text = (HERE / "deploy" / "tiny-qwen3-tts.yaml").read_text()
    assert text.count("max_num_seqs: 8  # stock: 64") == 2
    one = tmp_path / "one-sequence.yaml"
    one.write_text(text.replace("max_num_seqs: 8  #", "max_num_seqs: 1  #", 1))
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
    config["ab"]["pairs"] = {
        "planted": {"a": SYSTEM, "b": {"system": SYSTEM, "deploy": str(one)}},
        "same": {"a": SYSTEM, "b": SYSTEM},
    }
    return config


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"snakemake ended (rc {proc.returncode}) before {path}"
        assert time.monotonic() < deadline, f"no {path} after {timeout:.0f} s"
        time.sleep(0.5)


def _verdicts(workdir: Path) -> dict[tuple[str, str], str]:
    with (workdir / "results" / "tables" / "ab.csv").open(encoding="utf-8") as f:
        return {(r["pair"], r["figure"]): r["verdict"] for r in csv.DictReader(f)}


@pytest.mark.timeout(2400)  # twelve engine starts and one killed, on a shared 2-core machine
def test_a_planted_regression_is_found_and_an_aa_run_finds_none(engine_tier, tiny_model, tmp_path):
    marker = uuid.uuid4().hex
    config = _config(engine_tier, tiny_model, tmp_path, marker)
    workdir = copy_workflow(tmp_path / "wf")
    path = write_config(workdir, "engine-ab.yaml", config)
    run = workdir / "results" / "ab" / "planted" / MODEL
    args = ["--cores", "2", "results/tables/ab.md", "--configfile", path]
    with engine_groups(marker) as groups:
        killed = subprocess.Popen(
            [SNAKEMAKE, *args],
            cwd=workdir,
            env=smk_env(standins=False),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            _wait_for(run / "round1" / "a" / "search.json", killed, 900)
            first_done = (run / "round1" / "a" / "search.json").stat().st_mtime_ns
            # B's engine is serving once its first point's folder holds records.
            _wait_for(run / "round1" / "b" / "c4" / "records.jsonl", killed, 900)
        finally:
            os.killpg(killed.pid, signal.SIGKILL)  # Snakemake and its job; the engine lives on
            killed.wait(timeout=60)
        unlock = smk(workdir, "--unlock", *args[2:], env=smk_env(standins=False), timeout=300)
        assert unlock.returncode == 0, unlock.stderr[-3000:]
        done = smk(workdir, *args, env=smk_env(standins=False), timeout=2200)
    assert done.returncode == 0, done.stderr[-5000:]
    left = [pid for pgid in groups for pid in group_members(pgid)]
    assert left == [], f"engine processes left after the A/B: {left}"
    # The arm that finished before the kill was not run again; the killed one was.
    assert (run / "round1" / "a" / "search.json").stat().st_mtime_ns == first_done
    log = workdir / "results" / "logs" / "ab" / "planted" / MODEL / "round1" / "b"
    assert "stopping leftover server PID" in (log / "bench.log").read_text(errors="replace")

    verdicts = _verdicts(workdir)
    table = (workdir / "results" / "tables" / "ab.md").read_text()
    planted = {f: verdicts[("planted", f)] for f in FIRST_AUDIO}
    assert "regression" in planted.values(), table
    assert "improvement" not in planted.values(), table
    aa = {f: v for (pair, f), v in verdicts.items() if pair == "same"}
    assert len(aa) >= 10 and set(aa.values()) == {"no change the run can show"}, table
    assert "vllm-omni" in table and "0.30.0" in table
    for pair in ("planted", "same"):  # both pairs, each arm three times, in the chain's order
        for k in (1, 2, 3):
            for arm in ("a", "b"):
                assert (workdir / "results" / "ab" / pair / MODEL / f"round{k}" / arm / "c4"
                        / "records.jsonl").is_file()  # fmt: skip
