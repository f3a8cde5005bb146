"""A started server until it is usable: healthy from its own listener, its voice registered.

``wait_healthy`` polls the launcher's ready path (``GET /health``; Nari's ``/ready``) until
it answers 200 from the server's own listener (``thetalker.lifecycle.port_owner``), and fails
the start at once when the server exits, naming what holds the port or what it left
running, or at ``health_timeout_s`` with the log's tail. ``register_voice`` uploads the run's
reference clip once it is. Each failure is a ``ServerStartError``, the one error
``thetalker.lifecycle.launch.launch_server`` raises for a server that did not become usable.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from thetalker.api import speech as speech_api
from thetalker.data.wavio import WavError
from thetalker.lifecycle import leftover
from thetalker.lifecycle.port_owner import foreign_listener
from thetalker.lifecycle.processes import log_tail
from thetalker.util.http_get import GetError, http_get

__all__ = ["POLL_S", "ServerStartError", "health_ok", "register_voice", "wait_healthy"]

POLL_S = 0.2


class ServerStartError(RuntimeError):
    """The server did not become usable: it died, never got healthy, or refused the voice."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message + (f"\n--- server log tail ---\n{log_tail}" if log_tail else ""))
        self.log_tail = log_tail


def health_ok(base_url: str, path: str = "/health") -> bool:
    """Whether ``GET path`` (the launcher's ``ready_path``: /health, Nari's /ready) is 200,
    answered whole within 2 s (``thetalker.util.http_get``: a trickle cannot hold the wait
    past ``health_timeout_s``; a redirect is not health)."""
    try:
        return http_get(base_url + path, 2.0, 1 << 20).status == 200
    except GetError:
        # Refused: the port only opens once the model is loaded. 503: engine dead or absent.
        return False


def wait_healthy(
    proc: subprocess.Popen,
    where: tuple[str, int],
    timeout_s: float,
    log_path: Path,
    cmd: list[str],
    ready_path: str = "/health",
    token: str | None = None,
) -> None:
    """Until the server answers ``ready_path`` with 200 on ``where`` (host, port) from its own
    listener: another process that took the port meanwhile fails the start, named
    (thetalker.lifecycle.port_owner)."""
    host, port = where
    base_url = f"http://{host}:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        code = proc.poll()
        if code is not None:
            other = foreign_listener(host, port, proc.pid, token)
            taken = f"; port {port} is held by {other}" if other else ""
            left = leftover.token_carriers(token) if token else []
            daemon = (
                f"; it left {leftover.describe_pid(left[0])} running, which carries the run's "
                "server token: a server must stay in the foreground of its command (no "
                "daemonizing); it is stopped"
                if left
                else ""
            )
            raise ServerStartError(
                f"server exited with code {code} during startup: {' '.join(cmd)} "
                f"(log: {log_path}){taken}{daemon}",
                log_tail(log_path),
            )
        if health_ok(base_url, ready_path):
            other = foreign_listener(host, port, proc.pid, token)
            if other is None:
                return
            raise ServerStartError(
                f"port {port} on {host} answered {ready_path} from {other}, not from the "
                f"server (process group {proc.pid}): another process took the port while "
                f"the server started; nothing was measured: {' '.join(cmd)} (log: {log_path})",
                log_tail(log_path),
            )
        if time.monotonic() >= deadline:
            raise ServerStartError(
                f"server not healthy after {timeout_s:g} s: {' '.join(cmd)} (log: {log_path})",
                log_tail(log_path),
            )
        time.sleep(POLL_S)


def register_voice(base_url: str, voice: dict, timeout_s: float = 120.0) -> str:
    """Upload a reference clip as a named voice (POST /v1/audio/voices); returns the name."""
    for key in ("name", "audio"):
        if not voice.get(key):
            raise ValueError(f"register_voice: missing {key!r} (need name, audio[, ref_text])")
    audio = Path(voice["audio"])
    if not audio.is_file():
        raise ValueError(f"register_voice: audio file not found: {audio}")
    name = str(voice["name"])
    consent = str(voice.get("consent") or speech_api.DEFAULT_CONSENT)
    ref_text = str(voice["ref_text"]) if voice.get("ref_text") else None
    try:
        speech_api.register_voice_blocking(base_url, name, audio, ref_text, consent, timeout_s)
    except (speech_api.SpeechApiError, WavError) as err:
        raise ServerStartError(f"voice registration failed: {err}") from None
    return name
