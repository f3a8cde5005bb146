"""Readiness counts only the server's own listener (issue 45, broken 1).

The launcher picks a free port and starts the server, which binds it only once loaded. A
process that takes the port in that window and answers /health with 200 was measured as the
server. Here a real listener (its own process, not in the server's group, without the run's
token) takes the chosen port while a server that binds late is starting: the start must fail,
naming that process, and leave nothing running.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.support.paths import STANDINS
from tests.support.processes import pid_alive
from thetalker.lifecycle.launch import ServerSpec, launch_server
from thetalker.lifecycle.port_owner import foreign_listener, listeners
from thetalker.lifecycle.processes import group_alive
from thetalker.lifecycle.readiness import ServerStartError

IMPOSTOR = textwrap.dedent(
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
# A server that "loads" far longer than the test runs: it never binds its port.
LATE_SERVER = "import sys, time; time.sleep(300)"


def _take_port_once_started(record: Path, script: Path, taken: list[subprocess.Popen]) -> None:
    """Once the launcher has recorded its server's PID (its port check is behind it), start
    the impostor on the recorded port, in a session of its own, without the server's token."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(record.read_text())
            if data.get("pid"):
                env = {k: v for k, v in os.environ.items() if not k.startswith("THETALKER_")}
                taken.append(
                    subprocess.Popen(
                        [sys.executable, str(script), str(data["port"])],
                        env=env,
                        start_new_session=True,
                    )
                )
                return
        time.sleep(0.02)


def _spec(kind: str, tmp_path: Path, monkeypatch) -> ServerSpec:
    common = {"log_path": tmp_path / "server.log", "health_timeout_s": 60, "stop_grace_s": 2.0}
    if kind == "vllm-omni":  # the stand-in, loading for ever (the port never opens)
        monkeypatch.setenv("PATH", f"{STANDINS}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("STANDIN_MODE", "hang")
        return ServerSpec(launcher="vllm-omni", model_id="m", check_gpu=False, **common)
    late = tmp_path / "late_server.py"
    late.write_text(LATE_SERVER)
    return ServerSpec(
        launcher="command", model_id="m", command=f"{sys.executable} {late} {{port}}", **common
    )


@pytest.mark.parametrize("kind", ["vllm-omni", "command"])
def test_another_process_on_the_chosen_port_is_not_taken_for_the_server(
    tmp_path, monkeypatch, kind
):
    script = tmp_path / "impostor.py"
    script.write_text(IMPOSTOR)
    spec = _spec(kind, tmp_path, monkeypatch)
    taken: list[subprocess.Popen] = []
    watcher = threading.Thread(
        target=_take_port_once_started, args=(tmp_path / "server.pid.json", script, taken)
    )
    watcher.start()
    try:
        with pytest.raises(ServerStartError) as err, launch_server(spec):
            pytest.fail("the impostor's /health was taken for the server's")
        watcher.join()
        (impostor,) = taken
        message = str(err.value).splitlines()[0]
        # the impostor named by PID and command (describe_pid cuts the command line to 120
        # characters, so a long temporary path may not reach the script's name)
        assert f"from PID {impostor.pid} ({sys.executable}" in message
        assert "not from the server" in message
        record = tmp_path / "server.pid.json"
        assert not record.exists()  # the server was stopped
        assert pid_alive(impostor.pid)  # not ours: never signalled
    finally:
        watcher.join()
        for proc in taken:
            proc.kill()
            proc.wait()


def _listening(script: Path) -> tuple[int, subprocess.Popen]:
    """`script` serving on a free port in a session of its own, once /proc shows its listener
    (or after 30 s)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(script), str(port)], start_new_session=True)
    deadline = time.monotonic() + 30
    while not listeners("127.0.0.1", port) and time.monotonic() < deadline:
        time.sleep(0.05)
    return port, proc


def test_the_servers_own_listener_is_found_and_is_not_foreign(tmp_path):
    """The /proc reading itself: a listener in a group of its own is named by PID; asked as
    that group's, it is the server's."""
    script = tmp_path / "impostor.py"
    script.write_text(IMPOSTOR)
    port, proc = _listening(script)
    try:
        (sock,) = listeners("127.0.0.1", port) or [None]
        assert sock is not None and sock.pids == [proc.pid]
        assert foreign_listener("127.0.0.1", port, proc.pid, None) is None
        assert foreign_listener("127.0.0.1", port, os.getpgid(0), None).startswith(
            f"PID {proc.pid} ("
        )
    finally:
        proc.kill()
        proc.wait()
    assert not group_alive(proc.pid)


def test_a_container_runtimes_port_forwarder_stands_for_the_server(tmp_path):
    """`docker run -p {port}:8000` as a `command` server: the port is held by docker-proxy,
    outside the server's group by design. A listener named as a container forwarder (here the
    same listener renamed with prctl(PR_SET_NAME), as comm shows docker's) is not foreign."""
    script = tmp_path / "forwarder.py"
    script.write_text(
        "import ctypes\nctypes.CDLL(None).prctl(15, b'docker-proxy', 0, 0, 0)\n" + IMPOSTOR
    )
    port, proc = _listening(script)
    try:
        assert listeners("127.0.0.1", port)
        assert Path(f"/proc/{proc.pid}/comm").read_text().strip() == "docker-proxy"
        assert foreign_listener("127.0.0.1", port, os.getpgid(0), None) is None
    finally:
        proc.kill()
        proc.wait()
