"""The bench job (`python -m thetalker.pipeline.serve_and_sweep`, what each Snakemake bench job
runs) against SGLang-Omni's real engine: its API server and coordinator, the pipeline's stage
process, a resource tracker. Whatever ends the job, no engine process may be left:

- a setting the engine refuses (`enable_torch_compile`, which its Qwen3-TTS engine builder
  rejects) fails the job, exit 1, with the engine's own reason;
- SIGKILL of the job leaves the engine running (nothing can stop it then); the rerun finds
  it from the job's record, stops its whole group, serves, and a Ctrl-C then stops its own;
- SIGTERM (Snakemake's, Slurm's scancel) stops it all.

"No process left" is checked on the engine's process group (the launcher starts the server
in a session of its own; the stage process stays in its group), read from the job's PID
record while it serves. Each start costs one engine start-up (1 to 3 minutes here).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from tests.engine.conftest import processes_with
from tests.engine.sglang.conftest import ENGINE_ARGS, ENGINE_ENV, HEALTH_TIMEOUT_S, SPEAKER
from tests.engine.test_engine_lifecycle import (
    PROMPTS,
    STOP_WAIT_S,
    kill_groups,
    members,
    tail,
    wait_gone,
    wait_serving,
)
from thetalker.lifecycle.leftover import group_members
from thetalker.pipeline import config_checks as wfc

REFUSED = "Qwen3-TTS torch.compile is not supported"  # its engine_builder.adjust_overrides


def job_json(venv: Path, model: Path, marker: str, requests: int, extra: list[str]) -> str:
    """The bench job of one (system, model): the venv as the system's serving_env, the tiny
    model, the tier's engine flags (plus `extra`), `requests` scored requests at c=1."""
    from tests.unit.test_workflow_config import checked

    config = {
        "prompts": str(PROMPTS),
        "concurrency": [1],
        "requests": {1: requests},
        "warmup": 1,
        "request_timeout_s": 300,
        "health_timeout_s": HEALTH_TIMEOUT_S,
        "max_error_rate": 0.0,
        "capacity": {"refine": False},
        "report": {"headline_concurrency": 1, "ratio": ["engine", "engine"]},
        "systems": {
            "engine": {
                "launcher": "sglang-omni",
                "serving_env": str(venv),
                "env": {**ENGINE_ENV, "THETALKER_ENGINE_TEST_RUN": marker},
                "extra_args": [*ENGINE_ARGS, *extra],
            }
        },
        "models": {
            "tiny": {
                "model_id": str(model),
                "sample_rate": 24000,
                "voice": {"task_type": "CustomVoice", "speaker": SPEAKER},
            }
        },
    }
    config = checked(config)
    wfc.check_config(config)
    return wfc.bench_job(config, "engine", "tiny", hash_files=False).to_json()


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


def test_a_setting_the_engine_refuses_fails_the_job_with_its_reason(
    engine_tier, tiny_model, tmp_path
):
    marker = uuid.uuid4().hex
    extra = ["--tts_engine.engine.enable_torch_compile", "true"]
    job = start_job(job_json(engine_tier, tiny_model, marker, 1, extra), tmp_path / "job")
    try:
        rc = job.wait(timeout=HEALTH_TIMEOUT_S + 120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    output = (tmp_path / "job" / "job.log").read_text(errors="replace")
    assert rc == 1, output[-3000:]
    assert "error: ServerStartError: server exited with code" in output, output[-3000:]
    assert REFUSED in output, output[-3000:]
    assert wait_gone(lambda: processes_with(f"THETALKER_ENGINE_TEST_RUN={marker}".encode())) == []


def test_sigkill_then_rerun_then_ctrl_c_leave_no_engine_process(engine_tier, tiny_model, tmp_path):
    job = job_json(engine_tier, tiny_model, uuid.uuid4().hex, 200, [])
    work = tmp_path / "job"
    first = start_job(job, work)
    first_group = second_group = 0
    try:
        first_group = wait_serving(first, work)
        os.killpg(first.pid, signal.SIGKILL)  # the job only: its engine has a session of its own
        first.wait(timeout=30)
        # API server and the pipeline's stage process: still running (the multiprocessing
        # resource tracker, a third, starts only when something asks for it: seen absent in CI).
        assert len(group_members(first_group)) >= 2, group_members(first_group)

        rerun = start_job(job, work)  # the same job: the same PID record beside its log
        try:
            second_group = wait_serving(rerun, work, starts=2)
            assert second_group != first_group
            assert group_members(first_group) == [], "the rerun did not stop the leftover"
            os.killpg(rerun.pid, signal.SIGINT)  # Ctrl-C, as a terminal sends it
            assert rerun.wait(timeout=STOP_WAIT_S) == 130, tail(work)
        finally:
            if rerun.poll() is None:
                os.killpg(rerun.pid, signal.SIGKILL)
        assert wait_gone(members(first_group, second_group)) == [], tail(work)
        assert not (work / "server.pid.json").exists()
    finally:
        kill_groups(*(g for g in (first_group, second_group) if g))


def test_sigterm_leaves_no_engine_process(engine_tier, tiny_model, tmp_path):
    work = tmp_path / "job"
    job = start_job(job_json(engine_tier, tiny_model, uuid.uuid4().hex, 200, []), work)
    group = 0
    try:
        group = wait_serving(job, work)
        assert len(group_members(group)) >= 3, group_members(group)
        os.killpg(job.pid, signal.SIGTERM)
        assert job.wait(timeout=STOP_WAIT_S) != 0
        assert wait_gone(members(group)) == [], tail(work)
        assert not (work / "server.pid.json").exists()
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        kill_groups(*([group] if group else []))
