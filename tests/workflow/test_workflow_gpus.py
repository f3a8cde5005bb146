"""Every GPU of a node: the published-shaped run (two models x two systems, tests/configs/
gpu4.yaml) on a simulated 4-GPU node (the stand-ins, STANDIN_GPUS=4) with
`--resources gpu=4` runs its four bench jobs at once, each on its own GPU: the stand-in
servers wait at a barrier until four are up together (a run one job after another fails
there), each registers as computing on the GPU its CUDA_VISIBLE_DEVICES names (so a second
server on one GPU would be refused by the next job's empty-GPU check), provenance names four
different GPUs, and no slot is held once the run is over; a bench job SIGKILLed while it holds
a GPU leaves no slot held, and its rerun takes the GPU over."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.paths import CONFIGS
from tests.support.processes import cmdline, kill_pids, processes_in
from tests.support.workflow_copy import SNAKEMAKE, copy_workflow, smk, smk_env
from thetalker.lifecycle.gpu_slots import held_slots

pytestmark = pytest.mark.slow

JOBS = [(s, m) for s in ("vllm-omni", "thestage-vllm-omni") for m in ("qwen3tts17b", "qwen3tts06b")]


@pytest.fixture
def node(tmp_path: Path):
    workdir = copy_workflow(tmp_path / "wf")
    shutil.copytree(CONFIGS, workdir / "configs")
    env = smk_env(
        STANDIN_GPUS="4",
        STANDIN_GPU_STATE=str(tmp_path / "gpu-state"),
        THETALKER_GPU_SLOTS_DIR=str(tmp_path / "slots"),
        THETALKER_GPU_WAIT_S="300",
    )
    for key in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID", "STANDIN_GPU_PIDS", "THETALKER_GPU_POOL"):
        env.pop(key, None)
    yield workdir, env
    left = {pid: cmdline(pid)[:200] for pid in processes_in(workdir)}
    kill_pids(list(left))
    assert not left, f"processes outlived the run: {left}"


def _recorded_pid(record: Path) -> int | None:
    """The server's PID once its launcher has recorded it (None before, or mid-write)."""
    try:
        return json.loads(record.read_text()).get("pid")
    except (OSError, ValueError):
        return None


def test_four_jobs_at_once_each_on_its_own_gpu(node, tmp_path):
    workdir, env = node
    env = {**env, "STANDIN_BARRIER_DIR": str(tmp_path / "barrier"), "STANDIN_BARRIER_N": "4"}
    env["STANDIN_BARRIER_S"] = "240"
    result = smk(
        workdir,
        "results/points.csv",  # targets first: --resources takes every word after it
        "--configfile", "configs/gpu4.yaml", "--cores", "4", "--resources", "gpu=4",
        env=env,
        timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    uuids = {}
    for system, model in JOBS:
        provenance = json.loads(
            (workdir / f"results/runs/{system}/{model}/c1/provenance.json").read_text()
        )
        gpus = provenance["hardware"]["gpus"]
        assert len(gpus) == 1, gpus  # the job's GPU, not the node's four
        uuids[(system, model)] = gpus[0]["uuid"]
        server_log = (workdir / f"results/logs/{system}/{model}/server.log").read_text()
        assert f"CUDA_VISIBLE_DEVICES={gpus[0]['index']} CUDA_DEVICE_ORDER=PCI_BUS_ID" in server_log
        assert "barrier: 4 servers up at once" in server_log
    assert len(set(uuids.values())) == 4, uuids
    assert held_slots(env) == []


def test_a_killed_job_leaves_no_slot_held_and_its_rerun_takes_the_gpu(node, tmp_path):
    workdir, env = node
    env = {**env, "STANDIN_GPUS": "1", "STANDIN_STARTUP_S": "60"}
    target = "results/runs/vllm-omni/qwen3tts17b/c1/records.jsonl"
    args = [target, "--configfile", "configs/gpu4.yaml", "--cores", "1", "--resources", "gpu=1"]
    proc = subprocess.Popen(
        [SNAKEMAKE, *args], cwd=workdir, env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        # Killed while its server loads inside its MPS daemon (the server's PID recorded):
        # the slot, the server and the daemon are all left for the rerun to deal with.
        record = workdir / "results/logs/vllm-omni/qwen3tts17b/server.pid.json"
        deadline = time.monotonic() + 240
        while not ((held := held_slots(env)) and _recorded_pid(record)):
            assert proc.poll() is None, "snakemake ended before its server started"
            assert time.monotonic() < deadline, "the bench job never started its server"
            time.sleep(0.1)
        (holder,) = held
        os.kill(holder["pid"], signal.SIGKILL)  # the bench job, mid-run (its server loading)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert held_slots(env) == []  # the dead job's slot is free
    rerun = smk(workdir, *args, env={**env, "STANDIN_STARTUP_S": "0.2"}, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-4000:]
    bench_log = (workdir / "results/logs/vllm-omni/qwen3tts17b/bench.log").read_text()
    assert "which is gone; its slot is taken over" in bench_log
    assert "stopping leftover server PID" in bench_log
    assert "stopping leftover MPS daemon" in bench_log
    assert held_slots(env) == []
