"""The A/B end to end on the embedded default (docs/ab.md): one real `snakemake --cores 2
results/tables/ab.md` over an A/A pair of the local Piper server, 2 rounds (A B B A, a fresh
server per arm, small counts), SIGKILLed while its second arm serves and run again, shared
by every test here; then what the table reads is
tampered with (refused in one line), and dry runs show what a change reruns. Whether a
planted change is found and an A/A finds none is the engine tier's (tests/engine/
test_engine_ab.py) and the unit tests' (tests/unit/test_ab_paired.py)."""

from __future__ import annotations

import copy
import csv
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.support.processes import processes_in
from tests.support.workflow_copy import (
    SNAKEMAKE,
    copy_workflow,
    planned_jobs,
    smk,
    smk_env,
    write_config,
)

RUN = Path("results/ab/same/piper-joe")
VARIANT = "deploy/variants/piper-joe-one-stream.yaml"

pytestmark = pytest.mark.slow


def _config(workdir: Path) -> dict:
    config = yaml.safe_load((workdir / "config" / "ab-local.yaml").read_text())
    config["ab"]["rounds"] = 2
    config["ab"]["pairs"] = {"same": {"a": "local", "b": "local"}}
    config["concurrency"] = [2]
    config["requests"] = {2: 4}
    config["report"]["headline_concurrency"] = 2
    return config


