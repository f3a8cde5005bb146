"""GPU slots on one node (thetalker.lifecycle.gpu_slots), on the nvidia-smi stand-in's
simulated node (STANDIN_GPUS): distinct GPUs for concurrent holders, a SIGKILLed holder's slot
free at once and its stale record reported, the user's CUDA_VISIBLE_DEVICES narrowing the
pool, Slurm's grant kept as it is, and the empty-GPU check on the job's own GPU only."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.paths import REPO, STANDINS
from tests.support.processes import pid_alive
from thetalker.lifecycle.gpu import compute_apps, gpu_compute_pids, node_gpus, visible_gpus
from thetalker.lifecycle.gpu_slots import GpuSlotError, gpu_slot, held_slots

# A holder process: takes a slot, writes what it got, then holds it until `release` appears.
HOLDER = """
import json, sys, time
from pathlib import Path
from thetalker.lifecycle.gpu_slots import gpu_slot
out, release = Path(sys.argv[1]), Path(sys.argv[2])
with gpu_slot(sys.argv[3]) as slot:
    import os
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"index": slot.gpu.index, "uuid": slot.gpu.uuid,
        "cvd": os.environ["CUDA_VISIBLE_DEVICES"], "order": os.environ["CUDA_DEVICE_ORDER"],
        "stale": slot.freed_stale}))
    os.replace(tmp, out)  # whole, or not there
    while not release.exists():
        time.sleep(0.02)
"""


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A simulated 4-GPU node: the stand-ins first on PATH, a private slots folder."""
    monkeypatch.setenv("PATH", f"{STANDINS}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_GPUS", "4")
    monkeypatch.setenv("THETALKER_GPU_SLOTS_DIR", str(tmp_path / "slots"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("STANDIN_GPU_PIDS", raising=False)
    monkeypatch.delenv("THETALKER_GPU_POOL", raising=False)
    monkeypatch.setenv("THETALKER_GPU_WAIT_S", "60")  # a broken slot fails, never hangs
    return tmp_path


def start_holder(tmp_path: Path, name: str, **env: str) -> tuple[subprocess.Popen, Path, Path]:
    out, release = tmp_path / f"{name}.json", tmp_path / f"{name}.release"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out), str(release), name],
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, out, release


