"""The resource sampler against real processes (/proc via psutil) and a fake nvidia-smi.

The fake prints what real ``nvidia-smi --format=csv,noheader,nounits`` prints (one line per
GPU or per compute app, plain numbers, ``[N/A]`` where a field is unsupported); a real GPU
cannot exist here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from thetalker.pipeline.sampler import ResourceSampler, parse_apps_csv, parse_gpu_csv

BURN_CPU_S = 0.5  # CPU seconds the parent of the process tree burns while sampled

# A parent that starts a child; each allocates (and touches) memory; on "go" (stdin) the parent
# burns 0.5 s of its own CPU time (not of wall clock: the same work on any machine, busy or not)
# and both wait to be killed. RSS of the tree must cover both allocations.
_TREE_SCRIPT = textwrap.dedent(
    """
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c",
        "import sys, time; b = b'x' * ({child_mib} << 20); print('child', flush=True); "
        "time.sleep(600)"], stdout=subprocess.PIPE, text=True)
    child.stdout.readline()
    block = b'y' * ({parent_mib} << 20)
    print('allocated', flush=True)
    sys.stdin.readline()
    end = time.process_time() + {burn_cpu_s}
    while time.process_time() < end:
        pass
    print('ready', flush=True)
    time.sleep(600)
    """
)


@pytest.fixture
def process_tree() -> Iterator[subprocess.Popen[str]]:
    script = _TREE_SCRIPT.format(child_mib=120, parent_mib=80, burn_cpu_s=BURN_CPU_S)
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # like a launched server: its own process group
    )
    try:
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole group: parent and child
        proc.wait(timeout=30)
        assert proc.stdout is not None and proc.stdin is not None
        proc.stdout.close()
        proc.stdin.close()


def _wait_samples(sampler: ResourceSampler, more_than: int, timeout_s: float = 60) -> int:
    """Until the sampler has taken more than `more_than` samples (a wait, not a limit)."""
    deadline = time.monotonic() + timeout_s
    while (n := sampler.result()["samples"]) <= more_than:
        assert time.monotonic() < deadline, f"the sampler took {n} samples in {timeout_s} s"
        time.sleep(0.02)
    return n


def _tree_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each process in the tree, as the OS counts them: the
    counters the sampler reads, each only ever growing while its process lives."""
    root = psutil.Process(pid)
    return {p.pid: sum(p.cpu_times()[:2]) for p in [root, *root.children(recursive=True)]}


