"""Reliability of a running workflow: stopping Snakemake, the bench job or a Slurm job while a
server serves, and a server that dies mid-run. Nothing may be left running (checked by PID)
and `records.jsonl` must keep every request that had finished.

Every test runs the embedded default (the real local Piper server) on a temporary copy of the
workflow with a tiny config. Its helpers are in tests/support/workflow_copy.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from tests.support.processes import kill_pids
from tests.support.slurm import cluster_or_skip
from tests.support.workflow_copy import (
    POINT,
    SERVER_LOG,
    SNAKEMAKE,
    finished_lines,
    server_pids_in,
    serving_with_records,
    start_snakemake,
    wait_for,
)
from thetalker.pipeline import config_checks as wfc


def _stop_and_check(
    proc: subprocess.Popen[str], workdir: Path, sig: int, records: Path, group: bool = True
) -> tuple[str, list[dict], int]:
    """Send `sig` once requests have finished; return the output, the records kept and how
    many had finished before the signal."""
    servers: list[int] = []
    try:
        wait_for(serving_with_records(workdir, 2, proc), 240, "the bench job to finish 2 requests")
        servers = server_pids_in(workdir)
        done_before = len(finished_lines(records))
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        out, _ = proc.communicate(timeout=180)
        # The server gets SIGTERM, then SIGKILL after the launcher's grace (20 s).
        wait_for(lambda: not any(Path(f"/proc/{p}").exists() for p in servers), 60, "no server")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_pids(servers)
    assert servers, "no server was seen running"
    return out, finished_lines(records), done_before


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_stopping_snakemake_mid_run_leaves_no_server_and_keeps_records(workdir: Path, sig: int):
    proc = start_snakemake(
        [SNAKEMAKE, str(POINT / "records.jsonl"), "--configfile", "tiny.yaml"], workdir
    )
    out, kept, done_before = _stop_and_check(proc, workdir, sig, workdir / POINT / "records.jsonl")
    assert proc.returncode != 0, out[-3000:]
    assert not server_pids_in(workdir)
    finished = [r for r in kept if r["error"] is None or r["error"]["type"] != "cancelled"]
    assert len(finished) >= done_before, out[-3000:]
    assert len(kept) < 400  # it really was stopped mid-run


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_stopping_the_bench_job_leaves_no_server_and_keeps_records(workdir: Path, sig: int):
    config = yaml.safe_load((workdir / "tiny.yaml").read_text())
    validate(config, str(workdir / "config" / "schema.yaml"))  # fills the defaults, as the rules
    job = wfc.bench_job(config, "local", "piper-joe").to_json()
    cmd = [sys.executable, "-m", "thetalker.pipeline.serve_and_sweep", "--job", job]
    cmd += ["--records", str(POINT / "records.jsonl"), "--server-log", str(SERVER_LOG)]
    records = workdir / POINT / "records.jsonl"
    proc = start_snakemake(cmd, workdir)
    out, kept, done_before = _stop_and_check(proc, workdir, sig, records)
    # SIGTERM: the launcher's guard makes it SystemExit(143); SIGINT: KeyboardInterrupt.
    assert proc.returncode == {signal.SIGINT: 130, signal.SIGTERM: 143}[sig], out[-3000:]
    assert "Traceback" not in out
    assert len([r for r in kept if r["ok"]]) >= done_before
    assert all(r["ok"] or r["error"]["type"] == "cancelled" for r in kept), kept
    summary = json.loads((workdir / POINT / "summary.json").read_text())
    assert summary["complete"] is False


@pytest.mark.slow
def test_server_dying_mid_run_keeps_records_and_fails_the_job(workdir: Path):
    """SIGKILL of the server (an out-of-memory kill, a crash): the finished requests stay,
    the rest fail fast as `connection` errors, the summary counts them, the job fails."""
    records = workdir / POINT / "records.jsonl"
    proc = start_snakemake(
        [SNAKEMAKE, str(POINT / "records.jsonl"), "--configfile", "tiny.yaml"], workdir
    )
    servers: list[int] = []
    try:
        wait_for(serving_with_records(workdir, 2, proc), 240, "the bench job to finish 2 requests")
        servers = server_pids_in(workdir)
        done_before = len(finished_lines(records))
        kill_pids(servers)
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    kept = finished_lines(records)  # Snakemake keeps a failed job's outputs (keep-incomplete)
    assert len(kept) == 400, out[-3000:]  # every request is a record: none lost, none hung
    ok = [r for r in kept if r["ok"]]
    assert len(ok) >= done_before
    failed_types = {r["error"]["type"] for r in kept if not r["ok"]}
    assert failed_types <= {"connection", "truncated"}, failed_types
    summary = json.loads((workdir / POINT / "summary.json").read_text())
    assert summary["n_failed"] == 400 - len(ok) and summary["n_failed"] > 0
    bench_log = (workdir / "results/logs/local/piper-joe/bench.log").read_text()
    assert "no scored request succeeded" in bench_log or "error rate" in bench_log


# --- Slurm ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.slurm
def test_scancel_of_the_slurm_bench_job_leaves_no_server_and_keeps_records(workdir: Path):
    cluster_or_skip()
    records = workdir / POINT / "records.jsonl"
    cmd = [
        SNAKEMAKE,
        str(POINT / "records.jsonl"),
        "--profile",
        "profiles/slurm",
        "--workflow-profile",
        "none",
    ]
    cmd += ["--configfile", "tiny.yaml"]
    proc = start_snakemake(cmd, workdir)
    servers: list[int] = []
    try:
        wait_for(serving_with_records(workdir, 2, proc), 300, "the Slurm bench job to serve")
        servers = server_pids_in(workdir)
        done_before = len(finished_lines(records))
        job_ids = subprocess.run(
            ["squeue", "-h", "-o", "%i %o"], capture_output=True, text=True, check=True
        ).stdout
        ours = [line.split()[0] for line in job_ids.splitlines() if str(workdir) in line]
        if not ours:  # the command column may be cut: fall back to the job's working folder
            listing = subprocess.run(
                ["squeue", "-h", "-o", "%i %Z"], capture_output=True, text=True, check=True
            ).stdout
            ours = [ln.split()[0] for ln in listing.splitlines() if str(workdir) in ln]
        assert ours, f"no Slurm job of this workflow in squeue:\n{job_ids}"
        subprocess.run(["scancel", *ours], check=True)
        wait_for(lambda: not any(Path(f"/proc/{p}").exists() for p in servers), 90, "no server")
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # lets Snakemake scancel what it submitted
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(60)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        kill_pids(servers)
    assert proc.returncode != 0
    assert not server_pids_in(workdir)
    kept = finished_lines(records)
    assert len([r for r in kept if r["ok"]]) >= done_before, out[-3000:]
