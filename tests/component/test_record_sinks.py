"""The writer thread's fsync in groups: a record left alone is synced without waiting for
the next, and a failed write still leaves what came before it synced. (The writer process
runs the same loop; a patch here cannot reach it.)"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.support.paths import REPO
from tests.support.processes import pipe_write_blocked
from thetalker.client.context import RunContext
from thetalker.client.options import BenchError, BenchOptions
from thetalker.client.sinks import ThreadSink
from thetalker.data import appender as appender_mod


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    monkeypatch.setattr(appender_mod.os, "fsync", calls.append)
    monkeypatch.setattr(appender_mod, "SYNC_EVERY_S", 0.05)
    return calls


def _sink(tmp_path: Path) -> ThreadSink:
    ctx = RunContext.for_run(BenchOptions(base_url="http://127.0.0.1:9"), tmp_path, 0.0)
    return ThreadSink(tmp_path / "records.jsonl", ctx)


def _wait_for(what: list[int], deadline_s: float = 30.0) -> None:
    """Until `what` is not empty; a generous deadline, so no timing is asserted."""
    end = time.monotonic() + deadline_s
    while not what and time.monotonic() < end:
        time.sleep(0.01)


def test_a_record_left_alone_is_synced_before_the_sink_closes(tmp_path: Path, fsyncs: list[int]):
    sink = _sink(tmp_path)
    sink.put({"request_index": 0})
    _wait_for(fsyncs)
    assert len(fsyncs) == 1  # by the thread, with no other record and no close
    assert [r["request_index"] for r in sink.close()] == [0]
    assert len(fsyncs) == 1  # nothing was left to sync


def test_records_before_a_failed_write_are_synced_at_close(tmp_path: Path, fsyncs: list[int]):
    sink = _sink(tmp_path)
    sink.put({"request_index": 0})
    sink.put({"request_index": 1, "bad": float("nan")})  # standard JSON cannot hold it
    sink.put({"request_index": 2})  # after the failure: not written
    with pytest.raises(BenchError, match="writing records failed"):
        sink.close()
    assert len(fsyncs) == 1  # record 0, synced all the same
    lines = (tmp_path / "records.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines == ['{"request_index":0}']


def _run_program(
    tmp_path: Path, script: str, repo_on_path: bool = True
) -> subprocess.CompletedProcess[str]:
    """`script` as tmp_path/program.py, given tmp_path; with `repo_on_path` this checkout on
    PYTHONPATH, else none (the installed thetalker), run from tmp_path."""
    program = tmp_path / "program.py"
    program.write_text(script, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if repo_on_path:
        env["PYTHONPATH"] = str(REPO)
    return subprocess.run(  # the timeout only keeps a hang from stalling the suite
        [sys.executable, str(program), str(tmp_path)],
        env=env, cwd=tmp_path, timeout=120, check=False, capture_output=True, text=True,
    )  # fmt: skip


def test_a_program_that_never_closes_its_writer_process_still_exits_with_its_records(
    tmp_path: Path,
):
    # The writer ignores SIGTERM (so multiprocessing's own exit handler could not end it);
    # at exit the sink's module gives it its None first: the record is written, and the
    # program ends (the timeout only keeps a hang from stalling the suite).
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from thetalker.client.context import RunContext\n"
        "from thetalker.client.options import BenchOptions\n"
        "from thetalker.client.writer_process import RecordWriterProcess\n"
        "if __name__ == '__main__':\n"
        "    out = Path(sys.argv[1])\n"
        "    ctx = RunContext.for_run(BenchOptions(base_url='http://127.0.0.1:9'), out, 0.0)\n"
        "    sink = RecordWriterProcess(out / 'records.jsonl', ctx).start()\n"
        "    sink.put({'request_index': 0})\n"
    )
    done = _run_program(tmp_path, script)
    assert done.returncode == 0
    lines = (tmp_path / "records.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines == ['{"request_index":0}']


def test_a_ctrl_c_while_the_writers_fork_server_imports_loses_no_record(tmp_path: Path):
    # A terminal's Ctrl-C reaches the job's whole process group, the record writer's fork
    # server included, which may still be importing its preload (numpy, the record builder:
    # about a second). Deterministic: one more preload module sends the fork server SIGINT
    # while it imports. Before, the fork server died of KeyboardInterrupt and the run ended
    # in "EOFError"; now it starts with SIGINT blocked, and the record is written.
    (tmp_path / "sigint_during_import.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGINT)\n", encoding="utf-8"
    )
    script = (
        "import multiprocessing.forkserver as forkserver, os, sys\n"
        "from pathlib import Path\n"
        "from thetalker.client.context import RunContext\n"
        "from thetalker.client.options import BenchOptions\n"
        "from thetalker.client.writer_process import RecordWriterProcess\n"
        "real = forkserver._forkserver.set_forkserver_preload\n"
        "forkserver.set_forkserver_preload = lambda names: real([*names, 'sigint_during_import'])\n"
        "if __name__ == '__main__':\n"
        "    out = Path(sys.argv[1])\n"
        "    os.environ['PYTHONPATH'] += os.pathsep + str(out)\n"
        "    ctx = RunContext.for_run(BenchOptions(base_url='http://127.0.0.1:9'), out, 0.0)\n"
        "    sink = RecordWriterProcess(out / 'records.jsonl', ctx).start()\n"
        "    sink.wait_ready()\n"
        "    sink.put({'request_index': 0})  # written at exit, as an unclosed writer's\n"
    )
    done = _run_program(tmp_path, script)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = (tmp_path / "records.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines == ['{"request_index":0}']


def test_a_program_without_a_main_guard_is_told_so_at_once(tmp_path: Path):
    # multiprocessing runs the main file again in the writer process; there the client
    # starts again, which multiprocessing refuses, and the writer ends before its first
    # word. The parent says why instead of waiting on it.
    done = _run_program(
        tmp_path,
        "import sys\n"
        "from pathlib import Path\n"
        "from thetalker.client.context import RunContext\n"
        "from thetalker.client.options import BenchOptions\n"
        "from thetalker.client.writer_process import RecordWriterProcess\n"
        "out = Path(sys.argv[1])\n"
        "ctx = RunContext.for_run(BenchOptions(base_url='http://127.0.0.1:9'), out, 0.0)\n"
        "sink = RecordWriterProcess(out / 'records.jsonl', ctx).start()\n"
        "sink.wait_ready()\n"
        "print('NOT REACHED')\n",
    )
    assert done.returncode == 1
    assert "NOT REACHED" not in done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("thetalker.client.options.BenchError: writing records failed:")
    assert "before it started" in last
    assert str(tmp_path / "program.py") in last
    assert 'if __name__ == "__main__":' in last


def test_a_writer_killed_mid_run_stops_the_run_and_keeps_what_it_wrote(tmp_path: Path):
    # Killed outright: the run is told at once (on_failure), close names it, and the
    # program still exits although what was queued after the kill fills a pipe no one reads.
    done = _run_program(
        tmp_path,
        "import sys, time\n"
        "from pathlib import Path\n"
        "from thetalker.client.context import RunContext\n"
        "from thetalker.client.options import BenchError, BenchOptions\n"
        "from thetalker.client.writer_process import RecordWriterProcess\n"
        "if __name__ == '__main__':\n"
        "    out = Path(sys.argv[1])\n"
        "    ctx = RunContext.for_run(BenchOptions(base_url='http://127.0.0.1:9'), out, 0.0)\n"
        "    sink = RecordWriterProcess(out / 'records.jsonl', ctx).start()\n"
        "    told = []\n"
        "    sink.on_failure = told.append\n"
        "    sink.wait_ready()\n"
        "    sink.put({'request_index': 0})\n"
        "    path = out / 'records.jsonl'\n"
        "    deadline = time.monotonic() + 60\n"
        "    while not path.read_text() and time.monotonic() < deadline:\n"
        "        time.sleep(0.01)\n"
        "    sink._proc.kill()\n"
        "    for i in range(1, 200):\n"
        "        sink.put({'request_index': i, 'pad': 'x' * 10_000})\n"
        "    try:\n"
        "        sink.close()\n"
        "    except BenchError as exc:\n"
        "        print('CLOSE:', exc)\n"
        "    print('TOLD:', told)\n",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (
        "CLOSE: writing records failed: the record writer process ended (exit code -9) mid-run"
    )
    assert lines[1] == "TOLD: ['the record writer process ended (exit code -9) mid-run']"
    kept = (tmp_path / "records.jsonl").read_text(encoding="utf-8").splitlines()
    assert kept == ['{"request_index":0}']


def test_a_program_running_another_copy_of_thetalker_is_told_so(tmp_path: Path):
    # multiprocessing's fork server imports thetalker by its own sys.path: a program that
    # puts a checkout first on its sys.path would have its records built by the installed
    # copy's code. The writer names the file it runs and the parent refuses the mismatch.
    copy = tmp_path / "copy"
    shutil.copytree(REPO / "thetalker", copy / "thetalker",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    done = _run_program(
        tmp_path,
        "import sys\n"
        f"sys.path.insert(0, {str(copy)!r})\n"
        "from pathlib import Path\n"
        "from thetalker.client.context import RunContext\n"
        "from thetalker.client.options import BenchOptions\n"
        "from thetalker.client.writer_process import RecordWriterProcess\n"
        "if __name__ == '__main__':\n"
        "    out = Path(sys.argv[1])\n"
        "    ctx = RunContext.for_run(BenchOptions(base_url='http://127.0.0.1:9'), out, 0.0)\n"
        "    RecordWriterProcess(out / 'records.jsonl', ctx).start().wait_ready()\n"
        "    print('NOT REACHED')\n",
        repo_on_path=False,  # the installed thetalker (the README's `pip install -e`)
    )
    assert done.returncode == 1, done.stderr
    assert "NOT REACHED" not in done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("thetalker.client.options.BenchError: writing records failed:")
    assert f"this process {copy / 'thetalker' / 'client' / 'writer_process.py'}" in last
    assert "PYTHONPATH" in last


def test_a_sigkilled_parent_mid_message_leaves_no_writer_and_its_whole_records_written(
    tmp_path: Path,
):
    # The parent SIGKILLed while an exchange is half way into the writer's pipe (a loaded run
    # hands off large exchanges all the time): the writer must not wait for the rest of it
    # for ever. A dead parent means "write what is whole, then end"; with the writer gone,
    # its fork server and the resource tracker end too. Deterministic: the writer is stopped
    # while the parent fills its pipe with one message too large for it, then the parent is
    # killed and the writer let go.
    program = tmp_path / "program.py"
    program.write_text(
        "import sys\n"
        "from pathlib import Path\n"
        "from thetalker.client.context import RunContext\n"
        "from thetalker.client.options import BenchOptions\n"
        "from thetalker.client.sinks import open_sink\n"
        "if __name__ == '__main__':\n"
        "    out = Path(sys.argv[1])\n"
        "    ctx = RunContext.for_run(BenchOptions(base_url='http://127.0.0.1:9'), out, 0.0)\n"
        "    sink = open_sink(out / 'records.jsonl', ctx)\n"
        "    sink.wait_ready()\n"
        "    print('READY', flush=True)\n"
        "    sys.stdin.readline()\n"
        "    for i in range(3):\n"
        "        sink.put({'request_index': i})\n"
        "    sink.put({'request_index': 3, 'pad': 'x' * 4_000_000})\n"
        "    print('PUT', flush=True)\n"
        "    sys.stdin.readline()\n",
        encoding="utf-8",
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen(
        [sys.executable, str(program), str(tmp_path)], env=env, cwd=tmp_path,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert parent.stdin is not None and parent.stdout is not None
    family: list[psutil.Process] = []
    try:
        assert parent.stdout.readline().strip() == "READY"
        family = psutil.Process(parent.pid).children(recursive=True)
        servers = [p for p in family if "forkserver" in " ".join(p.cmdline())]
        writers = [c for s in servers for c in s.children()]
        assert len(writers) == 1, [p.cmdline() for p in family]
        writers[0].suspend()
        parent.stdin.write("go\n")
        parent.stdin.flush()
        assert parent.stdout.readline().strip() == "PUT"
        end = time.monotonic() + 30  # the parent's sending thread blocked on the full pipe
        while not pipe_write_blocked(parent.pid) and time.monotonic() < end:
            time.sleep(0.01)
        parent.kill()
        parent.wait()
        writers[0].resume()
        _gone, alive = psutil.wait_procs(family, timeout=60)  # a hang, not a speed
        assert alive == [], [p.cmdline() for p in alive]
    finally:
        parent.kill()
        for proc in family:
            with contextlib.suppress(psutil.Error):
                proc.kill()
    lines = (tmp_path / "records.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines == [f'{{"request_index":{i}}}' for i in range(3)]  # the cut one is not
