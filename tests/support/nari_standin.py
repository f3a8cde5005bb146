"""The Nari stand-in (tests/standins/nari-qwen3-tts-server) as a test starts and talks to it:
a process on a free loopback port, its request log, plain HTTP calls and one WebSocket
conversation at a time."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.paths import STANDINS
from tests.support.processes import die_with_parent
from thetalker.lifecycle.launch import free_port

__all__ = ["PROGRAM", "MODEL", "Standin", "Conversation", "get", "post", "converse"]

PROGRAM = STANDINS / "nari-qwen3-tts-server"
MODEL = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(url: str) -> tuple[int, dict]:
    try:
        with _OPENER.open(url, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def post(url: str, body: dict | bytes) -> tuple[int, Any]:
    """(status, JSON answer or the audio bytes) of one POST."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with _OPENER.open(request, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class Standin:
    """One stand-in process; `wait_ready` once its port is open (it binds only after
    `Startup complete.`)."""

    def __init__(self, tmp: Path, env: dict[str, str], profile: str = "ttfa", *args: str) -> None:
        self.port = free_port()
        self.log = tmp / f"nari-{self.port}.jsonl"
        self.stdout = tmp / f"nari-{self.port}.out"
        self.base_url = f"http://127.0.0.1:{self.port}"
        argv = [str(PROGRAM), "--profile", profile, "--host", "127.0.0.1", "--port", str(self.port)]
        with self.stdout.open("wb") as out:
            self.proc = subprocess.Popen(
                [*argv, *args],
                env={**os.environ, "STANDIN_LOG": str(self.log), **env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,  # no server outlives a killed test process
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                get(self.base_url + "/health")
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the Nari stand-in did not open its port: {self.stdout.read_text()}")

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while get(self.base_url + "/ready")[0] != 200:
            assert time.monotonic() < deadline, "the stand-in never got ready"
            time.sleep(0.05)

    def entries(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def speech(self, body: dict | bytes) -> tuple[int, Any]:
        return post(self.base_url + "/v1/audio/speech", body)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(timeout=10)


@dataclass
class Conversation:
    """What one socket got: its JSON events, its binary frames, how it closed."""

    events: list[dict] = field(default_factory=list)
    frames: list[bytes] = field(default_factory=list)
    close_code: int | None = None
    close_reason: str | None = None

    def kinds(self) -> list[str]:
        return [e["type"] for e in self.events]

    def error_code(self) -> str | None:
        errors = [e["error"]["code"] for e in self.events if e["type"] == "error"]
        return errors[0] if errors else None


async def _converse(
    url: str, messages: list[str | bytes | dict], protocols: tuple[str, ...]
) -> Conversation:
    got = Conversation()
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(url, protocols=protocols, max_msg_size=0) as ws,
    ):
        try:
            for message in messages:
                if isinstance(message, bytes):
                    await ws.send_bytes(message)
                elif isinstance(message, str):
                    await ws.send_str(message)
                else:
                    await ws.send_str(json.dumps(message))
        except (ConnectionError, aiohttp.ClientError):
            pass  # the server closed first: what it said is read below
        async with asyncio.timeout(30):
            while True:
                msg = await ws.receive()
                if msg.type == aiohttp.WSMsgType.TEXT:
                    got.events.append(json.loads(msg.data))
                elif msg.type == aiohttp.WSMsgType.BINARY:
                    got.frames.append(msg.data)
                else:
                    if msg.type == aiohttp.WSMsgType.CLOSE:
                        got.close_reason = msg.extra
                    break
        got.close_code = ws.close_code
    return got


def converse(
    base_url: str,
    messages: list[str | bytes | dict],
    protocols: tuple[str, ...] = ("nari.speech.v1",),
    path: str = "/v1/audio/speech/ws",
) -> Conversation:
    """Send `messages` on a fresh socket at once, then read everything until it closes."""
    url = base_url.replace("http://", "ws://") + path
    return asyncio.run(_converse(url, messages, protocols))
