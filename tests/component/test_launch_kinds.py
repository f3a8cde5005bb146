"""The lifecycle of the server kinds that front another (thetalker.backends): `command`
starts any server from a template in its own process group and stops it like the others;
`external` starts and stops nothing."""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

import pytest

from tests.support.paths import STANDINS
from tests.support.processes import pid_alive
from thetalker.backends.command import TemplateError, expand_template
from thetalker.lifecycle.launch import ServerSpec, build_command, launch_server
from thetalker.lifecycle.processes import group_alive

MODEL = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"


def test_template_fills_each_word_and_refuses_unknown_placeholders():
    words = expand_template("srv --port={port} -m '{model} x' {deploy}", 8, "h", "m", "d.yaml")
    assert words == ["srv", "--port=8", "-m", "m x", "d.yaml"]
    with pytest.raises(TemplateError, match="unknown placeholder {gpu}"):
        expand_template("srv {gpu}", 8, "h", "m", None)
    with pytest.raises(TemplateError, match="{deploy} needs use_deploy_file"):
        expand_template("srv {deploy}", 8, "h", "m", None)
    spec = ServerSpec(launcher="command", model_id="m", command="srv {port}", extra_args=["-v"])
    assert build_command(spec, 9) == ["srv", "9", "-v"]


def test_command_server_runs_in_its_own_group_and_is_stopped(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PATH", f"{STANDINS}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_WARMUP_S", "0.5")
    spec = ServerSpec(
        launcher="command",
        model_id=MODEL,
        command="nari-qwen3-tts-server --profile balanced --model {model} --port {port} "
        "--host {host}",
        ready_path="/ready",
        log_path=tmp_path / "server.log",
        health_timeout_s=60,
    )
    with launch_server(spec) as server:
        assert server.pgid == server.pid and os.getpgid(server.pid) == server.pid
        assert os.getpgid(server.pid) != os.getpgid(0)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(server.base_url + "/ready", timeout=2) as resp:
            assert resp.status == 200
        assert server.serving_env is None  # not a Python server the lifecycle can look into
        pid = server.pid
    assert not group_alive(pid) and not pid_alive(pid)


def test_external_starts_and_stops_nothing(tmp_path: Path):
    spec = ServerSpec(
        launcher="external",
        model_id=MODEL,
        base_url="http://127.0.0.1:9/v1/",
        api_key_env="SOME_KEY",
        log_path=tmp_path / "server.log",
    )
    with launch_server(spec) as server:
        assert server.base_url == "http://127.0.0.1:9"
        assert server.pid is None and server.command == [] and server.port == 9
        assert server.api_key_env == "SOME_KEY"
    assert "external server http://127.0.0.1:9" in (tmp_path / "server.log").read_text()
    no_url = ServerSpec(launcher="external", model_id=MODEL)
    with pytest.raises(ValueError, match="launcher external needs"), launch_server(no_url):
        pass
