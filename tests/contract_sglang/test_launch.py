"""The project's lifecycle (`thetalker.lifecycle.launch`, the workflow's server start) with the
`sglang-omni` launcher, serving sglang-omni 0.1.9's real `sgl-omni serve` (only its pipeline
faked): the command and environment it builds, the `/health` wait through the server's own
warm-up, what the server then answers, and the stop of its whole process group."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.contract_sglang.conftest import SERVER, health, write_checkpoint
from thetalker import backends
from thetalker.lifecycle.launch import ServerSpec, launch_server
from thetalker.lifecycle.processes import group_alive


def console_script(python: Path, where: Path) -> Path:
    """An `sgl-omni` as pip writes console scripts (a `#!` line naming the venv's python),
    running the fake-engine server: the lifecycle finds the interpreter from it."""
    where.mkdir(parents=True, exist_ok=True)
    script = where / "sgl-omni"
    script.write_text(
        f"#!{python}\nimport runpy, sys\nsys.argv[0] = {str(SERVER)!r}\n"
        f"runpy.run_path({str(SERVER)!r}, run_name='__main__')\n"
    )
    script.chmod(0o755)
    return script


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def test_the_launcher_starts_waits_for_health_and_stops_the_group(sglang_python, tmp_path):
    model = write_checkpoint(tmp_path / "models")
    spec = ServerSpec(
        launcher="sglang-omni",
        model_id=str(model),
        executable=str(console_script(sglang_python, tmp_path / "bin")),
        extra_args=["--tts_engine.engine.max_running_requests", "3"],
        log_path=tmp_path / "logs" / "server.log",
        health_timeout_s=240,
    )
    with launch_server(spec) as server:
        assert server.command[1:6] == [
            "serve",
            "--model-path",
            str(model),
            "--model-name",
            str(model),
        ]
        assert server.command[-2:] == ["--tts_engine.engine.max_running_requests", "3"]
        assert server.env["SGLANG_OMNI_STRICT_PORT"] == "1"
        voices = Path(server.env["SPEAKER_SAMPLES_DIR"])
        assert voices.is_dir() and voices.parent == spec.log_path.parent
        # Ready means the server's own warm-up request went through first.
        log = server.log_path.read_text()
        assert "Server warmup of 1 request(s) finished" in log
        assert "FAKE_ENGINE_CEILING=67" in log  # 3 running + 64 queued (0.1.9's default)
        status = get_json(server.base_url + "/health")
        assert status["status"] == "healthy" and status["running"] is True
        models = [m["id"] for m in get_json(server.base_url + "/v1/models")["data"]]
        assert models == [str(model)], "--model-name: /v1/models shows the model id"
        voices_listed = get_json(server.base_url + "/v1/audio/voices")["voices"]
        assert "ryan" in voices_listed and "default" in voices_listed
        # No Prometheus endpoint, as the launcher says.
        assert backends.launcher("sglang-omni").metrics_path is None
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(server.base_url + "/metrics", timeout=10)
        assert missing.value.code == 404
        # The serving-environment probe asked the server's own interpreter.
        assert server.serving_env["python"] == str(sglang_python)
        packages = server.serving_env["packages"]
        assert packages["sglang-omni"] == "0.1.9" and packages["sglang"] == "0.5.22"
        assert packages["vllm-omni"] is None
        pgid, url = server.pgid, server.base_url
    assert not group_alive(pgid), "the server's process group outlived the launch"
    assert health(url) is None
