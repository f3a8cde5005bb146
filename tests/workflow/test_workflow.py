"""Snakemake itself, on a temporary copy of the workflow: lint, dry runs of the published
matrix, reruns after a deploy-file edit, a bad config field, a server that never becomes
healthy, and the embedded default end to end (tables holding numbers measured in that run)."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.processes import processes_in
from tests.support.workflow_copy import REPO as ROOT
from tests.support.workflow_copy import (
    bench_jobs,
    copy_workflow,
    planned_jobs,
    rules_of,
    smk,
    smk_offline,
    tiny_config,
    write_config,
)
from thetalker.data.records import read_records
from thetalker.metrics import summarize_point


@pytest.fixture
def workflow(tmp_path: Path) -> Path:
    """A copy of the workflow (deploy files copied, not linked) plus tests/configs as configs/."""
    dest = copy_workflow(tmp_path / "wf")
    shutil.copytree(ROOT / "tests" / "configs", dest / "configs")
    yield dest
    leftovers = processes_in(dest)
    assert not leftovers, f"processes left running in the workflow copy: {leftovers}"


def test_lint_is_clean(workflow):
    result = smk(workflow, "--lint")
    assert result.returncode == 0, result.stdout + result.stderr


def test_snakefmt_is_clean():
    result = subprocess.run(
        ["snakefmt", "--check", "Snakefile", "rules"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_published_dry_run_lists_one_serving_job_per_system_and_model(published_dry_run):
    result = published_dry_run
    published = yaml.safe_load((ROOT / "config" / "published.yaml").read_text())
    # Each system on its `models` (the Nari systems: Qwen3-TTS 1.7B CustomVoice alone;
    # sglang-omni: both Qwen3-TTS CustomVoice checkpoints).
    expected = {
        (s, m)
        for s, spec in published["systems"].items()
        for m in spec.get("models") or published["models"]
    }
    every = [s for s, spec in published["systems"].items() if not spec.get("models")]
    assert len(published["models"]) == 5
    listed = [spec["models"] for spec in published["systems"].values() if spec.get("models")]
    assert len(expected) == 5 * len(every) + sum(len(models) for models in listed)
    assert bench_jobs(result.stdout) == expected
    assert [r for r, _, _ in planned_jobs(result.stdout)].count("bench") == len(expected)
    assert {"points", "tables", "figures", "capacity", "all"} <= rules_of(result.stdout)
    # Every table and figure is a target, and the config replaced (not merged into) the default.
    for name in ("throughput", "continuity", "ttfa", "cost", "capacity"):
        assert f"results/tables/{name}.md" in result.stdout
        assert f"results/figures/{name}.png" in result.stdout
    assert "piper-joe" not in result.stdout
    # The capacity search is a step of every bench job (same server session): its manifest is
    # an output and the command runs it.
    search = published["capacity"]
    assert search["refine"] is True and search["max_steps"] >= 1
    bench_commands = [
        line
        for line in result.stdout.splitlines()
        if "serve_and_sweep" in line and "--search-manifest results/runs/" in line
    ]
    assert len(bench_commands) == len(expected)
    assert all('"max_steps":' in line and "search.json" in line for line in bench_commands)


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda c: c.update(seed="forty-two"), "seed"),
        (lambda c: c["systems"]["vllm-omni"].update(launcher="docker"), "launcher"),
        (lambda c: c["requests"].pop(48), "requests"),
    ],
)
def test_bad_config_field_fails_naming_it(workflow, edit, field):
    config = yaml.safe_load((workflow / "config" / "published.yaml").read_text())
    edit(config)
    result = smk(workflow, "-n", "--configfile", write_config(workflow, "bad.yaml", config))
    assert result.returncode != 0
    message = result.stdout + result.stderr
    assert field in message
    assert not planned_jobs(result.stdout)  # refused before planning anything


def test_never_healthy_server_fails_within_timeout_and_leaves_nothing(workflow):
    result = smk(workflow, "--configfile", "configs/never_healthy.yaml", timeout=240)
    assert result.returncode != 0
    # It gave up at its own 3 s health timeout (its log says so), whatever the machine's speed.
    bench_log = (workflow / "results/logs/hang/qwen3tts06b/bench.log").read_text()
    assert "not healthy after 3 s" in bench_log
    assert (workflow / "results/logs/hang/qwen3tts06b/server.log").is_file()
    assert not (workflow / "results/runs/hang/qwen3tts06b/c1/records.jsonl").exists()
    assert not processes_in(workflow)  # checked again by the fixture


def test_repeats_and_request_rates_plan_rounds_and_rate_points(workflow):
    config = yaml.safe_load((workflow / "configs" / "embedded_tiny.yaml").read_text())
    config.update(repeats=2, request_rates=[0.5, 3], rate_requests=4)
    config["capacity"] = {"refine": True, "max_steps": 2}
    config["systems"]["local-agent"] = {
        "launcher": "local",
        "use_deploy_file": True,
        "protocol": "websocket",
    }
    name = write_config(workflow, "rounds.yaml", config)
    targets = ("results/tables/capacity.md", "results/tables/agent.md")
    result = smk(workflow, "-n", *targets, "--configfile", name)
    assert result.returncode == 0, result.stderr[-3000:]
    # agent.md reads each closed-loop point's first round.
    agent = next(
        body
        for rule, body in re.findall(
            r"^(?:local)?rule (\w+):\n(.*?)\n\n", result.stdout, re.M | re.S
        )
        if rule == "agent_table"
    )
    assert "results/runs/local-agent/piper-joe/c2/round1/records.jsonl" in agent
    assert "round2" not in agent
    run = "results/runs/local/piper-joe"
    for point in ("c1", "c2", "r0.5", "r3"):
        for k in (1, 2):
            assert f"{run}/{point}/round{k}/records.jsonl" in result.stdout, (point, k)
    assert f"{run}/c1/records.jsonl" not in result.stdout
    assert f"--search-manifest {run}/search.json" in result.stdout
    assert {"bench", "points", "capacity"} <= rules_of(result.stdout)


@pytest.mark.slow
def test_deploy_edit_reruns_only_the_system_and_model_serving_it(workflow):
    config = "configs/standin.yaml"
    result = smk(workflow, "--configfile", config)
    assert result.returncode == 0, result.stderr[-3000:]
    for system in ("vllm-omni", "thestage-vllm-omni"):
        for model in ("qwen3tts17b", "moss"):
            for c in (1, 2):
                records = workflow / f"results/runs/{system}/{model}/c{c}/records.jsonl"
                assert sum(1 for r in read_records(records) if r["ok"]) >= 2
    assert "Nothing to be done" in smk(workflow, "-n", "--configfile", config).stdout

    # Change one deploy file's content but not its mtime: only params can see it.
    deploy = workflow / "deploy" / "qwen3tts17b.yaml"
    stat = deploy.stat()
    deploy.write_text(
        deploy.read_text().replace("codec_chunk_frames: 75", "codec_chunk_frames: 50")
    )
    os.utime(deploy, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    dry = smk(workflow, "-n", "--configfile", config)
    assert dry.returncode == 0, dry.stderr
    assert bench_jobs(dry.stdout) == {("vllm-omni", "qwen3tts17b")}
    reasons = [reason for rule, _, reason in planned_jobs(dry.stdout) if rule == "bench"]
    assert "Params have changed" in reasons[0]
    assert {"points", "tables", "figures"} <= rules_of(dry.stdout)

    # Put the file back, then change one model's own request count: the two systems
    # serving that model rerun, nothing else.
    deploy.write_text(
        deploy.read_text().replace("codec_chunk_frames: 50", "codec_chunk_frames: 75")
    )
    os.utime(deploy, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert "Nothing to be done" in smk(workflow, "-n", "--configfile", config).stdout
    edited = yaml.safe_load((workflow / config).read_text())
    edited["models"]["moss"]["requests"] = {2: 3}
    dry = smk(workflow, "-n", "--configfile", write_config(workflow, "moss_counts.yaml", edited))
    assert dry.returncode == 0, dry.stderr
    assert bench_jobs(dry.stdout) == {("vllm-omni", "moss"), ("thestage-vllm-omni", "moss")}
    assert {"points", "tables", "figures"} <= rules_of(dry.stdout)


@pytest.mark.slow
def test_embedded_default_end_to_end_then_tables_rebuild_from_records(
    default_workflow_run: Path, tmp_path: Path
):
    # The session's default run (the README's first command, tests/conftest.py), copied with
    # Snakemake's metadata so this test may delete its tables.
    workflow = tmp_path / "wf"
    shutil.copytree(default_workflow_run, workflow, symlinks=True)
    tables = workflow / "results" / "tables"
    for name in ("throughput", "continuity", "ttfa", "cost"):
        assert (tables / f"{name}.md").is_file(), name
    assert (workflow / "results/logs/local/piper-joe/server.log").is_file()

    # The headline row holds the RTFx of this run's own records, for both systems, and a ratio.
    rtfx = {}
    for system in ("local", "local-stock"):
        records = list(read_records(workflow / f"results/runs/{system}/piper-joe/c2/records.jsonl"))
        assert records and all(r["ok"] for r in records)
        rtfx[system] = summarize_point(records, 2)["rtfx"]
    throughput = (tables / "throughput.md").read_text()
    # each RTFx printed with its interval (value ± half-width), the ratio with [low, high]
    row = f"| piper-joe | {rtfx['local']:.1f} ± "
    assert row in throughput and f"| {rtfx['local-stock']:.1f} ± " in throughput
    assert re.search(r"\| \d+\.\d\dx \[\d+\.\d\d, \d+\.\d\d\]( †)? \|", throughput)
    assert "n/a" not in (tables / "ttfa.md").read_text()
    # Issue 50 on the embedded default (no GPU): every point has the server tree's
    # CPU-seconds per audio-second, its streams in flight and its time to 2 s of audio.
    with (workflow / "results/points.csv").open() as fh:
        for point in csv.DictReader(fh):
            where = f"{point['system']} {point['point']}"
            assert float(point["cpu_s_per_audio_s"]) > 0, where
            assert float(point["sessions_in_flight"]) > 0, where
            assert float(point["time_to_usable_audio_s_p50"]) > 0, where
            assert point["energy_note"] == "" and point["busy_device"] == "cpu", where
    before = {p.name: p.read_text() for p in tables.iterdir()}

    # Deleting the tables reruns no benchmark: they come back from records.jsonl alone.
    shutil.rmtree(tables)
    dry = smk(workflow, "-n", "results/tables/throughput.md")
    assert rules_of(dry.stdout) == {"tables"}
    again = smk(workflow, "--cores", "2", *(f"results/tables/{name}" for name in before))
    assert again.returncode == 0, again.stderr[-3000:]
    assert {p.name: p.read_text() for p in tables.iterdir()} == before


@pytest.mark.slow
def test_one_system_config_runs_every_target_with_no_ratio_or_comparison(tmp_path: Path):
    # A user measuring one endpoint names one system, no report.ratio, no quality.compare:
    # every target builds, with no ratio column and no comparison drawn.
    config = tiny_config()
    config["report"].pop("ratio")
    config["quality"] = {
        "enabled": True,
        "prompts": "prompts/seed_tts_eval_en_200.jsonl",
        "requests": 2,
        "concurrency": 1,
        "n_resamples": 200,
        "asr": {"backend": "faster-whisper", "model": "tiny.en-bundled", "workers": 1},
    }
    workflow = copy_workflow(tmp_path / "wf")
    result = smk_offline(
        workflow, "--cores", "2", "--configfile", write_config(workflow, "one.yaml", config)
    )
    leftovers = processes_in(workflow)
    assert not leftovers, f"processes left running in the workflow copy: {leftovers}"
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    tables = workflow / "results" / "tables"
    throughput = (tables / "throughput.md").read_text()
    header = next(line for line in throughput.splitlines() if line.startswith("| model"))
    assert header.split("|")[1:-1] == [" model ", " local "], header
    assert (tables / "wer.md").is_file()
    assert not (workflow / "results" / "quality" / "compare").exists()
