"""Nothing left running: a stop that a second Ctrl-C cannot cut short, and a leftover server
found from its record on the next run (stopped, or refused with one line), a busy port or GPU
refused naming the PID. Real processes on loopback; `tests/support/slow_stop_server.py` is a server
that ignores SIGTERM, with a worker in its group that does too.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.processes import pid_alive
from thetalker.lifecycle.launch import ServerSpec, launch_server
from thetalker.lifecycle.leftover import (
    TOKEN_VAR,
    find_leftover,
    group_members,
    start_ticks,
    write_record,
)
from thetalker.lifecycle.readiness import ServerStartError

SLOW = REPO / "tests" / "support" / "slow_stop_server.py"
STANDINS = REPO / "tests" / "standins"
SLEEP = ["sleep", "60"]

LAUNCHER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from thetalker.lifecycle.launch import ServerSpec, launch_server

    program, log, ready = sys.argv[1:4]
    spec = ServerSpec(launcher="vllm-omni", model_id="m", executable=program, log_path=log,
                      health_timeout_s=60, stop_grace_s=2.0, check_gpu=False)
    with launch_server(spec) as server:
        Path(ready).write_text(json.dumps({"pid": server.pid}))
        time.sleep(600)
    """
)


def logged_pids(log: Path) -> list[int]:
    """The fake server's and its worker's PIDs, from its log."""
    text = log.read_text() if log.exists() else ""
    found = {int(p) for p in re.findall(r"slow-stop pid=(\d+)", text)}
    found |= {int(p) for p in re.findall(r"worker pid=(\d+)", text)}
    return sorted(found)


def _slow_spec(tmp_path: Path, record_path: Path) -> ServerSpec:
    """The slow-stop fake server under the vllm-omni launcher, logging to server.log."""
    return ServerSpec(
        launcher="vllm-omni",
        model_id="m",
        executable=str(SLOW),
        log_path=tmp_path / "server.log",
        record_path=record_path,
        check_gpu=False,
        stop_grace_s=1.0,
    )


