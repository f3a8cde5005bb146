"""The workflow config: both shipped configs pass the schema, bad fields are named, and the job
spec carries every setting a run depends on (and nothing of another system's)."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import jsonschema
import pytest
import yaml

from thetalker import workflow_config as wfc
from thetalker.bench import JOB_FIELDS, BenchJobError, parse_job

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED_MODELS = ["qwen3tts17b", "qwen3tts06b", "voxcpm2", "moss", "omnivoice"]


def load(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / name).read_text())


def validate(config: dict) -> None:
    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    jsonschema.Draft202012Validator(schema).validate(config)


@pytest.mark.parametrize("name", ["config.yaml", "published.yaml"])
def test_shipped_configs_pass_schema_and_cross_checks(name):
    config = load(name)
    validate(config)
    wfc.check_config(config)


def test_published_matrix_is_the_published_one():
    config = load("published.yaml")
    assert list(config["models"]) == PUBLISHED_MODELS
    assert config["concurrency"] == [1, 2, 4, 8, 16, 32, 48, 64]
    assert wfc.request_counts(config) == {
        1: 100, 2: 100, 4: 200, 8: 300, 16: 300, 32: 300, 48: 300, 64: 300
    }  # fmt: skip
    assert config["seed"] == 42 and config["warmup"] > 0
    assert config["prompts"] == "prompts/seed_tts_eval_en_100.jsonl"
    assert config["report"]["headline_concurrency"] == 32
    assert config["report"]["gpu_hour_usd"] == 2.99
    stock, thestage = config["systems"]["vllm-omni"], config["systems"]["thestage-vllm-omni"]
    assert stock == {
        "launcher": "vllm-omni",
        "use_deploy_file": True,
        "env": {"THESTAGE_VLLM_OMNI": "0"},
    }
    assert thestage == {"launcher": "vllm-omni", "use_deploy_file": False}
    models = config["models"]
    assert [m for m in PUBLISHED_MODELS if models[m].get("mps")] == [
        "qwen3tts17b",
        "qwen3tts06b",
        "moss",
    ]
    assert models["qwen3tts17b"]["voice"] == {"task_type": "CustomVoice", "speaker": "ryan"}
    assert models["moss"]["voice"]["clone"] == "registered"
    assert models["omnivoice"]["voice"]["clone"] == "registered"
    assert models["voxcpm2"]["voice"]["clone"] == "inline"
    for model in PUBLISHED_MODELS:
        assert (ROOT / "deploy" / f"{models[model]['deploy']}.yaml").is_file(), model


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda c: c.update(seed="forty-two"), "seed"),
        (lambda c: c["systems"]["local"].update(launcher="docker"), "launcher"),
        (lambda c: c["requests"].update({2: 0}), "requests"),
        (lambda c: c["models"]["piper-joe"].update(colour="red"), "colour"),
    ],
)
def test_schema_error_names_the_field(edit, field):
    config = load("config.yaml")
    edit(config)
    with pytest.raises(jsonschema.ValidationError) as info:
        validate(config)
    assert field in str(info.value)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c["requests"].pop(4), "config field requests: .* concurrency 4"),
        (
            lambda c: c["report"].update(headline_concurrency=8),
            "config field report.headline_concurrency",
        ),
        (lambda c: c["report"].update(ratio=["local", "nope"]), "report.ratio: .*'nope'"),
        (lambda c: c["models"]["piper-joe"].pop("deploy"), "models.piper-joe.deploy"),
        (lambda c: c["models"]["piper-joe"].update(voice={}), "models.piper-joe.voice"),
    ],
)
def test_cross_checks_name_the_field(edit, message):
    config = load("config.yaml")
    edit(config)
    with pytest.raises(wfc.ConfigError, match=message):
        wfc.check_config(config)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """Deploy files and prompts in a temporary working directory (paths are relative)."""
    shutil.copytree(ROOT / "deploy", tmp_path / "deploy")
    shutil.copytree(ROOT / "prompts", tmp_path / "prompts")
    shutil.copytree(ROOT / "reference", tmp_path / "reference")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_job_spec_follows_deploy_file_content_only_where_it_is_used(workdir):
    config = load("published.yaml")
    before = {
        (s, m): wfc.bench_job(config, s, m) for s in config["systems"] for m in config["models"]
    }
    path = workdir / "deploy" / "moss.yaml"
    path.write_text(path.read_text() + "\n# edited\n")
    changed = {key for key, job in before.items() if wfc.bench_job(config, *key) != job}
    assert changed == {("vllm-omni", "moss")}


def test_job_spec_carries_every_run_setting(workdir):
    config = load("published.yaml")
    job = parse_job(wfc.bench_job(config, "vllm-omni", "moss"))
    assert set(job) == set(JOB_FIELDS)
    assert job["deploy_file"] == "deploy/moss.yaml"
    assert job["deploy_sha256"] == wfc.file_sha256("deploy/moss.yaml")
    assert job["env"] == {"THESTAGE_VLLM_OMNI": "0"}
    assert job["extra_args"] == ["--init-timeout", "1800", "--stage-init-timeout", "1800"]
    assert job["mps"] is True and job["seed"] == 42
    assert job["requests"]["32"] == 300
    stock = parse_job(wfc.bench_job(config, "thestage-vllm-omni", "moss"))
    assert stock["deploy_file"] is None and stock["env"] == {}
    # Any other setting changes the spec too.
    edited = copy.deepcopy(config)
    edited["requests"][64] = 299
    assert wfc.bench_job(edited, "vllm-omni", "moss") != wfc.bench_job(config, "vllm-omni", "moss")


def test_bench_inputs_name_the_files_a_run_reads(workdir):
    config = load("published.yaml")
    assert wfc.bench_inputs(config, "vllm-omni", "voxcpm2") == {
        "prompts": "prompts/seed_tts_eval_en_100.jsonl",
        "deploy": "deploy/voxcpm2.yaml",
        "ref_audio": "reference/ref.wav",
        "ref_text": "reference/ref.txt",
    }
    assert wfc.bench_inputs(config, "thestage-vllm-omni", "qwen3tts17b") == {
        "prompts": "prompts/seed_tts_eval_en_100.jsonl"
    }


def test_parse_job_names_a_missing_field():
    with pytest.raises(BenchJobError, match="seed"):
        parse_job(json.dumps({k: None for k in JOB_FIELDS if k != "seed"}))


def test_job_maps_onto_server_spec_and_client_options(workdir):
    from thetalker.bench import bench_options, server_spec

    config = load("published.yaml")
    ref_text = (workdir / "reference" / "ref.txt").read_text().strip()
    log = workdir / "server.log"

    moss = parse_job(wfc.bench_job(config, "vllm-omni", "moss"))
    spec = server_spec(moss, log)
    assert (spec.launcher, spec.deploy_config, spec.mps) == ("vllm-omni", "deploy/moss.yaml", True)
    assert spec.register_voice == {
        "name": "ref",
        "audio": "reference/ref.wav",
        "ref_text": ref_text,
    }
    opts = bench_options(moss, "http://127.0.0.1:1", 32, None)
    assert (opts.voice, opts.ref_audio, opts.requests, opts.concurrency) == ("ref", None, 300, 32)

    voxcpm = parse_job(wfc.bench_job(config, "thestage-vllm-omni", "voxcpm2"))
    assert server_spec(voxcpm, log).register_voice is None
    assert server_spec(voxcpm, log).deploy_config is None
    opts = bench_options(voxcpm, "http://127.0.0.1:1", 1, None)
    assert (opts.task_type, opts.ref_audio, opts.ref_text) == (
        "Base",
        "reference/ref.wav",
        ref_text,
    )
    assert opts.expected_sample_rate == 48000

    qwen = parse_job(wfc.bench_job(config, "vllm-omni", "qwen3tts17b"))
    opts = bench_options(qwen, "http://127.0.0.1:1", 4, None)
    assert (opts.task_type, opts.speaker, opts.voice) == ("CustomVoice", "ryan", None)
    assert (opts.requests, opts.warmup, opts.seed) == (200, 8, 42)

    # MOSS-TTS speaks with the clip registered once: a Base (cloning) request naming it.
    moss = parse_job(wfc.bench_job(config, "vllm-omni", "moss"))
    opts = bench_options(moss, "http://127.0.0.1:1", 1, None)
    assert (opts.task_type, opts.voice, opts.ref_audio, opts.ref_text) == (
        "Base",
        "ref",
        None,
        None,
    )
