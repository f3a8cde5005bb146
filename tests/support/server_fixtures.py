"""Start `thetalker-serve-local` as a real subprocess on a free port, and stop it.

For any test that needs the real local server (server, client, workflow and examples tests):

    from tests.support.server_fixtures import LocalServer, local_server  # module-scope fixture

    def test_x(local_server: LocalServer) -> None:
        requests.get(local_server.base_url + "/health")

or, with other arguments, `with start_local_server(["--workers", "2"]) as server: ...`.
The server runs with `--port 0` (the OS picks a free port; the log line `Serving on
http://HOST:PORT` says which), in its own session, logging to a file; leaving the block stops
it with SIGTERM (SIGKILL after a grace period), even when the test failed.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.processes import die_with_parent

__all__ = ["LocalServer", "ServerStartError", "start_local_server", "local_server"]

READY_LINE = "Application startup complete."
SERVING_RE = re.compile(r"Serving on http://([^:\s]+):(\d+)")


class ServerStartError(RuntimeError):
    """The server exited or never became ready; the message carries its log."""


@dataclass
class LocalServer:
    """A running server: where it listens, its process and its log."""

    base_url: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    start_s: float
    returncode: int | None = field(default=None)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, grace_s: float = 15.0) -> int:
        """SIGTERM, wait, SIGKILL if needed; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.returncode = self.process.returncode
        return self.returncode


def server_command(args: Sequence[str]) -> list[str]:
    """The console script when it is on PATH, else `python -m thetalker.server`."""
    script = shutil.which("thetalker-serve-local")
    base = [script] if script else [sys.executable, "-m", "thetalker.server"]
    return [*base, "--host", "127.0.0.1", "--port", "0", *args]


@contextmanager
def start_local_server(
    args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    timeout_s: float = 60.0,
    log_dir: str | Path | None = None,
) -> Iterator[LocalServer]:
    """Run the server for the duration of the block."""
    folder = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="tt-srv-"))
    folder.mkdir(parents=True, exist_ok=True)
    log_path = folder / "server.log"
    t0 = time.perf_counter()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            server_command(args),
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            preexec_fn=die_with_parent,  # no server outlives a killed test process
        )
    server: LocalServer | None = None
    try:
        port = None
        while True:
            text = log_path.read_text(errors="replace")
            match = SERVING_RE.search(text)
            if match:
                port = int(match.group(2))
            if port is not None and READY_LINE in text:
                break
            if process.poll() is not None:
                raise ServerStartError(f"server exited with {process.returncode}:\n{text[-4000:]}")
            if time.perf_counter() - t0 > timeout_s:
                raise ServerStartError(f"server not ready after {timeout_s} s:\n{text[-4000:]}")
            time.sleep(0.05)
        server = LocalServer(
            base_url=f"http://127.0.0.1:{port}",
            port=port,
            process=process,
            log_path=log_path,
            start_s=time.perf_counter() - t0,
        )
        yield server
    finally:
        if server is not None:
            server.stop()
        elif process.poll() is None:
            process.kill()
            process.wait(5)


@pytest.fixture(scope="module")
def local_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """One deterministic two-worker server per test module, with its own voices folder."""
    root = tmp_path_factory.mktemp("local-server")
    args = ["--deterministic", "--workers", "2", "--threads-per-worker", "1"]
    args += ["--voices-dir", str(root / "voices")]
    with start_local_server(args, log_dir=root) as server:
        yield server
