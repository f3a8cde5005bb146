"""provenance.json: every field present, and true (checked against the thing itself)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.support.paths import REPO
from thetalker.data.records import read_json, write_json
from thetalker.pipeline.provenance import (
    PACKAGES,
    PROVENANCE_SCHEMA,
    collect_provenance,
    git_state,
    utc_now,
    write_provenance,
)

TOP_LEVEL = (
    "schema_version",
    "system",
    "model",
    "concurrency",
    "host",
    "started_at",
    "ended_at",
    "seed",
    "workflow",
    "config",
    "deploy",
    "prompts",
    "reference",
    "server",
    "packages",
    "hardware",
    "scheduler",
    "resources",
)

STOCK = {"THESTAGE_VLLM_OMNI": "0"}  # how a config asks for stock vllm-omni


class _SpeechApiStandIn(BaseHTTPRequestHandler):
    """/version and /v1/models as the speech API defines them; /slow never answers in time."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/version":
            body = {"version": "0.30.0"}
        elif self.path == "/v1/models":
            body = {"object": "list", "data": [{"id": "piper-joe", "object": "model"}]}
        else:
            self.send_error(404)
            return
        raw = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SpeechApiStandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "workflow"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "Snakefile").write_text("# a workflow\n")
    _git(repo, "add", "Snakefile")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "one")
    return repo


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_every_field_is_present_and_true(tmp_path, git_repo, api_server, monkeypatch) -> None:
    for name in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu-node-7")
    deploy = tmp_path / "piper-joe.yaml"
    deploy.write_text("workers: 2  # stock: 1\nthreads_per_worker: 1\n")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"sample_id": "a", "text": "Hello."}\n')
    reference = tmp_path / "ref.wav"
    reference.write_bytes(b"RIFF" + bytes(range(256)) * 4)
    job = {
        "system": "local-tuned",
        "model": "piper-joe",
        "deploy_file": str(deploy),
        "prompts": str(prompts),
        "ref_audio": str(reference),
        "seed": 7,
        "requests": {"1": 4},
    }
    server = SimpleNamespace(
        command=["python", "-m", "thetalker.server", "--port", "8091"],
        env={"PYTHONUNBUFFERED": "1", "HF_TOKEN": "hf_secret_value"},
        base_url=api_server,
        pid=12345,
    )
    resources = {"source": "proc", "peak_memory_mib": 321.5, "samples": 9}

    path = tmp_path / "c1" / "provenance.json"
    written = write_provenance(
        path,
        server=server,
        config_slice=job,
        concurrency=1,
        started_at=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
        ended_at=utc_now(),
        resources=resources,
        workflow_dir=git_repo,
    )
    data = read_json(path)
    assert data == written
    assert all(key in data for key in TOP_LEVEL), set(TOP_LEVEL) - set(data)
    assert data["schema_version"] == PROVENANCE_SCHEMA
    assert (data["system"], data["model"], data["concurrency"], data["seed"]) == (
        "local-tuned",
        "piper-joe",
        1,
        7,
    )
    assert data["config"] == job

    assert data["workflow"]["commit"] == _git(git_repo, "rev-parse", "HEAD")
    assert data["workflow"]["dirty"] is False

    assert data["deploy"]["path"] == str(deploy)
    assert data["deploy"]["sha256"] == _sha256(deploy)
    assert data["deploy"]["content"] == deploy.read_text()
    assert data["prompts"]["sha256"] == _sha256(prompts)
    assert data["reference"]["sha256"] == _sha256(reference)
    assert data["reference"]["bytes"] == reference.stat().st_size

    assert data["server"]["command"] == server.command
    assert data["server"]["env"] == {"PYTHONUNBUFFERED": "1", "HF_TOKEN": "<redacted>"}
    assert data["server"]["version"]["body"] == {"version": "0.30.0"}
    assert data["server"]["server_version"] == "0.30.0"
    assert data["server"]["models"]["body"]["data"][0]["id"] == "piper-joe"

    for name in PACKAGES:
        try:
            expected = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            expected = None
        assert data["packages"][name] == expected, name
    assert data["packages"]["thetalker"] is not None

    hardware = data["hardware"]
    assert hardware["gpus"] is not None or hardware["cpu_model"]
    assert data["host"]
    assert data["started_at"] == "2025-01-02T03:04:05.000+00:00"
    ended = datetime.fromisoformat(data["ended_at"])
    assert ended.utcoffset().total_seconds() == 0
    assert data["resources"] == resources
    assert data["scheduler"]["slurm_job_id"] == "4242"
    assert data["scheduler"]["slurm_job_nodelist"] == "gpu-node-7"


