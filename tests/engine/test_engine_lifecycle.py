"""The bench job (`python -m thetalker.pipeline.serve_and_sweep`, what each Snakemake bench job
runs) against the real engine's process tree: an API server, two stage engine processes, a
worker each, a resource tracker. Whatever ends the job, no stage worker may be left:

- a deploy key the engine rejects fails the job, exit 1, with the engine's own reason;
- SIGKILL of the job leaves the engine running (nothing can stop it then); the rerun finds
  it from the job's record, stops its whole tree, serves, and a Ctrl-C then stops its own;
- SIGTERM (Snakemake's, Slurm's scancel) stops it all.

Each job's system sets a variable unique to the test run: every process of its engine
inherits it, so "no process left" is checked over the whole machine, stage workers included,
whatever their process group. Each start costs 60-90 s of engine start-up.
"""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import yaml

from tests.engine.conftest import (
    DEPLOY,
    ENGINE_ENV,
    HEALTH_TIMEOUT_S,
    PROMPTS,
    SPEAKER,
    processes_with,
)
from thetalker.lifecycle.leftover import TOKEN_VAR, read_record
from thetalker.pipeline import config_checks as wfc

READY = "Application startup complete."
STOP_WAIT_S = 120.0  # the launcher's grace (20 s) then SIGKILL, on a busy machine


def job_json(venv: Path, model: Path, deploy_dir: Path, marker: str, requests: int) -> str:
    """The bench job of one (system, model): the engine venv as the system's serving_env, the
    tiny model with the deploy file in `deploy_dir`, `requests` scored requests at c=1."""
    from tests.unit.test_workflow_config import checked

    config = {
        "prompts": str(PROMPTS),
        "concurrency": [1],
        "requests": {1: requests},
        "warmup": 1,
        "request_timeout_s": 300,
        "health_timeout_s": HEALTH_TIMEOUT_S,
        "max_error_rate": 0.0,
        "deploy_dir": str(deploy_dir),
        "capacity": {"refine": False},
        "report": {"headline_concurrency": 1, "ratio": ["engine", "engine"]},
        "systems": {
            "engine": {
                "launcher": "vllm-omni",
                "use_deploy_file": True,
                "serving_env": str(venv),
                "env": {**ENGINE_ENV, "THETALKER_ENGINE_TEST_RUN": marker},
            }
        },
        "models": {
            "tiny": {
                "model_id": str(model),
                "deploy": "tiny",
                "sample_rate": 24000,
                "voice": {"task_type": "CustomVoice", "speaker": SPEAKER},
            }
        },
    }
    config = checked(config)
    wfc.check_config(config)
    return wfc.bench_job(config, "engine", "tiny", hash_files=False).to_json()