def _used(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(after[pid] - before[pid] for pid in after)


def test_proc_sampler_sees_the_whole_tree_memory_and_cpu(process_tree) -> None:
    assert process_tree.stdout is not None and process_tree.stdin is not None
    assert process_tree.stdout.readline().strip() == "allocated"
    tree_pids = set(_tree_cpu(process_tree.pid))
    assert len(tree_pids) == 2  # the parent and its child, both alive until the fixture ends
    # The sampler counts each process's CPU from its first sample (in __enter__) to its last
    # (in __exit__). Readings of the same counters taken outside and just inside those two
    # samples bracket it, on any machine: no tolerance, no burn duration.
    outside_before = _tree_cpu(process_tree.pid)
    with ResourceSampler(pid=process_tree.pid, interval_s=0.1, source="auto") as sampler:
        inside_before = _tree_cpu(process_tree.pid)
        before = _wait_samples(sampler, 0)
        process_tree.stdin.write("go\n")
        process_tree.stdin.flush()
        assert process_tree.stdout.readline().strip() == "ready"  # the burn ran while sampled
        _wait_samples(sampler, before)
        inside_after = _tree_cpu(process_tree.pid)
    outside_after = _tree_cpu(process_tree.pid)
    result = sampler.result()
    assert result["source"] == "proc"
    assert result["samples"] >= 2
    assert set(outside_after) == tree_pids  # no process came or went while sampled
    # 120 MiB in the child plus 80 MiB in the parent, both touched: the summed RSS covers both.
    assert result["peak_memory_mib"] >= 200
    # cpu_seconds is rounded to 0.01 s, and rounding keeps order.
    lower = round(_used(inside_before, inside_after), 2)
    upper = round(_used(outside_before, outside_after), 2)
    assert 0 < lower <= result["cpu_seconds"] <= upper  # > 0: the parent burned CPU inside
    assert result["peak_utilization_pct"] > 0
    assert result["errors"] == 0


def test_proc_sampler_survives_the_process_exiting() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    try:
        with ResourceSampler(pid=proc.pid, interval_s=0.05) as sampler:
            proc.wait(timeout=30)
            time.sleep(0.3)  # samples after the exit fail inside the thread, not here
    finally:
        proc.kill()
        proc.wait()
    result = sampler.result()
    assert result["source"] == "proc"
    assert result["samples"] >= 1
    assert result["errors"] >= 1
    assert "NoSuchProcess" in result["last_error"]


def test_no_pid_and_no_gpu_samples_nothing(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    with ResourceSampler(pid=None, interval_s=0.05) as sampler:
        time.sleep(0.1)
    assert sampler.result()["source"] == "none"
    assert sampler.result()["samples"] == 0


def _fake_nvidia_smi(bin_dir: Path, gpu_lines: list[str], apps: str, exit_code: int = 0) -> Path:
    """An nvidia-smi that prints the next of ``gpu_lines`` (the last one repeats) for
    --query-gpu and ``apps`` for --query-compute-apps, logging its arguments."""
    bin_dir.mkdir(exist_ok=True)
    for i, text in enumerate(gpu_lines):
        (bin_dir / f"gpu{i}.csv").write_text(text)
    (bin_dir / "apps.csv").write_text(apps)
    script = bin_dir / "nvidia-smi"
    script.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/sh
            d={bin_dir}
            echo "$*" >> $d/args.log
            [ {exit_code} -ne 0 ] && {{ echo "NVIDIA-SMI has failed" >&2; exit {exit_code}; }}
            case "$1" in
              --query-gpu=*)
                n=$(cat $d/count 2>/dev/null || echo 0)
                [ -e $d/gpu$n.csv ] || n={len(gpu_lines) - 1}
                cat $d/gpu$n.csv
                echo $((n + 1)) > $d/count ;;
              --query-compute-apps=*) cat $d/apps.csv ;;
            esac
            """
        )
    )
    script.chmod(0o755)
    return script


def test_nvidia_smi_peaks_and_process_memory(tmp_path, monkeypatch) -> None:
    me = os.getpid()
    bin_dir = tmp_path / "bin"
    # Two GPUs; the second has no utilisation reading. Memory climbs to 7000+1024 then falls.
    _fake_nvidia_smi(
        bin_dir,
        ["2048, 30\n1024, [N/A]\n", "7000, 90\n1024, [N/A]\n", "3000, 60\n1024, [N/A]\n"],
        f"{me}, 1500\n{me}, 500\n4194303, 700\n",
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with ResourceSampler(pid=me, interval_s=0.05) as sampler:
        _wait_samples(sampler, 2)  # the three answers of the fake, however busy the machine
    result = sampler.result()
    assert result["source"] == "nvidia-smi"
    assert result["errors"] == 0, result["last_error"]
    assert result["samples"] >= 3
    assert result["peak_memory_mib"] == 8024.0  # 7000 + 1024 summed over the job's GPUs
    assert result["peak_utilization_pct"] == 90.0  # [N/A] is left out, not read as 0
    assert 30.0 < result["mean_utilization_pct"] < 90.0
    # Only this process's apps (on both GPUs), not pid 4194303.
    assert result["peak_process_memory_mib"] == 2000.0
    assert result["gpu_ids"] == "0,1"
    args = (bin_dir / "args.log").read_text().splitlines()
    assert "--query-gpu=memory.used,utilization.gpu --format=csv,noheader,nounits --id=0,1" in args
    assert any(a.startswith("--query-compute-apps=pid,used_memory") for a in args)


def test_failing_nvidia_smi_falls_back_to_proc_in_auto(tmp_path, monkeypatch) -> None:
    bin_dir = tmp_path / "bin"
    _fake_nvidia_smi(bin_dir, ["1, 1\n"], "", exit_code=9)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with ResourceSampler(pid=os.getpid(), interval_s=0.05) as sampler:
        time.sleep(0.1)
    assert sampler.result()["source"] == "proc"
    assert sampler.result()["peak_memory_mib"] > 0


def test_forced_nvidia_smi_failure_is_reported(tmp_path) -> None:
    script = _fake_nvidia_smi(tmp_path / "bin", ["1, 1\n"], "", exit_code=9)
    sampler = ResourceSampler(interval_s=0.05, source="nvidia-smi", nvidia_smi=str(script))
    with sampler:  # a failing nvidia-smi never raises out of the sampler
        time.sleep(0.2)
    result = sampler.result()
    assert result["source"] == "nvidia-smi"
    assert result["samples"] == 0
    assert result["errors"] >= 2
    assert "exited 9" in result["last_error"]
    assert "NVIDIA-SMI has failed" in result["last_error"]


def test_parse_real_nvidia_smi_lines() -> None:
    # Verbatim shapes of `nvidia-smi --query-gpu=memory.used,utilization.gpu
    # --format=csv,noheader,nounits` on an H100 and a MIG slice.
    assert parse_gpu_csv("81559, 100\n") == [(81559.0, 100.0)]
    assert parse_gpu_csv("0, [N/A]\n") == [(0.0, None)]
    assert parse_gpu_csv("No devices were found\n") == []
    assert parse_apps_csv("1234, 70000\n5678, [N/A]\n") == {1234: 70000.0}
    assert parse_apps_csv("") == {}


def test_bad_arguments_name_the_field() -> None:
    with pytest.raises(ValueError, match="source 'gpu'"):
        ResourceSampler(source="gpu")
    with pytest.raises(ValueError, match="interval_s"):
        ResourceSampler(interval_s=0)


# A second engine on the machine: a process outside the server's tree and the client's (it
# detaches: its parent exits, so it is nobody's descendant here) that spins one core.
_SPINNER = textwrap.dedent(
    """
    import os
    pid = os.fork()
    if pid:
        print(pid, flush=True)
        os._exit(0)
    os.setsid()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the starter's reader sees the end of its output
    os.dup2(devnull, 2)
    while True:
        pass
    """
)


def test_the_machines_load_beside_another_engine_is_recorded() -> None:
    # Issue 45: measurements beside another running engine said nothing of it. The figure
    # is recorded whatever the machine (no threshold on it here: the marker's logic is
    # test_report.py's); the spinner is nobody's own process, so its CPU is another's.
    from thetalker.pipeline.machine_load import client_pids

    starter = subprocess.run(
        [sys.executable, "-c", _SPINNER], capture_output=True, text=True, check=True, timeout=30
    )
    spinner = psutil.Process(int(starter.stdout.strip()))
    try:
        server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    except OSError:
        spinner.kill()
        raise
    try:
        with ResourceSampler(pid=server.pid, interval_s=0.05) as sampler:
            spun = spinner.cpu_times().user
            deadline = time.monotonic() + 60
            # Inside the window the spinner burns 0.3 s of CPU of its own (CPU, not wall).
            while spinner.cpu_times().user < spun + 0.3 and time.monotonic() < deadline:
                time.sleep(0.05)
        result = sampler.result()
        assert spinner.cpu_times().user >= spun + 0.3
        assert isinstance(result["other_cpu_pct"], float)
        assert 0.0 < result["other_cpu_pct"] <= 100.0
        assert result["cpus"] == psutil.cpu_count() and result["load_average_1m"] >= 0.0
        own = client_pids({server.pid}, os.getpid())
        assert os.getpid() in own and server.pid not in own and spinner.pid not in own
    finally:
        spinner.kill()
        server.kill()
        server.wait(timeout=10)
        spinner.wait(timeout=10)
