"""Systems as config/README.md writes them (issue 36): `launcher: external` with its
`base_url` and nothing else, and `launcher: command` with its template and nothing else,
pass the config check and run end to end through the job path
(thetalker.pipeline.serve_and_sweep.run_job) against the embedded server on loopback,
speaking vllm-omni's API, the API both launchers default to."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import yaml
from snakemake.utils import validate as validate_and_fill

from tests.support.paths import REPO
from tests.support.server_fixtures import start_local_server
from thetalker.pipeline import config_checks as wfc
from thetalker.pipeline.serve_and_sweep import run_job

MODEL = "piper-joe"


def _config(systems: dict) -> dict:
    """The embedded config cut to one short point, with `systems` as given."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config.update(concurrency=[1], requests={1: 2}, warmup=0, request_rates=[])
    config["capacity"] = {"refine": False, "max_steps": 0}
    config["systems"] = copy.deepcopy(systems)
    names = list(systems)
    config["report"].update(ratio=[names[0], names[-1]], headline_concurrency=1)
    config["quality"]["compare"] = [names[0], names[-1]]
    validate_and_fill(config, str(REPO / "config" / "schema.yaml"))
    return config


def _run(config: dict, system: str, tmp_path: Path) -> list[dict]:
    """The config's checks, then the (system, piper-joe) job's one point; its records."""
    wfc.check_config(config)
    wfc.check_inputs(config)
    job = wfc.bench_job(config, system, MODEL)
    assert job.server is None and job.speaks == "vllm-omni"
    records = tmp_path / "run" / "c1" / "records.jsonl"
    run_job(job, [records], tmp_path / "logs" / "server.log")
    return [json.loads(line) for line in records.read_text().splitlines()]


def test_an_external_system_with_only_its_base_url_runs(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(REPO)  # the config's paths (prompts, deploy/) are the repository's
    with start_local_server(["--deterministic"], log_dir=tmp_path / "srv") as server:
        config = _config({"ext": {"launcher": "external", "base_url": server.base_url}})
        records = _run(config, "ext", tmp_path)
    assert [r["ok"] for r in records] == [True, True]
    assert all(r["sample_rate"] == 22050 for r in records)


def test_a_command_system_with_only_its_template_runs(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(REPO)
    template = f"{sys.executable} -m thetalker.server --host {{host}} --port {{port}}"
    config = _config({"cmd": {"launcher": "command", "command": template}})
    records = _run(config, "cmd", tmp_path)
    assert [r["ok"] for r in records] == [True, True]
    assert all(r["sample_rate"] == 22050 for r in records)
