"""The settings search end to end on the embedded default (docs/settings.md): one real
`snakemake --cores 2 results/tables/settings.md --configfile config/settings-local.yaml`
(the local Piper server, four settings of workers x max_active_streams, screened at 4
streams, the best and the stock one searched in full), shared by every test here; then dry
runs of the same folder: one value added to a knob plans only the new settings' bench jobs,
and a changed service level plans no bench job at all."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from tests.support.processes import processes_in
from tests.support.workflow_copy import copy_workflow, planned_jobs, smk, write_config

CONFIG = "config/settings-local.yaml"
RUN = Path("results/settings/local/piper-joe")
BENCH_RULES = {"settings_screen", "settings_bench"}
LABELS = {"stock", "workers=1", "max_active_streams=1", "workers=1+max_active_streams=1"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    workdir = copy_workflow(tmp_path_factory.mktemp("settings") / "wf")
    result = smk(workdir, "--cores", "2", "results/tables/settings.md", "--configfile", CONFIG)
    assert not processes_in(workdir), "processes left running in the workflow copy"
    assert result.returncode == 0, result.stderr[-4000:]
    return workdir


def dry_run(workdir: Path, config: dict) -> list[tuple[str, dict[str, str], str]]:
    path = write_config(workdir, "changed.yaml", config)
    result = smk(workdir, "-n", "--cores", "2", "results/tables/settings.md", "--configfile", path)
    assert result.returncode == 0, result.stderr[-3000:]
    return planned_jobs(result.stdout)


def shipped(workdir: Path) -> dict:
    return yaml.safe_load((workdir / CONFIG).read_text())


def test_every_setting_is_a_row_and_the_stock_one_is_marked(searched: Path):
    screen = json.loads((searched / RUN / "screen.json").read_text())
    assert {s["label"] for s in screen["settings"]} == LABELS
    kept = [s["label"] for s in screen["settings"] if s["kept"]]
    assert "stock" in kept and len(kept) == 2  # keep 1, and the stock setting always
    rows = list(csv.DictReader((searched / "results/tables/settings.csv").open()))
    assert {r["setting"] for r in rows} == LABELS
    out = [r for r in rows if r["screened_out_at"]]
    assert {r["setting"] for r in out} == LABELS - set(kept)
    assert all(r["screened_out_at"] == "4" for r in out)
    assert sum(r["winner"] == "True" for r in rows) == 1
    table = (searched / "results/tables/settings.md").read_text()
    assert "stock (stock)" in table and "screened out at c4" in table
    assert "**Winner: " in table and "distinguishable" in table
    assert "Envelope" in table
    assert (searched / "results/figures/settings.png").stat().st_size > 0


def test_each_setting_is_served_from_its_own_file_recorded_by_sha256(searched: Path):
    screen = json.loads((searched / RUN / "screen.json").read_text())
    for setting in screen["settings"]:
        folder = searched / RUN / setting["label"]
        (deploy,) = folder.glob("deploy-*.yaml")
        assert deploy.name == f"deploy-{setting['sha256'][:12]}.yaml"
        prov = json.loads((folder / "screen" / "c4" / "provenance.json").read_text())
        assert prov["config"]["deploy_sha256"] == setting["sha256"]
        served = yaml.safe_load(deploy.read_text())
        assert {k: served[k] for k in setting["values"]} == setting["values"]


def test_best_yaml_is_the_winners_deploy_file_with_what_it_won(searched: Path):
    text = (searched / RUN / "best.yaml").read_text()
    for head in ("# Won: ", "# Service level: ", "# Hardware: ", "# Margin over the runner-up: "):
        assert head in text
    assert "# Measured by: snakemake" in text and "results/tables/settings.md" in text
    assert yaml.safe_load(text)["workers"] in (1, 2)  # a deploy file the server reads


def test_adding_a_value_plans_only_the_new_settings_bench_jobs(searched: Path):
    config = shipped(searched)
    config["systems"]["local"]["settings"]["workers"] = [2, 1, 3]
    jobs = dry_run(searched, config)
    benched = {w["setting"] for rule, w, _ in jobs if rule in BENCH_RULES}
    assert benched == {"workers=3", "workers=3+max_active_streams=1"}


def test_changing_the_service_level_reruns_no_bench_job(searched: Path):
    config = shipped(searched)
    config["capacity"]["slo"] = {"max_audible_p95_s": 2.5}
    rules = {rule for rule, _, _ in dry_run(searched, config)}
    assert rules == {"settings_table"}


def test_a_knob_not_in_the_deploy_file_is_refused_before_any_server(searched: Path):
    config = shipped(searched)
    config["systems"]["local"]["settings"]["max_num_seqs"] = [1, 4]
    path = write_config(searched, "bad.yaml", config)
    result = smk(searched, "-n", "results/tables/settings.md", "--configfile", path)
    assert result.returncode != 0
    assert "config field systems.local.settings.max_num_seqs: the deploy file has no" in (
        result.stderr + result.stdout
    )
