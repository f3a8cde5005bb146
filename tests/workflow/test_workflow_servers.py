"""The server kinds beside vllm-omni in the workflow (thetalker.backends), Snakemake really
run on tests/configs/servers.yaml: Nari by its launcher (HTTP and its nari.speech.v1 agent
socket), any server from a command template, and an external endpoint this test starts
itself (the job starts and stops nothing; provenance keeps the URL, not the key). Each
system runs its own model list. And the published matrix's plan: the Nari systems on
Qwen3-TTS 1.7B CustomVoice alone."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import yaml

from tests.support.paths import STANDINS
from tests.support.processes import processes_in
from tests.support.workflow_copy import REPO, copy_workflow, smk, smk_env
from thetalker.data.record_reads import read_records
from thetalker.lifecycle.launch import free_port

KEY_ENV = "THETALKER_TEST_EXTERNAL_KEY"
KEY = "sk-test-do-not-record-4d1f"
NARI_SYSTEMS = ("nari-ttfa", "nari-agent", "nari-cmd", "nari-external")


def _start_external(log: Path) -> tuple[subprocess.Popen, str]:
    """A Nari stand-in started by the test, not the workflow."""
    port = free_port()
    proc = subprocess.Popen(
        [str(STANDINS / "nari-qwen3-tts-server"), "--profile", "throughput", "--port", str(port),
         "--host", "127.0.0.1"],
        env={**os.environ, "STANDIN_LOG": str(log), "STANDIN_WARMUP_S": "0"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + 30
    while True:
        try:
            with opener.open(url + "/ready", timeout=1) as resp:
                if resp.status == 200:
                    return proc, url
        except OSError:
            pass
        assert time.monotonic() < deadline, "the external stand-in never got ready"
        time.sleep(0.05)


def test_nari_command_and_external_systems_end_to_end(tmp_path: Path):
    workflow = copy_workflow(tmp_path / "wf")
    config = yaml.safe_load((REPO / "tests" / "configs" / "servers.yaml").read_text())
    external_log = tmp_path / "external.jsonl"
    external, url = _start_external(external_log)
    try:
        config["systems"]["nari-external"] = {
            "launcher": "external",
            "server": "nari",
            "base_url": url,
            "api_key_env": KEY_ENV,
            "models": ["qwen3tts17b"],
        }
        (workflow / "servers.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        served_log = tmp_path / "served.jsonl"
        env = smk_env(**{KEY_ENV: KEY, "STANDIN_LOG": str(served_log), "STANDIN_WARMUP_S": "0.5"})
        result = smk(workflow, "-c1", "--configfile", "servers.yaml", env=env, timeout=900)
        assert result.returncode == 0, result.stderr[-4000:]
        assert external.poll() is None, "the job stopped a server it did not start"
        assert not processes_in(workflow)
    finally:
        external.terminate()
        external.wait(timeout=10)

    runs = workflow / "results" / "runs"
    # Each system ran its own models only.
    assert sorted(p.name for p in (runs / "vllm-omni").iterdir() if p.is_dir()) == ["qwen3tts06b"]
    for system in NARI_SYSTEMS:
        assert sorted(p.name for p in (runs / system).iterdir() if p.is_dir()) == ["qwen3tts17b"]

    def sent(log: Path) -> dict[tuple[str, bool, int], list[int]]:
        """(profile, socket, seed) -> the chunk sizes the stand-in sent. Every point sends
        the same prompt for the same index (and seed), so repeats agree."""
        entries = [json.loads(line) for line in log.read_text().splitlines()]
        assert all(e.get("status", 200) == 200 for e in entries), "a request was refused"
        out: dict[tuple[str, bool, int], list[int]] = {}
        for e in entries:
            if e.get("socket") or e["body"].get("stream"):
                seed = (e["start"] if e.get("socket") else e["body"])["seed"]
                key = (e["profile"], bool(e.get("socket")), seed)
                assert out.setdefault(key, e["chunks"]) == e["chunks"]
        return out

    chunks = {**sent(served_log), **sent(external_log)}
    profile_of = {
        "nari-ttfa": "ttfa", "nari-agent": "ttfa", "nari-cmd": "balanced",
        "nari-external": "throughput",
    }  # fmt: skip
    for system in NARI_SYSTEMS:
        socket = system == "nari-agent"
        for point in ("c1", "c2"):
            records = list(read_records(runs / system / "qwen3tts17b" / point / "records.jsonl"))
            assert records and all(r["ok"] for r in records), (system, point)
            for record in records:
                key = (profile_of[system], socket, 42 + record["request_index"])
                assert record["chunk_bytes"] == chunks[key], (system, point)
    # The external endpoint got the key on every request; no result file holds it.
    outside = [json.loads(line) for line in external_log.read_text().splitlines()]
    assert outside and all(e.get("auth") == f"Bearer {KEY}" for e in outside)
    for path in (workflow / "results").rglob("*"):
        if path.is_file() and path.suffix in (".json", ".jsonl", ".md", ".log", ".csv"):
            assert KEY not in path.read_text(errors="replace"), path
    provenance = json.loads((runs / "nari-external/qwen3tts17b/c1/provenance.json").read_text())
    assert provenance["server"]["base_url"] == url
    assert provenance["server"]["command"] == []
    models = provenance["server"]["models"]["body"]["data"]
    assert [m["id"] for m in models] == ["Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"]
    nari = json.loads((runs / "nari-ttfa" / "qwen3tts17b" / "c1" / "provenance.json").read_text())
    assert nari["server"]["command"][-2:] == ["--profile", "ttfa"]
    assert len(nari["server"]["startup"]["execution_config_sha256"]) == 64
    command = json.loads((runs / "nari-cmd" / "qwen3tts17b" / "c1" / "provenance.json").read_text())
    assert "balanced" in command["server"]["command"]
    agent = (workflow / "results" / "tables" / "agent.md").read_text()
    assert "| nari-agent | qwen3tts17b | 1 |" in agent
    throughput = (workflow / "results" / "tables" / "throughput.md").read_text()
    assert "| qwen3tts06b | n/a | n/a | n/a |" in throughput


def test_published_plans_the_nari_systems_on_qwen3_tts_17b_alone(tmp_path: Path):
    workflow = copy_workflow(tmp_path / "wf")
    result = smk(workflow, "-n", "-p", "--configfile", "config/published.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = [line for line in result.stdout.splitlines() if "serve_and_sweep --job" in line]
    nari = [json.loads(line.split("--job '", 1)[1].split("'", 1)[0]) for line in jobs]
    nari = [job for job in nari if job["launcher"] == "nari"]
    assert sorted((j["system"], j["model"]) for j in nari) == [
        ("nari-agent", "qwen3tts17b"),
        ("nari-throughput", "qwen3tts17b"),
        ("nari-ttfa", "qwen3tts17b"),
    ]
    profiles = {j["system"]: j["profile"] for j in nari}
    assert profiles == {"nari-agent": "ttfa", "nari-throughput": "throughput", "nari-ttfa": "ttfa"}
    assert all(j["mps"] is False and j["deploy_file"] is None for j in nari)
    # No quality run on Nari: the WER checkpoint is -Base, which it cannot serve.
    assert "results/quality/nari" not in result.stdout