def deploy_dir(tmp: Path, **stage0: object) -> Path:
    """A folder holding the tier's deploy file as `tiny.yaml`, stage 0 changed by `stage0`."""
    folder = tmp / "deploy"
    folder.mkdir(exist_ok=True)
    data = yaml.safe_load(DEPLOY.read_text())
    data["stages"][0].update(copy.deepcopy(stage0))
    (folder / "tiny.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return folder


def start_job(job: str, work: Path) -> subprocess.Popen:
    """The bench job as Snakemake runs it, in a session of its own (signals go to it alone)."""
    work.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "thetalker.pipeline.serve_and_sweep", "--job", job]
    cmd += ["--server-log", str(work / "server.log")]
    cmd += ["--records", str(work / "c1" / "records.jsonl")]
    with open(work / "job.log", "ab") as log:
        return subprocess.Popen(
            cmd, cwd=work, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def wait_serving(job: subprocess.Popen, work: Path, starts: int = 1) -> str:
    """Wait until the job's engine is up for the `starts`-th time in its log; its launch
    token (from the job's PID record beside the log)."""
    log = work / "server.log"
    deadline = time.monotonic() + HEALTH_TIMEOUT_S + 60
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.is_file() else ""
        if text.count(READY) >= starts:
            record = read_record(work / "server.pid.json")
            assert record is not None and record.get("token"), "no PID record while serving"
            return str(record["token"])
        assert job.poll() is None, f"job exited {job.returncode}:\n{tail(work)}"
        time.sleep(1.0)
    raise AssertionError(f"engine not up in time:\n{tail(work)}")


def tail(work: Path) -> str:
    parts = []
    for name in ("job.log", "server.log"):
        path = work / name
        if path.is_file():
            lines = path.read_text(errors="replace").splitlines()[-30:]
            parts.append(f"--- {name}\n" + "\n".join(lines))
    return "\n".join(parts)


def wait_gone(needle: bytes, timeout_s: float = STOP_WAIT_S) -> list[int]:
    deadline = time.monotonic() + timeout_s
    left = processes_with(needle)
    while left and time.monotonic() < deadline:
        time.sleep(1.0)
        left = processes_with(needle)
    return left


def test_a_deploy_key_the_engine_rejects_fails_the_job_with_its_reason(
    engine_tier, tiny_model, tmp_path
):
    # The talker's positions end at 8192 (max_position_embeddings): vLLM refuses a longer
    # max_model_len when the stage builds its engine, inside the stage process.
    marker = uuid.uuid4().hex
    deploy = deploy_dir(tmp_path, max_model_len=100000)
    job = start_job(job_json(engine_tier, tiny_model, deploy, marker, 1), tmp_path / "job")
    try:
        rc = job.wait(timeout=HEALTH_TIMEOUT_S + 120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    output = (tmp_path / "job" / "job.log").read_text(errors="replace")
    assert rc == 1, output[-3000:]
    assert "max_model_len" in output and "100000" in output, output[-3000:]
    assert wait_gone(f"THETALKER_ENGINE_TEST_RUN={marker}".encode()) == []


def test_sigkill_then_rerun_then_ctrl_c_leave_no_stage_worker(engine_tier, tiny_model, tmp_path):
    marker = uuid.uuid4().hex
    needle = f"THETALKER_ENGINE_TEST_RUN={marker}".encode()
    job = job_json(engine_tier, tiny_model, deploy_dir(tmp_path), marker, 200)
    work = tmp_path / "job"
    first = start_job(job, work)
    try:
        token = wait_serving(first, work)
        os.killpg(first.pid, signal.SIGKILL)  # the job only: its engine has a session of its own
        first.wait(timeout=30)
        orphans = processes_with(f"{TOKEN_VAR}={token}".encode())
        assert len(orphans) >= 3, "the killed job's engine should still run (API + stages)"

        rerun = start_job(job, work)  # the same job: the same PID record beside its log
        try:
            wait_serving(rerun, work, starts=2)
            assert processes_with(f"{TOKEN_VAR}={token}".encode()) == []
            os.killpg(rerun.pid, signal.SIGINT)  # Ctrl-C
            assert rerun.wait(timeout=STOP_WAIT_S) == 130, tail(work)
        finally:
            if rerun.poll() is None:
                os.killpg(rerun.pid, signal.SIGKILL)
        assert wait_gone(needle) == [], tail(work)
        assert not (work / "server.pid.json").exists()
    finally:
        for pid in processes_with(needle):  # whatever a failure left: never the next test's
            os.kill(pid, signal.SIGKILL)


def test_sigterm_leaves_no_stage_worker(engine_tier, tiny_model, tmp_path):
    marker = uuid.uuid4().hex
    needle = f"THETALKER_ENGINE_TEST_RUN={marker}".encode()
    work = tmp_path / "job"
    job = start_job(job_json(engine_tier, tiny_model, deploy_dir(tmp_path), marker, 200), work)
    try:
        wait_serving(job, work)
        assert len(processes_with(needle)) >= 3
        os.killpg(job.pid, signal.SIGTERM)
        assert job.wait(timeout=STOP_WAIT_S) != 0
        assert wait_gone(needle) == [], tail(work)
        assert not (work / "server.pid.json").exists()
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        for pid in processes_with(needle):
            os.kill(pid, signal.SIGKILL)
