"""Reliability of a running workflow: stopping Snakemake, the bench job or a Slurm job while a
server serves, and a server that dies mid-run. Nothing may be left running (checked by PID)
and `records.jsonl` must keep every request that had finished.

Every test runs the embedded default (the real local Piper server) on a temporary copy of the
workflow with a tiny config. The helpers here are shared with test_reliability_input.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from tests.support.processes import cmdline, kill_pids, processes_in
from tests.support.workflow_copy import REPO, SNAKEMAKE, smk, smk_env
from tests.support.workflow_copy import copy_workflow as copy_workflow_files
from thetalker.pipeline import config_checks as wfc

__all__ = [
    "REPO",
    "copy_workflow",
    "smk",
    "processes_in",
    "server_pids_in",
    "kill_pids",
    "finished_lines",
    "tiny_config",
]

POINT = Path("results/runs/local/piper-joe/c1")
SERVER_LOG = Path("results/logs/local/piper-joe/server.log")


def tiny_config(requests: int = 2, **changes: object) -> dict:
    """The embedded default with one system, one point: the smallest real run."""
    config = {
        "prompts": "prompts/seed_tts_eval_en_100.jsonl",
        "seed": 42,
        "warmup": 0,
        "concurrency": [1],
        "requests": {1: requests},
        "request_timeout_s": 60,
        "health_timeout_s": 120,
        "max_error_rate": 0.0,
        "report": {"headline_concurrency": 1, "ratio": ["local", "local"]},
        "systems": {"local": {"launcher": "local", "use_deploy_file": True}},
        "models": {
            "piper-joe": {
                "model_id": "piper-joe",
                "deploy": "piper-joe",
                "sample_rate": 22050,
                "voice": {"speaker": "joe"},
            }
        },
    }
    config.update(changes)
    return config


def copy_workflow(dest: Path, config: dict | None = None) -> Path:
    """A copy of the workflow at `dest`, with `config` written as `tiny.yaml`."""
    copy_workflow_files(dest)
    if config is not None:
        (dest / "tiny.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return dest


def server_pids_in(directory: Path) -> list[int]:
    """PIDs of local servers (`python -m thetalker.server`) started inside `directory`."""
    return [pid for pid in processes_in(directory) if "thetalker.server" in cmdline(pid)]


def finished_lines(path: Path) -> list[dict]:
    """Every line of a records file, each parsed (a torn line fails the test)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """The workflow copy; whatever still runs in it afterwards fails the test and is killed."""
    dest = copy_workflow(tmp_path / "wf", tiny_config(requests=400))
    yield dest
    # A stopped job may still be unwinding (stopping its server takes up to its grace).
    deadline = time.monotonic() + 60
    while (leftovers := processes_in(dest)) and time.monotonic() < deadline:
        time.sleep(0.2)
    described = {pid: cmdline(pid)[:200] for pid in leftovers}
    kill_pids(leftovers)
    assert not leftovers, f"processes left running in the workflow copy: {described}"


def _start(cmd: list[str], cwd: Path) -> subprocess.Popen[str]:
    # Its own session: a signal to the group is what Ctrl-C in a terminal (SIGINT) or a
    # supervisor stopping a unit (SIGTERM) delivers: Snakemake and its jobs get it at once.
    return subprocess.Popen(
        cmd,
        cwd=cwd,
        env=smk_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _serving_with_records(
    workdir: Path, at_least: int, proc: subprocess.Popen[str]
) -> Callable[[], bool]:
    def ready() -> bool:
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            pytest.fail(f"exited with {proc.returncode} before serving:\n{out[-3000:]}")
        return bool(server_pids_in(workdir)) and (
            len(finished_lines(workdir / POINT / "records.jsonl")) >= at_least
        )

    return ready


def _stop_and_check(
    proc: subprocess.Popen[str], workdir: Path, sig: int, records: Path, group: bool = True
) -> tuple[str, list[dict], int]:
    """Send `sig` once requests have finished; return the output, the records kept and how
    many had finished before the signal."""
    servers: list[int] = []
    try:
        wait_for(_serving_with_records(workdir, 2, proc), 240, "the bench job to finish 2 requests")
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
    proc = _start([SNAKEMAKE, str(POINT / "records.jsonl"), "--configfile", "tiny.yaml"], workdir)
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
    proc = _start(cmd, workdir)
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
    proc = _start([SNAKEMAKE, str(POINT / "records.jsonl"), "--configfile", "tiny.yaml"], workdir)
    servers: list[int] = []
    try:
        wait_for(_serving_with_records(workdir, 2, proc), 240, "the bench job to finish 2 requests")
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


def _cluster_or_skip() -> None:
    for tool in ("sinfo", "sbatch", "squeue", "scancel"):
        if shutil.which(tool) is None:
            pytest.skip(f"Slurm: {tool} not found (no cluster; .ci/slurm-up.sh starts one)")
    done = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, check=False)
    states = {s.strip().rstrip("*~#") for s in done.stdout.split()}
    if done.returncode != 0 or not states & {"idle", "mixed", "allocated", "completing"}:
        pytest.skip(f"Slurm: no node takes jobs (sinfo: {done.stdout.strip() or done.stderr})")


@pytest.mark.slow
@pytest.mark.slurm
def test_scancel_of_the_slurm_bench_job_leaves_no_server_and_keeps_records(workdir: Path):
    _cluster_or_skip()
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
    proc = _start(cmd, workdir)
    servers: list[int] = []
    try:
        wait_for(_serving_with_records(workdir, 2, proc), 300, "the Slurm bench job to serve")
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
