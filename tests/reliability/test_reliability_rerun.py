"""A rerun while an earlier run of the same job still writes (an orphaned bench job of a
SIGKILLed Snakemake, after `--unlock`): nothing of the earlier run is deleted, neither by the
new job nor by Snakemake, and the refusal names the process that still writes.

The earlier job is stood in for by a process holding the job's lock
(`thetalker.lifecycle.run_lock`), as a live bench job does for as long as it runs.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.bench_jobs import job, records_files
from tests.support.workflow_copy import POINT, SERVER_LOG, copy_workflow, smk, tiny_config
from thetalker.lifecycle.run_lock import RunBusyError, held_locks, lock_path, run_lock
from thetalker.pipeline.serve_and_sweep import run_job

_HOLD = (
    "import sys; from thetalker.lifecycle.run_lock import run_lock\n"
    "with run_lock(sys.argv[1]):\n"
    "    print('held', flush=True); sys.stdin.read()\n"
)


@pytest.fixture
def hold_lock() -> Iterator[callable]:
    """Start a process that holds a lock until the test ends (its stdin closes)."""
    procs: list[subprocess.Popen[str]] = []

    def hold(path: Path) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", _HOLD, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        return proc

    yield hold
    for proc in procs:
        proc.communicate(timeout=30)


def test_a_job_whose_run_is_still_written_refuses_before_deleting_anything(tmp_path, hold_lock):
    spec = job(tmp_path)
    run_dir = tmp_path / "runs" / spec.system / spec.model
    files = records_files(run_dir, spec)
    earlier = [files[0], run_dir / "search" / "c4" / "records.jsonl"]
    for path in earlier:
        path.parent.mkdir(parents=True)
        path.write_text("the earlier run's records\n")
    log = tmp_path / "logs" / "server.log"
    holder = hold_lock(lock_path(log))

    def launch(_spec):  # never reached: the refusal comes first
        raise AssertionError("a server was started while the run was busy")

    busy = rf"(?s)server.lock: held by PID {holder.pid} .*nothing was deleted"
    with pytest.raises(RunBusyError, match=busy):
        run_job(spec, files, log, run_dir / "search.json", launch)
    assert all(p.read_text() == "the earlier run's records\n" for p in earlier)


def test_the_lock_is_free_again_once_its_holder_is_gone(tmp_path, hold_lock):
    path = tmp_path / "logs" / "server.lock"
    proc = hold_lock(path)
    (line,) = held_locks(tmp_path / "logs")
    assert line.startswith(f"{path}: held by PID {proc.pid} ")
    proc.kill()  # as SIGKILL: the kernel drops the lock, no clean-up needed
    proc.wait()
    assert held_locks(tmp_path / "logs") == []
    with run_lock(path):
        assert len(held_locks(tmp_path / "logs")) == 1  # held, now by this process


@pytest.mark.slow
def test_snakemake_refuses_the_run_before_deleting_an_orphans_outputs(tmp_path, hold_lock):
    wf = copy_workflow(tmp_path / "wf", tiny_config())
    records = wf / POINT / "records.jsonl"
    records.parent.mkdir(parents=True)
    records.write_text("the orphan's records\n")  # an output Snakemake would delete to rerun
    holder = hold_lock(lock_path(wf / SERVER_LOG))
    done = smk(wf, "--cores", "1", "--configfile", "tiny.yaml", "--forcerun", "bench")
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-3000:]
    assert "still writes its results" in out and f"PID {holder.pid}" in out
    assert records.read_text() == "the orphan's records\n"