def wait_for(path: Path, proc: subprocess.Popen, timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, f"{path.name} never got a slot"
        time.sleep(0.02)
    return json.loads(path.read_text())


def test_the_stand_in_is_a_node_of_standin_gpus_each_with_its_uuid(node):
    gpus = node_gpus()
    assert [g.index for g in gpus] == ["0", "1", "2", "3"]
    assert len({g.uuid for g in gpus}) == 4 and all(g.uuid.startswith("GPU-") for g in gpus)
    assert {g.memory_total_mib for g in gpus} == {81559.0}


def test_concurrent_holders_get_different_gpus_and_a_fifth_waits_for_a_free_one(node):
    holders = [start_holder(node, f"job{i}") for i in range(4)]
    got = [wait_for(out, proc) for proc, out, _ in holders]
    assert sorted(g["index"] for g in got) == ["0", "1", "2", "3"]
    assert all(g["cvd"] == g["index"] and g["order"] == "PCI_BUS_ID" for g in got)
    assert len(held_slots()) == 4
    fifth, fifth_out, fifth_release = start_holder(node, "job4")
    time.sleep(0.5)
    assert not fifth_out.exists() and fifth.poll() is None  # all four held: it waits
    first_proc, _, first_release = holders[0]
    first_release.touch()
    first_proc.wait(timeout=30)
    assert wait_for(fifth_out, fifth)["index"] == got[0]["index"]  # the freed GPU
    for proc, _, release in [*holders[1:], (fifth, fifth_out, fifth_release)]:
        release.touch()
        proc.wait(timeout=30)
    assert held_slots() == []


def test_a_sigkilled_holders_slot_is_free_at_once_and_its_record_reported(node):
    proc, out, _ = start_holder(node, "killed", STANDIN_GPUS="1")
    assert wait_for(out, proc)["index"] == "0"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert held_slots() == []  # the kernel dropped the lock with the process
    said = []
    with gpu_slot("next", env={**os.environ, "STANDIN_GPUS": "1"}, say=said.append) as slot:
        assert slot is not None and slot.gpu.index == "0"
        assert slot.freed_stale is not None and slot.freed_stale["pid"] == proc.pid
        assert slot.freed_stale["label"] == "killed"
    assert any("killed" in line and "gone" in line for line in said)


def test_the_users_cuda_visible_devices_narrows_the_pool(node, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert [g.index for g in visible_gpus()] == ["2", "3"]
    with gpu_slot("a") as a, gpu_slot("b") as b:
        assert {a.gpu.index, b.gpu.index} == {"2", "3"}
        with (
            pytest.raises(GpuSlotError, match=r"no GPU of 2 became free"),
            gpu_slot("c", wait_s=0.2),
        ):
            pass
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"  # restored after the block


def test_under_slurm_the_gpu_is_slurms_and_nothing_is_taken(node, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with gpu_slot("slurm-job") as slot:
        assert slot is not None and slot.source == "slurm" and slot.gpu.index == "1"
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    assert not (node / "slots").exists()


def test_no_nvidia_smi_means_nothing_to_hold(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi anywhere
    with gpu_slot("cpu-job") as slot:
        assert slot is None


def test_the_empty_gpu_check_sees_only_the_jobs_gpu(node, monkeypatch):
    monkeypatch.setenv("STANDIN_GPU_PIDS", "4242@1,77@3")
    assert sorted(compute_apps()) == sorted(
        [(4242, node_gpus()[1].uuid), (77, node_gpus()[3].uuid)]
    )
    assert gpu_compute_pids() == [4242, 77]  # the whole node
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert gpu_compute_pids() == []  # GPU 0 is free: another job's server is no concern
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", node_gpus()[1].uuid)
    assert gpu_compute_pids() == [4242]


def test_a_standin_server_registers_on_the_gpu_it_was_given(node, monkeypatch):
    state = node / "gpu-state"
    state.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (state / str(sleeper.pid)).write_text("2")
        monkeypatch.setenv("STANDIN_GPU_STATE", str(state))
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
        assert gpu_compute_pids() == [sleeper.pid]
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
        assert gpu_compute_pids() == []
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not pid_alive(sleeper.pid)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert gpu_compute_pids() == []  # a dead server computes nowhere


# Issue 36 item 5: the slots folder, in a shared /tmp, was trusted whoever made it, and its
# writes followed links. The folder must be the user's own and not writable by others; lock
# and holder files are opened without following links, the holder's temp name unpredictable.


@pytest.mark.parametrize("how", ["other-owner", "writable-by-others", "symlink"])
def test_a_slots_folder_that_is_not_the_users_own_is_refused(node, monkeypatch, how):
    slots = node / "slots"
    if how == "symlink":
        (node / "elsewhere").mkdir(mode=0o700)
        slots.symlink_to(node / "elsewhere")
    else:
        slots.mkdir(mode=0o700)
        if how == "writable-by-others":
            os.chmod(slots, 0o777)
        elif os.getuid() == 0:
            os.chown(slots, 4242, 4242)  # another user made it first
        else:
            pytest.skip("giving a folder to another user needs root")
    want = {
        "other-owner": "owned by uid 4242, not this user (0)",
        "writable-by-others": "writable by others (mode 777)",
        "symlink": "a symbolic link",
    }[how]
    line = re.escape(f"GPU slots folder {slots} is {want}: refused")
    one_gpu = {**os.environ, "STANDIN_GPUS": "1"}
    with pytest.raises(GpuSlotError, match=f"^{line}"), gpu_slot("job", env=one_gpu):
        pass
    if how == "symlink":
        assert not any((node / "elsewhere").iterdir())  # nothing written where it points


def test_slot_files_never_write_through_a_planted_link(node):
    env = {**os.environ, "STANDIN_GPUS": "1"}
    gpu = visible_gpus(env)[0]  # the slot's GPU: the first of the pool
    slots = node / "slots"
    slots.mkdir(mode=0o700)
    victim = node / "victim.txt"
    victim.write_text("precious\n")
    # The holder's old temp name was predictable (its PID): a link there was written through.
    holder_tmp = slots / f"gpu-{gpu.uuid}.holder.{os.getpid()}.tmp"
    holder_tmp.symlink_to(victim)
    with gpu_slot("job", env=env) as slot:
        assert slot is not None
        holder = json.loads((slots / f"gpu-{gpu.uuid}.holder.json").read_text())
        assert holder["pid"] == os.getpid()
    assert victim.read_text() == "precious\n"
    # A link planted at the lock's name is refused, never opened (nor its target created).
    lock = slots / f"gpu-{gpu.uuid}.lock"
    lock.unlink()
    created = node / "created-by-the-job"
    lock.symlink_to(created)
    refused = re.escape(f"{lock} is a symbolic link: refused")
    with pytest.raises(GpuSlotError, match=refused), gpu_slot("job", env=env):
        pass
    assert not created.exists() and victim.read_text() == "precious\n"
