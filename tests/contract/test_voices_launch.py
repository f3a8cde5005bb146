"""`thetalker-voice` and the server lifecycle (`thetalker.lifecycle.launch`, launcher `vllm-omni`)
against 0.30.0's real voices routes and speaker storage."""

from __future__ import annotations

import json
import stat
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.contract.conftest import SERVER, clear_uploaded_voices, thetalker_cli
from thetalker.data.wavio import write_wav
from thetalker.lifecycle.deploy import resolve
from thetalker.lifecycle.launch import ServerSpec, launch_server
from thetalker.lifecycle.processes import group_alive

QWEN = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"


@pytest.fixture(scope="module")
def ref_clip(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("clip") / "ref.wav"
    t = np.arange(int(24000 * 1.5)) / 24000
    write_wav(path, (0.3 * np.sin(2 * np.pi * 200 * t) * 32767).astype("<i2").tobytes(), 24000)
    return path


@pytest.fixture(scope="module")
def qwen(server_factory):
    server = server_factory(QWEN, resolve("qwen3tts17b").path)
    clear_uploaded_voices(server.base_url)  # shared with other modules: start from none
    return server


def voice(server, *args: str):
    return thetalker_cli("thetalker-voice", "--base-url", server.base_url + "/v1", *args)


def test_register_list_delete_against_the_real_routes(qwen, ref_clip):
    made = voice(qwen, "register", "Ref", "--audio", str(ref_clip), "--ref-text", "hello")
    assert made.returncode == 0, made.stderr
    listed = voice(qwen, "list")
    assert listed.returncode == 0, listed.stderr
    body = json.loads(listed.stdout)
    # 0.30.0 lists the lowercase union of built-in speakers, uploads and "default".
    assert "ref" in body["voices"] and "ryan" in body["voices"] and "default" in body["voices"]
    [upload] = body["uploaded_voices"]
    assert upload["name"] == "Ref" and upload["ref_text"] == "hello"
    assert {"embedding_source", "embedding_dim"} <= set(upload)
    assert voice(qwen, "delete", "ref").returncode == 0
    again = voice(qwen, "delete", "ref")
    assert again.returncode == 1 and "not found" in again.stderr


def test_a_name_equal_to_a_built_in_speaker_is_refused(qwen, ref_clip):
    result = voice(qwen, "register", "Ryan", "--audio", str(ref_clip))
    assert result.returncode == 1
    assert "reserved by a built-in speaker" in result.stderr


def wrapper(tmp: Path, python: Path) -> Path:
    """A `vllm-omni` program that is the fake-engine server (the launcher finds it on PATH)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    program = bin_dir / "vllm-omni"
    program.write_text(f'#!/bin/sh\nexec "{python}" "{SERVER}" "$@"\n')
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return program


def test_launch_serves_registers_the_voice_and_stops_the_group(contract_python, ref_clip, tmp_path):
    program = wrapper(tmp_path, contract_python)
    spec = ServerSpec(
        launcher="vllm-omni",
        model_id="k2-fsa/OmniVoice",
        deploy_config=resolve("omnivoice").path,
        executable=str(program),
        health_timeout_s=300,
        log_path=tmp_path / "logs" / "server.log",
        register_voice={"name": "ref", "audio": str(ref_clip), "ref_text": "hello"},
    )
    with launch_server(spec) as server:
        assert server.voice == "ref"
        with urllib.request.urlopen(server.base_url + "/v1/audio/voices", timeout=30) as resp:
            body = json.loads(resp.read())
        assert body["voices"] == ["default", "ref"]
        voices_dir = Path(server.env["SPEAKER_SAMPLES_DIR"])
        assert [p.suffix for p in voices_dir.iterdir()] == [".safetensors"]
        pgid = server.pid
    assert not group_alive(pgid)
    assert "Application startup complete." in (tmp_path / "logs" / "server.log").read_text()
