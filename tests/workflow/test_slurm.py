"""The embedded-default workflow, end to end through ``--profile profiles/slurm`` on a real
single-node Slurm cluster (started by ``.ci/slurm-up.sh``; recipe in docs/cluster.md).

A temporary copy of the workflow (made a git checkout, so provenance has a commit to record)
runs a tiny config: two systems, one concurrency point, two requests. The bench jobs must go
through sbatch: the Snakemake log prints their Slurm job ids, their Slurm logs are kept under
``.snakemake/slurm_logs/rule_bench/``, ``scontrol`` shows the GPU they asked for, and the
provenance.json of each point names the Slurm job it was measured in. Tables and figures are
localrules and come out of those points.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import workflow_copy
from tests.support.paths import REPO
from tests.support.slurm import cluster_or_skip
from thetalker.data.record_reads import read_json

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


# The workflow's parts as every workflow test copies them (deploy/ is copied below).
WORKFLOW_PARTS = tuple(p for p in workflow_copy.WORKFLOW_PARTS if p != "deploy")
OPTIONAL_PARTS: tuple[str, ...] = ()
SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+) \(log: ([^)]+)\)")

TINY_CONFIG = """\
prompts: prompts/seed_tts_eval_en_100.jsonl
seed: 42
warmup: 1
concurrency: [1]
requests: {1: 2}
request_timeout_s: 60
health_timeout_s: 180
max_error_rate: 0.5
report: {headline_concurrency: 1, ratio: [local, local-stock]}
systems:
  local: {launcher: local, use_deploy_file: true}
  local-stock: {launcher: local, use_deploy_file: false}
models:
  piper-joe:
    model_id: piper-joe
    deploy: piper-joe
    sample_rate: 22050
    voice: {speaker: joe}
"""
SYSTEMS = ("local", "local-stock")


def _copy_workflow(dest: Path) -> None:
    missing = [p for p in WORKFLOW_PARTS if not (REPO / p).exists()]
    assert not missing, f"workflow parts missing from the repository: {missing}"
    dest.mkdir()
    for part in WORKFLOW_PARTS + OPTIONAL_PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, dest / part)
        elif src.exists():
            shutil.copy2(src, dest / part)
    # deploy/ is a symlink into the package; the copy gets the files themselves.
    shutil.copytree(REPO / "deploy", dest / "deploy", symlinks=False)
    (dest / "tiny.yaml").write_text(TINY_CONFIG)
    (dest / ".gitignore").write_text("results/\n.snakemake/\n")
    git = ["git", "-C", str(dest), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "workflow under test"], check=True)


def test_workflow_runs_through_the_slurm_profile(tmp_path) -> None:
    cluster_or_skip()
    workdir = (tmp_path / "workflow").resolve()  # the path Snakemake prints
    _copy_workflow(workdir)
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--profile",
        "profiles/slurm",
        "--workflow-profile",
        "none",
        "--configfile",
        "tiny.yaml",
    ]
    proc = subprocess.Popen(
        cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        log, _ = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        # SIGINT lets Snakemake scancel the Slurm jobs it submitted before it exits.
        proc.send_signal(signal.SIGINT)
        try:
            log, _ = proc.communicate(timeout=60)
        finally:
            proc.kill()
            proc.wait()
        pytest.fail(f"snakemake through Slurm did not finish in 600 s:\n{log[-4000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, f"snakemake failed ({proc.returncode}):\n{log[-6000:]}"

    # Every table and figure of the workflow was made.
    tables = sorted((workdir / "results" / "tables").glob("*.md"))
    assert {"throughput.md", "continuity.md", "ttfa.md", "cost.md"} <= {t.name for t in tables}
    assert all(t.stat().st_size > 0 for t in tables)

    # The bench jobs went through sbatch: their ids and kept logs.
    submitted = {Path(m.group(3)): m.group(2) for m in SUBMITTED.finditer(log)}
    bench_logs = {p: jid for p, jid in submitted.items() if p.parent.parent.name == "rule_bench"}
    assert len(bench_logs) == len(SYSTEMS), f"bench submissions: {submitted}\n{log[-3000:]}"
    for slurm_log, _job_id in bench_logs.items():
        assert slurm_log.is_file(), f"Slurm log {slurm_log} was not kept"
        assert "--target-jobs bench:" in slurm_log.read_text()
    slurm_dirs = workdir / ".snakemake" / "slurm_logs" / "rule_bench"
    assert {p.name for p in slurm_dirs.iterdir()} == {f"{s}_piper-joe" for s in SYSTEMS}

    for system in SYSTEMS:
        point = workdir / "results" / "runs" / system / "piper-joe" / "c1"
        assert (point / "records.jsonl").stat().st_size > 0
        provenance = read_json(point / "provenance.json")
        job_id = provenance["scheduler"]["slurm_job_id"]
        # The point was measured inside the very sbatch job Snakemake submitted for it.
        assert bench_logs[slurm_dirs / f"{system}_piper-joe" / f"{job_id}.log"] == job_id
        head = subprocess.run(
            ["git", "-C", str(workdir), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert provenance["workflow"]["commit"] == head
        assert provenance["workflow"]["dirty"] is False
        # resources: gpu=1 became a GPU request (scontrol keeps jobs for MinJobAge).
        shown = subprocess.run(
            ["scontrol", "show", "job", job_id], capture_output=True, text=True, check=False
        ).stdout
        if shown:
            assert re.search(r"gres[:/]gpu[:=]1\b", shown), shown
    # Slurm gave each bench job its own GPU: two jobs that ran at the same time never share
    # one (the node has two; nothing of TheTalker reassigns what Slurm gave).
    grants = {}
    for system in SYSTEMS:
        provenance = read_json(
            workdir / "results" / "runs" / system / "piper-joe" / "c1" / "provenance.json"
        )
        grant = (
            provenance["scheduler"]["slurm_job_gpus"]
            or provenance["scheduler"]["cuda_visible_devices"]
        )
        assert grant is not None, provenance["scheduler"]
        grants[system] = (grant, provenance["started_at"], provenance["ended_at"])
    (ga, sa, ea), (gb, sb, eb) = grants.values()
    if sa < eb and sb < ea:  # the two jobs overlapped in time
        assert ga != gb, grants
