"""The bench job (`python -m thetalker.pipeline.serve_and_sweep`, what each Snakemake bench job
runs) against the real engine's process tree: an API server, two stage engine processes, a
worker each, a resource tracker. Whatever ends the job, no stage worker may be left:

- a deploy key the engine rejects (a stage's `max_num_batched_tokens` below its
  `max_num_seqs`) fails the job, exit 1, with the engine's own reason;
- SIGKILL of the job leaves the engine running (nothing can stop it then); the rerun finds
  it from the job's record, stops its whole tree, serves, and a Ctrl-C then stops its own;
- SIGTERM (Snakemake's, Slurm's scancel) stops it all.

"No process left" is checked on the engine's process group (the launcher starts the server
in a session of its own; every stage process and worker stays in its group, also once
reparented to init): read from the job's PID record while it serves. Not by environment: the
stage processes rename themselves (setproctitle, `VLLM::Worker`), which overwrites what
/proc/PID/environ shows. Each start costs 60-90 s of engine start-up.
"""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
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
from thetalker.lifecycle.leftover import group_members, read_record
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


def wait_serving(job: subprocess.Popen, work: Path, starts: int = 1) -> int:
    """Wait until the job's engine is up for the `starts`-th time in its log; its process
    group (the server's PID, from the job's PID record beside the log)."""
    log = work / "server.log"
    deadline = time.monotonic() + HEALTH_TIMEOUT_S + 60
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.is_file() else ""
        if text.count(READY) >= starts:
            record = read_record(work / "server.pid.json")
            assert record is not None and record.get("pid"), "no PID record while serving"
            return int(record["pid"])
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


def wait_gone(find: Callable[[], list[int]], timeout_s: float = STOP_WAIT_S) -> list[int]:
    """What `find` still finds once it finds nothing, or at the deadline."""
    deadline = time.monotonic() + timeout_s
    left = find()
    while left and time.monotonic() < deadline:
        time.sleep(1.0)
        left = find()
    return left


def members(*pgids: int) -> Callable[[], list[int]]:
    return lambda: [pid for pgid in pgids for pid in group_members(pgid)]


def kill_groups(*pgids: int) -> None:
    """Whatever a failing test left: never the next test's load."""
    for pgid in pgids:
        if group_members(pgid):
            os.killpg(pgid, signal.SIGKILL)


def test_a_deploy_key_the_engine_rejects_fails_the_job_with_its_reason(
    engine_tier, tiny_model, tmp_path
):
    # vllm-omni builds each stage's scheduler config with vLLM's own check: a step must fit
    # one token of every running sequence. (A stage-0 max_model_len past the talker's 8192
    # positions, by contrast, is accepted without a word by 0.30.0.)
    marker = uuid.uuid4().hex
    deploy = deploy_dir(tmp_path, max_num_batched_tokens=4)  # max_num_seqs is 8
    job = start_job(job_json(engine_tier, tiny_model, deploy, marker, 1), tmp_path / "job")
    try:
        rc = job.wait(timeout=HEALTH_TIMEOUT_S + 120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    output = (tmp_path / "job" / "job.log").read_text(errors="replace")
    assert rc == 1, output[-3000:]
    assert "error: ServerStartError: server exited with code 1 during startup" in output
    assert "max_num_batched_tokens (4) must be >= max_num_seqs (8)" in output, output[-3000:]
    # It failed before any stage started: the API server (and its resource tracker) are gone.
    assert wait_gone(lambda: processes_with(f"THETALKER_ENGINE_TEST_RUN={marker}".encode())) == []


def test_sigkill_then_rerun_then_ctrl_c_leave_no_stage_worker(engine_tier, tiny_model, tmp_path):
    job = job_json(engine_tier, tiny_model, deploy_dir(tmp_path), uuid.uuid4().hex, 200)
    work = tmp_path / "job"
    first = start_job(job, work)
    first_group = second_group = 0
    try:
        first_group = wait_serving(first, work)
        os.killpg(first.pid, signal.SIGKILL)  # the job only: its engine has a session of its own
        first.wait(timeout=30)
        # API server, resource tracker, two stage engines and a worker each: still running,
        # since nothing is left to stop them.
        assert len(group_members(first_group)) >= 5, group_members(first_group)

        rerun = start_job(job, work)  # the same job: the same PID record beside its log
        try:
            second_group = wait_serving(rerun, work, starts=2)
            assert second_group != first_group
            assert group_members(first_group) == [], "the rerun did not stop the leftover"
            # Ctrl-C as a terminal sends it: to the job's whole process group (its record
            # writer and fork server too, which ignore it); the engine has a session of its own.
            os.killpg(rerun.pid, signal.SIGINT)
            assert rerun.wait(timeout=STOP_WAIT_S) == 130, tail(work)
        finally:
            if rerun.poll() is None:
                os.killpg(rerun.pid, signal.SIGKILL)
        assert wait_gone(members(first_group, second_group)) == [], tail(work)
        assert not (work / "server.pid.json").exists()
    finally:
        kill_groups(*(g for g in (first_group, second_group) if g))


def test_sigterm_leaves_no_stage_worker(engine_tier, tiny_model, tmp_path):
    work = tmp_path / "job"
    job_spec = job_json(engine_tier, tiny_model, deploy_dir(tmp_path), uuid.uuid4().hex, 200)
    job = start_job(job_spec, work)
    group = 0
    try:
        group = wait_serving(job, work)
        assert len(group_members(group)) >= 5, group_members(group)
        os.killpg(job.pid, signal.SIGTERM)
        assert job.wait(timeout=STOP_WAIT_S) != 0
        assert wait_gone(members(group)) == [], tail(work)
        assert not (work / "server.pid.json").exists()
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        kill_groups(*([group] if group else []))
