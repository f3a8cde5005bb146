"""The server's own view in the workflow: the published matrix plans a `/metrics` scrape
(server_metrics.json) for every vllm-omni point and the server table; the embedded default
writes server.md and server.png with the local server's metrics reconciled against the
client's records."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.support.processes import processes_in
from tests.support.workflow_copy import REPO as ROOT
from tests.support.workflow_copy import copy_workflow, smk
from tests.workflow.test_workflow import rules_of
from thetalker.data.record_reads import read_records


@pytest.fixture
def workflow(tmp_path: Path) -> Path:
    dest = copy_workflow(tmp_path / "wf")
    shutil.copytree(ROOT / "tests" / "configs", dest / "configs")
    yield dest
    assert not processes_in(dest), "processes left running in the workflow copy"


def test_published_dry_run_plans_the_scrape_for_every_vllm_omni_point(workflow):
    result = smk(workflow, "-n", "--configfile", "config/published.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    published = yaml.safe_load((workflow / "config" / "published.yaml").read_text())
    assert "server_table" in rules_of(result.stdout)
    assert "results/tables/server.md" in result.stdout
    assert "results/figures/server.png" in result.stdout
    points = [f"c{n}" for n in published["concurrency"]]
    points += [f"r{r:g}" for r in published.get("request_rates") or []]
    systems = [s for s, spec in published["systems"].items() if spec["launcher"] == "vllm-omni"]
    assert systems
    missing = [
        f"results/runs/{s}/{m}/{p}/server_metrics.json"
        for s in systems
        for m in published["models"]
        for p in points
        if f"results/runs/{s}/{m}/{p}/server_metrics.json" not in result.stdout
    ]
    assert not missing, missing[:5]


def test_embedded_default_writes_the_server_table_reconciled(workflow):
    config = "configs/embedded_tiny.yaml"
    result = smk(workflow, "results/tables/server.md", "--configfile", config)
    assert result.returncode == 0, result.stderr[-3000:]
    tables, run = workflow / "results" / "tables", workflow / "results" / "runs"
    assert (workflow / "results" / "figures" / "server.png").stat().st_size > 0

    for system in ("local", "local-stock"):
        point = run / system / "piper-joe" / "c2"
        data = json.loads((point / "server_metrics.json").read_text())
        assert data["available"] and data["prefix"] == "thetalker:"
        provenance = json.loads((point / "provenance.json").read_text())
        assert provenance["server_metrics"]["available"] is True
        scored = [r for r in read_records(point / "records.jsonl") if not r["warmup"]]
        # The deltas cover the scored requests only: warmup and probe fall outside.
        completed = data["counters"]["speech_stream_completed"][0]["value"]
        assert completed == len(scored) == 4

    rows = {(r["system"], r["point"]): r for r in csv.DictReader((tables / "server.csv").open())}
    assert set(rows) == {(s, p) for s in ("local", "local-stock") for p in ("c1", "c2")}
    for row in rows.values():
        assert row["server_metrics"] == "True"
        assert float(row["server_counted"]) == float(row["client_sent"])
        assert float(row["lost"]) == 0
        assert row["server_ttfp_p50_s"] and row["server_ttfp_p50_bucket_s"]
        assert row["queue_wait_mean_s"] and row["gap_mean_s"]
        parts = sum(float(row[f"part_{p}_s"]) for p in ("queue", "generation", "transport"))
        assert parts == pytest.approx(float(row["client_ttfa_mean_s"]))
        # The sampler's figures name the device they are of: the GPU nvidia-smi answered for,
        # or, with none, the server process tree's CPU and RSS (never a CPU called a GPU).
        prov = run / row["system"] / "piper-joe" / row["point"] / "provenance.json"
        source = json.loads(prov.read_text())["resources"]["source"]
        devices = {"nvidia-smi": ("GPU", "GPU"), "proc": ("CPU", "RSS")}[source]
        assert (row["busy_device"], row["memory_device"]) == devices
    text = (tables / "server.md").read_text()
    assert "| local | piper-joe | c2 |" in text and "no server metrics" not in text
    assert "4 / 4" in text
    assert "GPU busy" not in text and "(device)" in text
