"""Server lifecycle: start a TTS server, wait until it is healthy, stop its whole process group.

``launch_server(spec)`` is a context manager. On entry it (optionally) starts an NVIDIA MPS
daemon, starts the server in its own session with stdout and stderr in a log file, waits for
``GET /health`` to answer 200 and registers a voice when asked
(``thetalker.lifecycle.readiness``). A server that dies during startup raises
``ServerStartError`` at once with the log's tail; one that never becomes healthy raises it
at ``health_timeout_s``. On exit, whatever the reason (normal exit, an exception, Ctrl-C, or
SIGTERM from Snakemake or Slurm's ``scancel``, which the context turns into ``SystemExit``
so ``finally`` runs), the process group gets SIGTERM, then SIGKILL after a grace period, and
the MPS daemon is told to quit. The stop cannot be cut short: a second Ctrl-C or SIGTERM
during it is held until it is done. A leftover server would hold the GPU and spoil the next
measured run, hence the care.

The server's PID, process group and port are written to a record (``ServerSpec.record_path``,
by default ``<log stem>.pid.json`` beside the log) the moment it starts, and the record is
removed once the group is gone and no process carrying the server's token remains (a server
that daemonized is looked for after every stop, and after a start that exited). A run whose
launcher was SIGKILLed leaves it behind: the next launch with the same record finds that server
(``thetalker.lifecycle.leftover``) and stops its group (``leftover="stop"``) or refuses with
one line naming it (``"refuse"``): ``thetalker.lifecycle.leftover_stop``. A fixed port that
is busy, or a GPU that nvidia-smi shows in use (vllm-omni launcher), is refused with one line
naming the PID that holds it. Secrets reach the server only through the environment:
``secret_env`` names variables copied from this process's environment, and every command
line and env recorded is redacted (``thetalker.util.redact``).

Launchers: ``local`` runs ``python -m thetalker.server``; ``vllm-omni`` runs
``vllm-omni serve <id> --omni --trust-remote-code --log-stats ...`` with
``SPEAKER_SAMPLES_DIR`` pointed at a folder of the run (the real server reloads every voice
found there at each start).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from thetalker import backends
from thetalker.api import speech as speech_api
from thetalker.backends.inputs import DEFAULT_EXECUTABLE
from thetalker.lifecycle import leftover as _leftover
from thetalker.lifecycle.gpu import (
    GpuBusyError,
    MpsDaemon,
    MpsStartError,
    check_gpu_empty,
    start_mps,
    stop_mps,
)
from thetalker.lifecycle.leftover_stop import LEFTOVER_POLICIES, clear_leftover, mps_record_path
from thetalker.lifecycle.processes import TermGuard, group_alive, signals_held, stop_process_group
from thetalker.lifecycle.readiness import ServerStartError, register_voice, wait_healthy
from thetalker.lifecycle.serving_env import (
    contamination,
    launch_warning,
    probe_serving_env,
    server_python,
)
from thetalker.util.redact import redact_command, redact_env, redact_url

__all__ = [
    "LAUNCHERS",
    "VLLM_OMNI_STOCK_ENV",
    "RunningServer",
    "ServerSpec",
    "build_command",
    "free_port",
    "launch_server",
]

# Every launcher of thetalker.backends; each says how its server is started (`Launcher.launch`).
LAUNCHERS = backends.launcher_names()
# The "vllm-omni" system asks for stock vllm-omni. Neither vllm nor vllm-omni reads this
# variable (outside code enters as entry-point plugins); it marks the intent, and
# thetalker.lifecycle.serving_env checks what the server really loaded.
VLLM_OMNI_STOCK_ENV = {"THESTAGE_VLLM_OMNI": "0"}


@dataclass
class ServerSpec:
    """What to serve and how. ``port=None`` picks a free loopback port."""

    launcher: str
    model_id: str
    deploy_config: str | Path | None = None
    port: int | None = None
    env: dict[str, str] = field(default_factory=dict)  # e.g. VLLM_OMNI_STOCK_ENV
    extra_args: list[str] = field(default_factory=list)
    mps: bool = False
    health_timeout_s: float = 600.0
    log_path: str | Path | None = None  # None: a temporary file
    voices_dir: str | Path | None = None  # None: a fresh folder beside the log
    register_voice: dict | None = None  # {"name", "audio" (path), "ref_text"?, "consent"?}
    host: str = "127.0.0.1"
    stop_grace_s: float = 20.0
    executable: str = DEFAULT_EXECUTABLE  # the vllm-omni launcher's program (found on PATH)
    # vllm-omni launcher: a venv or prefix whose bin/ holds the program (over `executable`);
    # the serving-environment probe then reads that environment's interpreter.
    serving_env: str | Path | None = None
    mps_control: str = "nvidia-cuda-mps-control"
    # Names of variables copied from this environment to the server (their values are secret:
    # never recorded).
    secret_env: list[str] = field(default_factory=list)
    record_path: str | Path | None = None  # None: <log stem>.pid.json beside an explicit log
    leftover: str = "stop"  # a still-running server from the record: "stop" it or "refuse"
    check_gpu: bool = True  # vllm-omni launcher: refuse a GPU nvidia-smi shows in use
    profile: str | None = None  # the engine profile of a kind that has them (Nari's --profile)
    # launcher "external": the running server's URL (nothing is started or stopped).
    base_url: str | None = None
    # launcher "command": the command template ({port}, {host}, {model}, {deploy}) and the
    # GET path answering 200 once it is ready (None: the launcher's, /health).
    command: str | None = None
    ready_path: str | None = None
    # The variable holding the server's API key (thetalker.api.auth): external's /v1/models
    # is asked with it. The name only, never the key.
    api_key_env: str | None = None


@dataclass
class RunningServer:
    """A healthy server: what was run, with which variables, where it answers."""

    base_url: str  # no trailing /v1
    command: list[str]  # redacted (thetalker.util.redact): safe to record
    env: dict[str, str]  # the variables set on top of the inherited environment, redacted
    pid: int | None  # None: an external server, not ours
    port: int | None
    log_path: Path
    voice: str | None = None  # the registered voice's name, when one was registered
    pgid: int | None = None
    record_path: Path | None = None  # the PID record (removed once the server is stopped)
    serving_env: dict | None = None  # thetalker.lifecycle.serving_env.probe_serving_env's facts
    # What the server's startup log states (its launcher's `launch.startup_facts`), e.g.
    # Nari's execution-config SHA-256; recorded only when there is something.
    startup: dict | None = None
    api_key_env: str | None = None  # external: the key's variable, for provenance's requests

    def as_record(self) -> dict:
        return {
            "base_url": self.base_url,
            "command": redact_command(self.command),
            "env": redact_env(self.env),
            "pid": self.pid,
            "pgid": self.pgid,
            "port": self.port,
            "log_path": str(self.log_path),
            "voice": self.voice,
        } | ({"startup": self.startup} if self.startup else {})


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS reports free now (another process may still take it before us)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def launcher_of(spec: ServerSpec) -> backends.Launcher:
    """The launcher ``spec.launcher`` names (thetalker.backends); ValueError if none."""
    try:
        return backends.launcher(spec.launcher)
    except backends.UnknownBackendError:
        raise ValueError(
            f"ServerSpec.launcher: {spec.launcher!r} is not one of {LAUNCHERS}"
        ) from None


def build_command(spec: ServerSpec, port: int) -> list[str]:
    """The server's command line for ``spec`` on ``port`` (its launcher's ``launch.command``)."""
    command = launcher_of(spec).launch.command
    if command is None:
        raise ValueError(f"ServerSpec.launcher: {spec.launcher!r} starts no server")
    return command(spec, port) + [str(a) for a in spec.extra_args]


def _prepare_paths(spec: ServerSpec) -> tuple[Path, Path | None]:
    if spec.log_path is None:
        log_path = Path(tempfile.mkdtemp(prefix="thetalker-server-")) / "server.log"
    else:
        log_path = Path(spec.log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    voices_dir = Path(spec.voices_dir) if spec.voices_dir is not None else None
    if voices_dir is None and launcher_of(spec).launch.voices_dir:
        # A fresh folder per run: the server reloads every voice it finds there.
        voices_dir = Path(tempfile.mkdtemp(prefix="speakers-", dir=log_path.parent))
    if voices_dir is not None:
        voices_dir.mkdir(parents=True, exist_ok=True)
    return log_path, voices_dir


def _resolve_program(cmd: list[str], env: dict[str, str]) -> list[str]:
    program = shutil.which(cmd[0], path=env.get("PATH"))
    if program is None:
        where = "" if os.sep in cmd[0] else " on PATH"  # a path: a system's serving_env
        raise ServerStartError(f"server program {cmd[0]!r} not found{where}")
    return [program, *cmd[1:]]


def _record_path(spec: ServerSpec, log_path: Path) -> Path:
    if spec.record_path is not None:
        return Path(spec.record_path)
    return log_path.with_name(log_path.stem + ".pid.json")


def _secret_values(names: list[str]) -> dict[str, str]:
    values = {}
    for name in names:
        if name not in os.environ:
            raise ServerStartError(f"secret_env: variable {name} is not set in the environment")
        values[str(name)] = os.environ[name]
    return values


def _check_port(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As servers do: a closed connection in TIME_WAIT does not make the port busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            pid = _leftover.port_holder(host, port)
            holder = _leftover.describe_pid(pid) if pid else "a process this user cannot see"
            raise ServerStartError(f"port {port} on {host} is already in use by {holder}") from None


def _probe(spec: ServerSpec, cmd: list[str], env: dict[str, str]) -> dict | None:
    """What the server's interpreter has installed (plugins included); warns when a stock
    (THESTAGE_VLLM_OMNI=0) server would load the thestage library anyway."""
    launch = launcher_of(spec).launch
    how = launch.probe_python
    if how is None:  # not a Python server this process can look into
        return None
    python = sys.executable if how == "self" else server_python(cmd, env)
    facts = probe_serving_env(python, env, launch.packages)
    warning = launch_warning(contamination(facts, None, spec.env))
    if warning:
        print(f"thetalker.lifecycle.launch: warning: {warning}", file=sys.stderr, flush=True)
    return facts


@contextlib.contextmanager
def launch_server(spec: ServerSpec) -> Iterator[RunningServer]:
    """Serve ``spec`` for the duration of the block; see the module docstring."""
    launcher = launcher_of(spec)
    profiles = launcher.launch.profiles
    if profiles and spec.profile not in profiles:
        raise ValueError(
            f"ServerSpec.profile: {spec.profile!r} is not one of {', '.join(profiles)} "
            f"(server {spec.launcher} needs one)"
        )
    if not profiles and spec.profile is not None:
        raise ValueError(f"ServerSpec.profile: server {spec.launcher} has no profiles")
    if launcher.launch.command is None:  # an external server: nothing to start or stop
        yield _external_server(spec)
        return
    if spec.leftover not in LEFTOVER_POLICIES:
        raise ValueError(
            f"ServerSpec.leftover: {spec.leftover!r} is not one of {LEFTOVER_POLICIES}"
        )
    log_path, voices_dir = _prepare_paths(spec)
    record_path = _record_path(spec, log_path)
    clear_leftover(record_path, spec.leftover, spec.stop_grace_s)
    port = spec.port if spec.port is not None else free_port(spec.host)
    set_env = {str(k): str(v) for k, v in spec.env.items()}
    set_env.update(_secret_values(spec.secret_env))
    set_env.update(launcher.launch.env(spec, voices_dir))  # the launcher's own, e.g. its voices
    for name, value in launcher.launch.env_defaults.items():
        set_env.setdefault(name, value)  # unless the system sets it
    base_env = {**os.environ, **set_env}
    spec_for_cmd = dataclasses.replace(spec, voices_dir=voices_dir)
    proc: subprocess.Popen | None = None
    mps: MpsDaemon | None = None
    guard = TermGuard()
    unwinding = True
    token: str | None = None
    try:
        cmd = _resolve_program(build_command(spec_for_cmd, port), base_env)
        shown = redact_command(cmd) or []
        _check_port(spec.host, port)
        try:
            if launcher.launch.check_gpu and spec.check_gpu:
                check_gpu_empty()
            if spec.mps:
                mps = start_mps(
                    spec.mps_control, log_path.parent, base_env, mps_record_path(record_path)
                )
                set_env.update(mps.env)
        except (GpuBusyError, MpsStartError) as exc:
            raise ServerStartError(str(exc), getattr(exc, "log_tail", "")) from None
        serving_env = _probe(spec, cmd, {**os.environ, **set_env})
        token = secrets.token_hex(12)
        # Before the start, naming the server by its token: a launcher killed from here on
        # leaves a server the next run finds (thetalker.lifecycle.leftover.group_by_token).
        _leftover.write_record(
            record_path, pid=None, port=port, host=spec.host, command=shown, token=token
        )
        with open(log_path, "ab") as log:
            log.write(f"# thetalker.lifecycle.launch: {' '.join(shown)}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                cmd,
                env={**os.environ, **set_env, _leftover.TOKEN_VAR: token},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        # At once, before the health wait: the PID, for the record and the messages.
        _leftover.write_record(
            record_path, pid=proc.pid, port=port, host=spec.host, command=shown, token=token
        )
        base_url = f"http://{spec.host}:{port}"
        ready_path = spec.ready_path or launcher.ready_path or "/health"
        where = (spec.host, port)
        wait_healthy(proc, where, spec.health_timeout_s, log_path, shown, ready_path, token)
        server = RunningServer(
            base_url=base_url,
            command=shown,
            env=redact_env(set_env) or {},
            pid=proc.pid,
            port=port,
            log_path=log_path,
            pgid=proc.pid,
            record_path=record_path,
            serving_env=serving_env,
        )
        if launcher.launch.startup_facts is not None:
            server.startup = launcher.launch.startup_facts(log_path.read_text("utf-8", "replace"))
        if spec.register_voice:
            server.voice = register_voice(base_url, spec.register_voice)
        yield server
        unwinding = False
    finally:
        guard.disarm()
        try:
            if proc is not None:
                stop_process_group(proc, spec.stop_grace_s)
                gone = not group_alive(proc.pid)
                # Gone only when nothing carrying the run's token remains: a server that
                # daemonized (setsid, a double fork) left the group, not the environment.
                assert token is not None
                with signals_held():
                    gone = _leftover.stop_carriers(token, spec.stop_grace_s) and gone
                if gone:  # else the record stays: the next run stops what is left
                    _leftover.remove_record(record_path)
            else:  # never started: the record written before the start names nothing
                _leftover.remove_record(record_path)
        finally:
            try:
                if mps is not None:
                    stop_mps(mps, base_env)
            finally:
                guard.restore(unwinding)


def _external_server(spec: ServerSpec) -> RunningServer:
    """The handle of a server someone else runs: its URL, no process, a note in the log."""
    from urllib.parse import urlsplit

    if not spec.base_url:
        raise ValueError(f"ServerSpec.base_url: launcher {spec.launcher} needs the server's URL")
    base_url = speech_api.normalize_base_url(spec.base_url)
    log_path, _ = _prepare_paths(spec)
    with open(log_path, "ab") as log:
        note = f"# thetalker.lifecycle.launch: external server {redact_url(base_url)}\n"
        log.write(note.encode())
    return RunningServer(
        base_url=base_url,
        command=[],
        env={},
        pid=None,
        port=urlsplit(base_url).port,
        log_path=log_path,
        api_key_env=spec.api_key_env,
    )