def _kill_logged(log: Path) -> None:
    """SIGKILL what the fake server logged as its own, should a failed test leave it."""
    for pid in logged_pids(log):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def wait_for(predicate, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def launcher(tmp_path):
    """Start the launcher script in a child; afterwards kill whatever a failure left."""
    script = tmp_path / "launcher.py"
    script.write_text(LAUNCHER)
    log, ready = tmp_path / "server.log", tmp_path / "ready.json"
    children: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        child = subprocess.Popen(
            [sys.executable, str(script), str(SLOW), str(log), str(ready)], cwd=REPO
        )
        children.append(child)
        assert wait_for(lambda: ready.exists() or child.poll() is not None)
        assert child.poll() is None, "the launcher exited before serving"
        return child

    yield start, log
    for child in children:
        if child.poll() is None:
            child.kill()
            child.wait()
    _kill_logged(log)


def test_two_ctrl_c_during_a_slow_stop_still_kill_the_group(launcher):
    start, log = launcher
    child = start()
    pids = logged_pids(log)
    assert len(pids) == 2 and all(pid_alive(p) for p in pids)
    child.send_signal(signal.SIGINT)
    assert wait_for(lambda: "SIGTERM received" in log.read_text()), "the stop never began"
    child.send_signal(signal.SIGINT)  # the second Ctrl-C, while the server ignores SIGTERM
    child.send_signal(signal.SIGTERM)  # and a supervisor's SIGTERM too
    child.wait(timeout=60)
    assert child.returncode != 0  # the interrupt still ends the launcher
    for pid in pids:
        assert not pid_alive(pid), f"PID {pid} survived the stop"
    assert not (log.parent / "server.pid.json").exists()  # a clean stop leaves no record


def test_a_sigkilled_launchers_server_is_found_and_stopped_on_the_rerun(launcher, capfd):
    start, log = launcher
    child = start()
    pids = logged_pids(log)
    record_path = log.parent / "server.pid.json"
    record = json.loads(record_path.read_text())
    assert record["pid"] == record["pgid"] == pids[0] or record["pid"] in pids
    assert record["start_ticks"] == start_ticks(record["pid"])
    child.kill()  # SIGKILL: no cleanup can run
    child.wait()
    assert all(pid_alive(p) for p in pids), "the orphan should still run"
    found = find_leftover(record_path)
    assert found is not None and found.pgid == record["pgid"] and found.port == record["port"]

    refuse = ServerSpec(
        launcher="vllm-omni",
        model_id="m",
        executable=str(SLOW),
        log_path=log,
        health_timeout_s=60,
        stop_grace_s=1.0,
        check_gpu=False,
        leftover="refuse",
    )
    with pytest.raises(ServerStartError) as info, launch_server(refuse):
        pytest.fail("must not serve beside the orphan")
    message = str(info.value)
    assert f"PID {record['pid']}" in message and f"port {record['port']}" in message
    assert "\n" not in message
    assert all(pid_alive(p) for p in pids), "refusing must not stop it"

    rerun = ServerSpec(**{**refuse.__dict__, "leftover": "stop"})
    with launch_server(rerun) as server:
        for pid in pids:
            assert not pid_alive(pid), f"orphan PID {pid} still runs beside the new server"
        assert server.pid not in pids
        assert json.loads(record_path.read_text())["pid"] == server.pid
        new = [p for p in logged_pids(log) if p not in pids]
    assert "stopping leftover server PID" in capfd.readouterr().err
    assert not any(pid_alive(p) for p in new)
    assert not record_path.exists()


def test_a_server_whose_launcher_died_before_recording_its_pid_is_found_by_its_token(
    tmp_path, capfd
):
    """The record is written before the start, naming the server by a token in its
    environment: a launcher killed between the start and the PID's record leaves a server
    the next run finds and stops."""
    record_path = tmp_path / "server.pid.json"
    write_record(record_path, pid=None, port=1, host="127.0.0.1", command=SLEEP, token="t0k3n")
    assert find_leftover(record_path) is None  # nothing runs with the token yet
    orphan = _sleeper(env={**os.environ, TOKEN_VAR: "t0k3n"})
    other = _sleeper(env={**os.environ, TOKEN_VAR: "another"})
    try:
        found = find_leftover(record_path)
        assert found is not None and found.pgid == orphan.pid and found.launcher_pid is None
        spec = ServerSpec(launcher="vllm-omni", model_id="m", executable=str(SLOW),
                          log_path=tmp_path / "server.log", health_timeout_s=60,
                          stop_grace_s=1.0, check_gpu=False)  # fmt: skip
        with launch_server(spec):
            assert orphan.wait(timeout=30) is not None  # stopped before the new server started
        assert "stopping leftover server PID" in capfd.readouterr().err
        assert other.poll() is None  # another token's process is not touched
    finally:
        for proc in (orphan, other):
            proc.kill()
            proc.wait()
    _kill_logged(tmp_path / "server.log")


def test_a_record_whose_pid_is_now_another_process_is_ignored(tmp_path):
    same = _sleeper(_with_token("t-same"))
    other = _sleeper()  # a process that reused the PID carries no token of ours
    try:
        record_path = tmp_path / "server.pid.json"
        write_record(
            record_path, pid=same.pid, port=1, host="127.0.0.1", command=SLEEP, token="t-same"
        )
        assert find_leftover(record_path) is not None  # the same process: found
        same.kill()
        same.wait()
        write_record(
            record_path, pid=other.pid, port=1, host="127.0.0.1", command=SLEEP, token="t-same"
        )
        data = json.loads(record_path.read_text())
        data["start_ticks"] = (data["start_ticks"] or 0) - 1  # an earlier process, same PID
        record_path.write_text(json.dumps(data))
        assert find_leftover(record_path) is None
        spec = _slow_spec(tmp_path, record_path)
        with launch_server(spec) as server:
            assert pid_alive(other.pid), "an unrelated process with a reused PID was killed"
            assert server.pid != other.pid
    finally:
        other.kill()
        other.wait()
        _kill_logged(tmp_path / "server.log")


def test_a_busy_fixed_port_is_refused_naming_its_pid(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        spec = ServerSpec(
            launcher="vllm-omni",
            model_id="m",
            executable=str(SLOW),
            port=port,
            log_path=tmp_path / "server.log",
            check_gpu=False,
        )
        with pytest.raises(ServerStartError) as info, launch_server(spec):
            pytest.fail("must not start")
    assert str(info.value).startswith(
        f"port {port} on 127.0.0.1 is already in use by PID {os.getpid()}"
    )
    assert not (tmp_path / "server.log").exists() or not logged_pids(tmp_path / "server.log")


def test_a_busy_gpu_is_refused_naming_its_pid(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{STANDINS}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_GPU_PIDS", str(os.getpid()))
    spec = ServerSpec(
        launcher="vllm-omni",
        model_id="m",
        executable=str(SLOW),
        log_path=tmp_path / "s.log",
        stop_grace_s=1.0,  # the slow server ignores SIGTERM: SIGKILL after 1 s, not 20
    )
    busy = rf"GPU is in use by PID {os.getpid()} "
    with pytest.raises(ServerStartError, match=busy), launch_server(spec):
        pytest.fail("must not start")
    assert not logged_pids(tmp_path / "s.log")
    monkeypatch.setenv("STANDIN_GPU_PIDS", "")
    with launch_server(spec) as server:
        assert group_members(server.pid)


def test_a_record_from_another_machine_or_boot_names_nothing_here(tmp_path):
    other = _sleeper(_with_token("t-here"))
    try:
        record_path = tmp_path / "server.pid.json"
        write_record(
            record_path, pid=other.pid, port=1, host="127.0.0.1", command=SLEEP, token="t-here"
        )
        assert find_leftover(record_path) is not None
        for field, value in (("hostname", "another-node"), ("boot_id", "an-earlier-boot")):
            data = json.loads(record_path.read_text())
            record_path.write_text(json.dumps({**data, field: value}))
            assert find_leftover(record_path) is None, field
            record_path.write_text(json.dumps(data))
    finally:
        other.kill()
        other.wait()


@pytest.mark.slow
def test_the_workflow_rerun_stops_the_server_a_sigkilled_bench_job_left(tmp_path):
    """SIGKILL of the bench job orphans its server (nothing can clean up); the next run of the
    same job finds it from results/logs/.../server.pid.json and stops it before serving."""
    from tests.support.processes import cmdline, kill_pids, outermost, processes_in
    from tests.support.workflow_copy import (
        POINT,
        SERVER_LOG,
        SNAKEMAKE,
        copy_workflow,
        finished_lines,
        server_pids_in,
        smk,
        smk_env,
        tiny_config,
    )

    workdir = copy_workflow(tmp_path / "wf", tiny_config(requests=400))
    target = str(POINT / "records.jsonl")
    snakemake = subprocess.Popen(
        [SNAKEMAKE, target, "--configfile", "tiny.yaml"],
        cwd=workdir,
        env=smk_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    orphans: list[int] = []
    try:
        assert wait_for(
            lambda: (
                server_pids_in(workdir)
                and len(finished_lines(workdir / target)) >= 2
                or snakemake.poll() is not None
            ),
            240,
        )
        assert snakemake.poll() is None, snakemake.stdout.read()[-3000:]
        # The bench job's python (not the shell Snakemake runs it in, nor the job's own
        # child between its fork and exec, which shows the job's command line: outermost).
        jobs = outermost(_bench_jobs_in(workdir))
        assert len(jobs) == 1, {p: cmdline(p) for p in processes_in(workdir)}
        orphans = server_pids_in(workdir)
        record = json.loads((workdir / SERVER_LOG).with_name("server.pid.json").read_text())
        assert record["pid"] in orphans
        assert record["launcher_pid"] == jobs[0]  # the job that started the server
        os.kill(jobs[0], signal.SIGKILL)
        snakemake.communicate(timeout=120)
        assert snakemake.returncode != 0
        assert orphans and all(pid_alive(p) for p in orphans), "the server should be orphaned"

        (workdir / "tiny.yaml").write_text(
            (workdir / "tiny.yaml").read_text().replace("1: 400", "1: 2")
        )
        rerun = smk(workdir, target, "--configfile", "tiny.yaml", timeout=300)
        assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
        log = (workdir / "results/logs/local/piper-joe/bench.log").read_text()
        assert f"stopping leftover server PID {record['pid']} " in log
        assert not any(pid_alive(p) for p in orphans)
        assert not server_pids_in(workdir)
        assert not (workdir / SERVER_LOG).with_name("server.pid.json").exists()
    finally:
        if snakemake.poll() is None:
            os.killpg(snakemake.pid, signal.SIGKILL)
            snakemake.wait()
        kill_pids([*orphans, *processes_in(workdir)])


def _bench_jobs_in(workdir: Path) -> list[int]:
    """Processes in `workdir` showing a bench job's python command line."""
    from tests.support.processes import cmdline, processes_in

    return [
        p
        for p in processes_in(workdir)
        if "-m thetalker.pipeline.serve_and_sweep" in (line := cmdline(p))
        and Path(line.split()[0]).name.startswith("python")
    ]


def test_a_bench_jobs_child_between_fork_and_exec_is_not_taken_for_a_second_job(tmp_path):
    """Seen once in 3 runs of the workflow rerun test: 2 bench jobs where one ran. A job's
    child between its fork and its exec (its sampler runs nvidia-smi every half second) has the
    job's command line and folder for that moment. Here the child stays so (a fork with no
    exec): the job is still found alone, and a second job beside it still counts."""
    from tests.support.processes import outermost

    fake_job = [sys.executable, "-c", "import os, time; os.fork(); time.sleep(60)"]
    fake_job += ["-m", "thetalker.pipeline.serve_and_sweep", "--job", "j.json"]
    started: list[subprocess.Popen] = []
    try:
        started.append(subprocess.Popen(fake_job, cwd=tmp_path, start_new_session=True))
        assert wait_for(lambda: len(_bench_jobs_in(tmp_path)) == 2)  # the job and its child
        assert outermost(_bench_jobs_in(tmp_path)) == [started[0].pid]
        started.append(subprocess.Popen(fake_job, cwd=tmp_path, start_new_session=True))
        assert wait_for(lambda: len(_bench_jobs_in(tmp_path)) == 4)
        assert sorted(outermost(_bench_jobs_in(tmp_path))) == sorted(p.pid for p in started)
    finally:
        for proc in started:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _with_token(token: str) -> dict[str, str]:
    """The environment of a process the launcher started with the server token `token`."""
    return {**os.environ, TOKEN_VAR: token}


def _sleeper(env: dict[str, str] | None = None) -> subprocess.Popen:
    """`sleep 60` in a session of its own, returned once /proc shows it running `sleep`:
    Popen returns as the exec begins, a moment before the new command line is readable (a
    check in that moment reads an empty one: seen on a loaded machine)."""
    proc = subprocess.Popen(SLEEP, env=env, start_new_session=True)
    cmdline = Path(f"/proc/{proc.pid}/cmdline")

    def running_sleep() -> bool:
        try:
            return cmdline.read_bytes().split(b"\0")[0].endswith(b"sleep")
        except OSError:
            return False

    assert wait_for(running_sleep), f"PID {proc.pid} never showed as sleep"
    return proc


def test_a_forged_record_naming_another_group_signals_nothing(tmp_path):
    # The rule: a group is signalled only when it is verifiably the one the project started
    # (pid = pgid as written, the leader's start time and command as recorded).
    decoy, victim = _sleeper(), _sleeper()
    record_path = tmp_path / "server.pid.json"
    warnings: list[str] = []
    try:
        write_record(record_path, pid=decoy.pid, port=1, host="127.0.0.1", command=SLEEP)
        data = json.loads(record_path.read_text())
        record_path.write_text(json.dumps({**data, "pgid": victim.pid}))  # pid != pgid
        assert find_leftover(record_path, warnings.append) is None
        assert f"pid {decoy.pid} and pgid {victim.pid} differ" in warnings[-1]
        # The victim's own PID and start time, but another command: not the server either.
        write_record(record_path, pid=victim.pid, port=1, host="127.0.0.1", command=["vllm-omni"])
        assert find_leftover(record_path, warnings.append) is None
        assert f"PID {victim.pid} (sleep 60) is not the recorded server" in warnings[-1]
        spec = _slow_spec(tmp_path, record_path)
        with launch_server(spec):
            assert pid_alive(victim.pid) and pid_alive(decoy.pid)
    finally:
        for proc in (decoy, victim):
            proc.kill()
            proc.wait()
        _kill_logged(tmp_path / "server.log")


def test_a_run_with_nothing_to_do_still_names_a_leftover_server(tmp_path):
    # A rerun whose target is already there starts no job that would stop the server: the
    # workflow says so when it starts (rules/common.smk), with the command that stops it.
    from thetalker.lifecycle.leftover import leftover_warnings

    server = _sleeper(_with_token("t-left"))
    try:
        record = tmp_path / "logs" / "local" / "m" / "server.pid.json"
        write_record(
            record, pid=server.pid, port=1, host="127.0.0.1", command=SLEEP, token="t-left"
        )
        data = json.loads(record.read_text())
        record.write_text(json.dumps({**data, "launcher_pid": 2**22 + 1}))  # launcher gone
        (line,) = leftover_warnings(tmp_path / "logs")
        assert f"PID {server.pid} (sleep 60)" in line and f"kill -TERM -- -{server.pid}" in line
        assert pid_alive(server.pid)  # said, not signalled: stopping is the job's
    finally:
        server.kill()
        server.wait()
    assert leftover_warnings(tmp_path / "logs") == []


# Issue 36: the run's server token is the proof that a process is the run's server.

DAEMON_SERVER = textwrap.dedent(
    """
    import http.server, sys
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        def log_message(self, *args):
            pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
    """
)


def _marked(marker: str) -> list[int]:
    """Live PIDs whose command line holds `marker` (the test's own server script)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
            except OSError:
                continue
            if marker.encode() in cmdline and state not in ("Z", "X"):
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize("foreground", ["exits", "stays"])
def test_a_command_server_that_daemonizes_does_not_outlive_its_run(tmp_path, foreground):
    """A template that double-forks and calls `setsid` left its server running after the job,
    whether the job failed (the command "exited with code 0") or succeeded. The rule: a
    server is gone only when no process carrying the run's server token remains."""
    script = tmp_path / "daemon_server.py"
    script.write_text(DAEMON_SERVER)
    # sh starts the server in a session of its own (setsid), in the background: the server
    # leaves the command's process group. Then sh exits, or stays in the foreground.
    after = "exit 0" if foreground == "exits" else "exec sleep 600"
    template = f"sh -c 'setsid {sys.executable} {script} {{port}} >/dev/null 2>&1 & {after}'"
    spec = ServerSpec(
        launcher="command",
        model_id="m",
        command=template,
        log_path=tmp_path / "server.log",
        health_timeout_s=30,
        stop_grace_s=2.0,
    )
    record = tmp_path / "server.pid.json"
    try:
        if foreground == "exits":
            with pytest.raises(ServerStartError) as err, launch_server(spec):
                pass
            assert "exited with code 0 during startup" in str(err.value)
        else:
            with launch_server(spec) as server:
                assert _marked(str(script)), "the daemonized server never ran"
                assert server.pid is not None
        assert _marked(str(script)) == [], "the daemonized server outlived its run"
        assert not record.exists()
    finally:
        for pid in _marked(str(script)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_rerun_stops_what_carries_the_token_outside_the_recorded_group(tmp_path):
    """A SIGKILLed run whose server had daemonized: the recorded group is gone, a process
    carrying its token is not; the rerun stops it before starting."""
    daemon = _sleeper(_with_token("t-daemon"))
    other = _sleeper(_with_token("t-other"))
    gone = subprocess.Popen(["true"], start_new_session=True)
    gone.wait()
    record_path = tmp_path / "server.pid.json"
    write_record(
        record_path, pid=gone.pid, port=1, host="127.0.0.1", command=SLEEP, token="t-daemon"
    )
    spec = _slow_spec(tmp_path, record_path)
    try:
        from thetalker.lifecycle.leftover import leftover_warnings

        (line,) = leftover_warnings(tmp_path)  # said at every workflow start, as a group is
        assert f"PID {daemon.pid} (sleep 60), carrying the server token of" in line
        assert line.endswith(f"now: kill -TERM {daemon.pid})")
        with launch_server(spec):
            assert wait_for(lambda: not pid_alive(daemon.pid), 30)
            assert pid_alive(other.pid)  # another run's token: not touched
    finally:
        for proc in (daemon, other):
            proc.kill()
            proc.wait()
        _kill_logged(tmp_path / "server.log")


def test_a_forged_record_with_a_dead_leader_and_start_time_0_signals_nothing(tmp_path):
    """A group whose leader is gone, named by a record with start time 0 (every member
    "younger"): signalled before, though no member is the run's server. Now a member must
    carry the record's server token."""
    victim = subprocess.Popen(
        ["sh", "-c", "sleep 60 & echo $!; exit 0"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert victim.stdout is not None
    sleeper = int(victim.stdout.readline())
    victim.wait()  # the leader is gone, its group lives on in `sleep`
    record_path = tmp_path / "server.pid.json"
    try:
        for token in ("forged", None):
            write_record(
                record_path, pid=victim.pid, port=1, host="127.0.0.1", command=SLEEP, token=token
            )
            data = json.loads(record_path.read_text())
            record_path.write_text(json.dumps({**data, "start_ticks": 0}))
            warnings: list[str] = []
            assert find_leftover(record_path, warnings.append) is None
            assert f"process group {victim.pid} has no process carrying" in warnings[-1]
        spec = _slow_spec(tmp_path, record_path)
        with launch_server(spec):
            assert pid_alive(sleeper)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(sleeper, signal.SIGKILL)
        _kill_logged(tmp_path / "server.log")


def test_a_server_the_suite_starts_dies_with_the_test_process_that_started_it(tmp_path):
    """The suite's own servers (tests/support: the local server fixture, Nari's stand-in) run in
    a session of their own; a pytest worker ended by a timeout or SIGKILL runs no finalizer,
    so each asks the kernel for SIGTERM when its starter dies (die_with_parent). Here the
    starter is a process SIGKILLed after it started a long sleeper that way."""
    pid_file = tmp_path / "child.pid"
    starter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "from tests.support.processes import die_with_parent\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'],"
            " start_new_session=True, preexec_fn=die_with_parent)\n"
            f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
            "time.sleep(300)\n",
        ],
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline, "the starter never started its child"
            time.sleep(0.05)
        child = int(pid_file.read_text())
        assert pid_alive(child)
    finally:
        starter.kill()
        starter.wait()
    deadline = time.monotonic() + 60
    while pid_alive(child):
        assert time.monotonic() < deadline, f"PID {child} outlived the process that started it"
        time.sleep(0.05)