def test_dirty_flag_and_a_directory_outside_git(tmp_path, git_repo, monkeypatch) -> None:
    (git_repo / "Snakefile").write_text("# edited\n")
    assert git_state(git_repo) == {"commit": _git(git_repo, "rev-parse", "HEAD"), "dirty": True}
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    # Keep git from finding a repository above tmp_path.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert git_state(outside) == {"commit": None, "dirty": None}


def test_no_deploy_file_and_an_unreachable_server(tmp_path, unused_tcp_port, monkeypatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    data = collect_provenance(
        command=["vllm-omni", "serve", "x"],
        env={},
        base_url=f"http://127.0.0.1:{unused_tcp_port}",
        deploy_file=None,
        prompts=tmp_path / "missing.jsonl",
        workflow_dir=tmp_path,
        http_timeout_s=1.0,
    )
    assert data["deploy"] is None
    assert "error" in data["server"]["version"] and data["server"]["server_version"] is None
    assert "error" in data["server"]["models"]
    assert data["prompts"]["sha256"] is None
    assert "missing.jsonl" in data["prompts"]["path"] and data["prompts"]["error"]
    assert data["reference"] is None
    assert data["scheduler"] is None  # not in a Slurm job


def test_a_server_that_hangs_is_recorded_not_raised() -> None:
    listener = socket.socket()  # accepts connections, never answers
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    try:
        port = listener.getsockname()[1]
        data = collect_provenance(base_url=f"http://127.0.0.1:{port}", http_timeout_s=0.5)
    finally:
        listener.close()
    assert "timed out" in data["server"]["version"]["error"].lower()


@pytest.mark.slow
def test_the_real_local_server_command_is_the_one_that_ran(tmp_path) -> None:
    """Launched by thetalker.lifecycle.launch, sampled, described: the recorded command line is the
    running process's own /proc cmdline, and /v1/models names the served voice."""
    from thetalker.lifecycle.launch import ServerSpec, launch_server
    from thetalker.pipeline.sampler import ResourceSampler

    deploy = REPO / "deploy" / "piper-joe.yaml"
    spec = ServerSpec(
        launcher="local",
        model_id="piper-joe",
        deploy_config=deploy,
        log_path=tmp_path / "server.log",
        health_timeout_s=120,
    )
    with launch_server(spec) as server:
        with ResourceSampler(pid=server.pid, interval_s=0.2) as sampler:
            ran = Path(f"/proc/{server.pid}/cmdline").read_bytes().split(b"\0")[:-1]
        data = collect_provenance(
            server=server, deploy_file=deploy, resources=sampler.result(), workflow_dir=tmp_path
        )
    assert data["server"]["command"] == [arg.decode() for arg in ran]
    assert data["server"]["env"] == server.env
    assert data["server"]["server_version"] == importlib.metadata.version("thetalker")
    assert [m["id"] for m in data["server"]["models"]["body"]["data"]] == ["piper-joe"]
    assert data["deploy"]["sha256"] == _sha256(deploy)
    # The loaded Piper voice (an ONNX model of about 60 MB) is in the server's RSS.
    assert data["resources"]["source"] == "proc"
    assert data["resources"]["peak_memory_mib"] > 60


def test_provenance_table_rows_from_real_provenance_files(tmp_path, git_repo) -> None:
    from thetalker.report.provenance_table import main

    deploy = tmp_path / "d.yaml"
    deploy.write_text("workers: 2\n")
    first = tmp_path / "runs" / "local" / "piper-joe" / "c2" / "provenance.json"
    write_provenance(
        first,
        config_slice={"system": "local", "model": "piper-joe", "deploy_file": str(deploy)},
        concurrency=2,
        started_at="2025-01-02T03:04:05.000+00:00",
        workflow_dir=git_repo,
    )
    # A GPU point whose file lacks system/model/concurrency: they come from its path.
    second = tmp_path / "runs" / "vllm-omni" / "qwen3tts06b" / "c8" / "provenance.json"
    gpu_doc = collect_provenance(started_at="2025-03-04T05:06:07.000+00:00")
    gpu_doc["hardware"]["gpus"] = [{"name": "NVIDIA H200", "driver_version": "570.1"}] * 2
    gpu_doc["server"]["server_version"] = "0.30.0"
    write_json(second, gpu_doc)

    out = tmp_path / "tables" / "provenance.md"
    assert main(["--out", str(out), str(first), str(second)]) == 0
    lines = out.read_text().splitlines()
    rows = [line for line in lines if line.startswith("| ") and "---" not in line][1:]
    commit = _git(git_repo, "rev-parse", "HEAD")[:12]
    cpu_cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cpu_cells[:5] == ["local", "piper-joe", "2", commit, _sha256(deploy)[:12]]
    assert cpu_cells[6].startswith("none (CPU: ")
    assert cpu_cells[7] == "2025-01-02 03:04"
    gpu_cells = [c.strip() for c in rows[1].strip("|").split("|")]
    assert gpu_cells[:3] == ["vllm-omni", "qwen3tts06b", "8"]
    assert gpu_cells[4:] == ["none", "0.30.0", "2x NVIDIA H200", "2025-03-04 05:06", "n/a"]
    # The machine's load during the point: the share other processes took (resources).
    assert cpu_cells[8] == "n/a"  # written with no sampler: no figure
    gpu_doc["resources"] = {"other_cpu_pct": 73.04}
    write_json(second, gpu_doc)
    assert main(["--out", str(out), str(second)]) == 0
    assert out.read_text().splitlines()[-1].endswith("| 73.0% (busy) |")


class _HostileVersion(_SpeechApiStandIn):
    """A server whose /version answer is HTML meant for whoever renders provenance.md."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path != "/version":
            return super().do_GET()
        raw = json.dumps({"version": "<script>alert(1)</script> & a|b\nc"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


def test_a_servers_words_reach_provenance_md_escaped(tmp_path, git_repo) -> None:
    # Issue 45: a /version holding `<script>` landed raw in provenance.md, where a viewer that
    # passes inline HTML renders it. The cell shows the words, as text, on one line.
    from thetalker.report.provenance_table import main

    server = ThreadingHTTPServer(("127.0.0.1", 0), _HostileVersion)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        doc = collect_provenance(
            base_url=f"http://127.0.0.1:{server.server_address[1]}",
            system="s<b>", model="m", concurrency=1, workflow_dir=git_repo,
        )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    path = tmp_path / "runs" / "s" / "m" / "c1" / "provenance.json"
    write_json(path, doc)
    out = tmp_path / "provenance.md"
    assert main(["--out", str(out), str(path)]) == 0
    text = out.read_text()
    assert "<" not in text and ">" not in text
    row = text.splitlines()[-1]
    assert row.startswith("| s&lt;b&gt; | m | 1 |")
    assert "| &lt;script&gt;alert(1)&lt;/script&gt; &amp; a\\|b c |" in row


def test_provenance_table_names_a_bad_file(tmp_path, capsys) -> None:
    from thetalker.report.provenance_table import main

    bad = tmp_path / "provenance.json"
    bad.write_text('{"schema_version": "something/9"}\n')
    assert main(["--out", str(tmp_path / "p.md"), str(bad)]) == 1
    err = capsys.readouterr().err
    assert str(bad) in err and "schema_version" in err
    assert not (tmp_path / "p.md").exists()


# --- the serving environment: what the server's interpreter would load ----------------------


def _fake_thestage(site: Path, version: str = "9.9.9") -> Path:
    """A thestage-vllm-omni distribution (metadata and entry points only) on a sys.path entry."""
    info = site / f"thestage_vllm_omni-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: thestage-vllm-omni\nVersion: {version}\n"
    )
    (info / "entry_points.txt").write_text(
        "[vllm.general_plugins]\nthestage_speedup = thestage_vllm_omni.plugin:register\n\n"
        "[vllm_omni.platform_plugins]\nthestage_platform = thestage_vllm_omni.platform:load\n"
    )
    return site


def test_the_probe_reads_real_entry_points_in_the_given_environment(tmp_path, monkeypatch):
    import os
    import sys

    from thetalker.lifecycle.serving_env import contamination, probe_serving_env

    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    site = _fake_thestage(tmp_path / "site")
    env = {**os.environ, "PYTHONPATH": str(site)}
    facts = probe_serving_env(sys.executable, env)
    assert facts["packages"]["thestage-vllm-omni"] == "9.9.9"
    ours = {(p["group"], p["name"]) for p in facts["plugins"] if p["dist"] == "thestage-vllm-omni"}
    assert ours == {
        ("vllm.general_plugins", "thestage_speedup"),
        ("vllm_omni.platform_plugins", "thestage_platform"),
    }
    stock = contamination(facts, None, {"THESTAGE_VLLM_OMNI": "0"})
    assert stock["stock"] and stock["stock_contaminated"]
    assert {p["name"] for p in stock["thestage_plugins"]} == {
        "thestage_speedup",
        "thestage_platform",
    }
    # The thestage system itself is not stock: the same facts are no fault there; nor does
    # a system's name make it stock (issue 37: no server's name is tested).
    assert not contamination(facts, None, {})["stock_contaminated"]

    # Not installed where the server runs (only here, not on its path): clean.
    clean = probe_serving_env(sys.executable, {**os.environ, "PYTHONPATH": ""})
    assert clean["packages"]["thestage-vllm-omni"] is None
    assert not contamination(clean, None, STOCK)["stock_contaminated"]

    # VLLM_PLUGINS, an allowlist, keeps it out; unless the server's log shows it active.
    allow = probe_serving_env(sys.executable, {**env, "VLLM_PLUGINS": "vllm_omni_register_models"})
    assert allow["VLLM_PLUGINS"] == "vllm_omni_register_models"
    assert not contamination(allow, None, STOCK)["stock_contaminated"]
    log = tmp_path / "server.log"
    log.write_text("INFO plugins: loaded thestage_speedup (thestage-vllm-omni 9.9.9)\n")
    flagged = contamination(allow, log, STOCK)
    assert flagged["stock_contaminated"] and len(flagged["log_lines"]) == 1


def test_a_stock_point_served_with_thestage_is_flagged_in_provenance_and_warned(
    tmp_path, monkeypatch, capfd
):
    """End to end: the library on the server's path only; launch probes the server's own
    interpreter (the script's #! line), provenance flags the point, the job log warns."""

    from thetalker.lifecycle.launch import ServerSpec, launch_server

    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    site = _fake_thestage(tmp_path / "site", "1.2.3")
    slow = REPO / "tests" / "support" / "slow_stop_server.py"
    spec = ServerSpec(
        launcher="vllm-omni",
        model_id="m",
        executable=str(slow),
        log_path=tmp_path / "server.log",
        env={"THESTAGE_VLLM_OMNI": "0", "PYTHONPATH": str(site)},
        check_gpu=False,
        stop_grace_s=0.2,
    )
    with launch_server(spec) as server:
        assert server.serving_env["packages"]["thestage-vllm-omni"] == "1.2.3"
        data = write_provenance(
            tmp_path / "provenance.json",
            server=server,
            config_slice={"system": "vllm-omni", "model": "m"},
            concurrency=1,
        )
    assert data["stock_contaminated"] is True
    assert data["serving_env"]["packages"]["thestage-vllm-omni"] == "1.2.3"
    assert read_json(tmp_path / "provenance.json")["stock_contaminated"] is True
    err = capfd.readouterr().err
    assert "stock vllm-omni server, but thestage-vllm-omni 1.2.3 is installed" in err
    assert "vllm-omni/m c1: a stock vllm-omni point served with thestage-vllm-omni 1.2.3" in err
    from tests.support.processes import pid_alive

    worker = (tmp_path / "server.log").read_text().split("worker pid=")[1].split()[0]
    assert not pid_alive(server.pid) and not pid_alive(int(worker))