@dataclass(frozen=True)
class Compared:
    workdir: Path
    first_arm_done_ns: int  # round1/a's manifest before the kill
    rerun: subprocess.CompletedProcess[str]


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"snakemake ended (rc {proc.returncode}) before {path}"
        assert time.monotonic() < deadline, f"no {path} after {timeout:.0f} s"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Compared:
    """The A/A run, SIGKILLed (Snakemake and its job, as `kill -9 -- -PGID`) while the
    second arm serves, unlocked and run again to the end."""
    workdir = copy_workflow(tmp_path_factory.mktemp("ab") / "wf")
    path = write_config(workdir, "ab.yaml", _config(workdir))
    args = ["--cores", "2", "results/tables/ab.md", "--configfile", path]
    killed = subprocess.Popen(
        [SNAKEMAKE, *args],
        cwd=workdir,
        env=smk_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_for(workdir / RUN / "round1" / "a" / "search.json", killed)
        _wait_for(workdir / RUN / "round1" / "b" / "c2" / "records.jsonl", killed)
        first = (workdir / RUN / "round1" / "a" / "search.json").stat().st_mtime_ns
    finally:
        if killed.poll() is None:
            os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(timeout=60)
    assert smk(workdir, "--unlock", *args[2:]).returncode == 0
    result = smk(workdir, *args)
    assert not processes_in(workdir), "processes left running in the workflow copy"
    assert result.returncode == 0, result.stderr[-4000:]
    return Compared(workdir, first, result)


def dry_run(workdir: Path, config: dict) -> list[tuple[str, dict[str, str], str]]:
    path = write_config(workdir, "changed.yaml", config)
    result = smk(workdir, "-n", "--cores", "2", "results/tables/ab.md", "--configfile", path)
    assert result.returncode == 0, result.stderr[-3000:]
    return planned_jobs(result.stdout)


def test_the_arms_ran_one_after_the_other_in_the_order_a_b_b_a(compared: Compared):
    started = {}
    for k, arm in ((1, "a"), (1, "b"), (2, "b"), (2, "a")):
        prov = json.loads(
            (compared.workdir / RUN / f"round{k}" / arm / "c2" / "provenance.json").read_text()
        )
        started[(k, arm)] = (prov["started_at"], prov["ended_at"])
        assert prov["config"]["save_audio"] is True  # the waveform check's audio
    order = sorted(started, key=lambda slot: started[slot][0])
    assert order == [(1, "a"), (1, "b"), (2, "b"), (2, "a")]
    for before, after in zip(order, order[1:], strict=False):  # never two at once
        assert started[before][1] <= started[after][0]


def test_a_sigkilled_run_resumes_at_the_arm_that_did_not_finish(compared: Compared):
    manifest = compared.workdir / RUN / "round1" / "a" / "search.json"
    assert manifest.stat().st_mtime_ns == compared.first_arm_done_ns  # kept, not rerun
    log = compared.workdir / "results/logs/ab/same/piper-joe/round1/b/bench.log"
    assert "stopping leftover server PID" in log.read_text(errors="replace")
    ran = [w for rule, w, _ in planned_jobs(compared.rerun.stderr) if rule == "ab_arm"]
    assert sorted((w["k"], w["arm"]) for w in ran) == [("1", "b"), ("2", "a"), ("2", "b")]


def test_the_table_judges_every_figure_and_names_both_builds(compared: Compared):
    with (compared.workdir / "results/tables/ab.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    figures = [r["figure"] for r in rows]
    assert len(figures) == len(set(figures)) >= 10
    assert {"RTFx", "audible first audio p95", "failures", "output length"} <= set(figures)
    allowed = {"regression", "improvement", "no change the run can show", "longer", "shorter"}
    assert {r["verdict"] for r in rows} <= allowed
    assert all(len(json.loads(r["per_round"])) == 2 for r in rows)
    table = (compared.workdir / "results/tables/ab.md").read_text()
    assert "## same / piper-joe: A = local, B = local (2 rounds)" in table
    assert "| A | local |" in table and "| B | local |" in table
    assert "Same audio?" in table
    assert (compared.workdir / "results/figures/ab.png").stat().st_size > 0


def _table(workdir: Path) -> subprocess.CompletedProcess[str]:
    runs = [{"pair": "same", "model": "piper-joe", "a": "local", "b": "local",
             "dir": str(RUN), "points": ["c2"], "rounds": 2}]  # fmt: skip
    out = workdir / "tampered"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "thetalker.report.ab_table",
            "--runs",
            json.dumps(runs),
            "--min-effect",
            json.dumps({}),
            "--table",
            str(out / "ab.md"),
            "--csv",
            str(out / "ab.csv"),
            "--figure",
            str(out / "ab.png"),
        ],  # fmt: skip
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_arms_that_measured_different_things_are_refused_in_one_line(compared: Compared, tmp_path):
    copy = tmp_path / "wf"
    subprocess.run(["cp", "-a", str(compared.workdir), str(copy)], check=True)
    prov_path = copy / RUN / "round2" / "b" / "c2" / "provenance.json"
    prov = json.loads(prov_path.read_text())
    prov["prompts"]["sha256"] = "0" * 64  # another prompt set
    prov_path.write_text(json.dumps(prov))
    done = _table(copy)
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {RUN}/round2/b/c2/provenance.json: prompts sha256 '000")
    assert line.endswith("the arms must measure the same thing")
    (copy / RUN / "round1" / "a" / "c2" / "summary.json").unlink()
    done = _table(copy)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"error: {RUN}/round1/a/c2/summary.json: missing (the arm did not finish this point)"
    )


def test_another_round_runs_only_the_new_arms(compared: Compared):
    config = _config(compared.workdir)
    config["ab"]["rounds"] = 3
    jobs = dry_run(compared.workdir, config)
    arms = sorted((w["k"], w["arm"]) for rule, w, _ in jobs if rule == "ab_arm")
    assert arms == [("3", "a"), ("3", "b")]


def test_a_changed_arm_reruns_the_chain_from_its_first_run_on(compared: Compared):
    # B's deploy file changed: B's arms rerun, and so does every arm after B's first, so
    # the comparison stays interleaved; A's first arm, before it, is kept.
    config = copy.deepcopy(_config(compared.workdir))
    config["ab"]["pairs"]["same"]["b"] = {"system": "local", "deploy": VARIANT}
    jobs = dry_run(compared.workdir, config)
    arms = sorted((w["k"], w["arm"]) for rule, w, _ in jobs if rule == "ab_arm")
    assert arms == [("1", "b"), ("2", "a"), ("2", "b")]
    assert [rule for rule, _, _ in jobs].count("ab_table") == 1
