"""The workflow config: both shipped configs pass the schema, bad fields are named, and the job
spec (`thetalker.pipeline.job.BenchJob`) carries every setting a run depends on (and nothing of
another system's), with a JSON form that stays byte for byte what earlier runs stored in params."""

from __future__ import annotations

import copy
import json
import shutil

import jsonschema
import pytest
import yaml
from snakemake.utils import validate as validate_and_fill

from tests.support.paths import REPO
from thetalker.pipeline import config_checks as wfc
from thetalker.pipeline.job import JOB_FIELDS, BenchJob, BenchJobError
from thetalker.report.settings import ReportSettings

ROOT = REPO
PUBLISHED_MODELS = ["qwen3tts17b", "qwen3tts06b", "voxcpm2", "moss", "omnivoice"]


def load(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / name).read_text())


def validate(config: dict) -> None:
    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    jsonschema.Draft202012Validator(schema).validate(config)


def checked(config: dict) -> dict:
    """The config as rules/common.smk leaves it: validated, the schema's defaults filled in."""
    config = copy.deepcopy(config)
    validate_and_fill(config, str(ROOT / "config" / "schema.yaml"))
    return config


@pytest.mark.parametrize("name", ["config.yaml", "published.yaml"])
def test_shipped_configs_pass_schema_and_cross_checks(name):
    config = load(name)
    validate(config)
    wfc.check_config(checked(config))  # as rules/common.smk: defaults filled first


def test_a_config_of_one_system_needs_no_ratio_and_compares_nothing():
    config = load("config.yaml")
    config["systems"] = {"local": config["systems"]["local"]}
    del config["report"]["ratio"]
    del config["quality"]["compare"]
    filled = checked(config)
    wfc.check_config(filled)
    wfc.check_quality(filled)
    assert filled["report"]["ratio"] is None
    assert wfc.quality_settings(filled)["compare"] is None and wfc.wer_pairs(filled) == []
    assert ReportSettings.from_config(filled).ratio is None
    # Named, the ratio still drives the comparison when quality.compare is not given.
    filled["report"]["ratio"] = ["local", "local"]
    assert wfc.wer_pairs(filled) == []  # one system against itself: nothing to compare


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
    # The settings search's knobs (docs/settings.md): asked for by name, never in rule all.
    stock = dict(stock)
    assert "stages.1.max_num_seqs" in stock.pop("settings")
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
        # The edits follow the shipped grid (its last point, a point not in it).
        (lambda c: c["requests"].pop(c["concurrency"][-1]), "config field requests: .* concurr"),
        (
            lambda c: c["report"].update(headline_concurrency=max(c["concurrency"]) + 1),
            "config field report.headline_concurrency",
        ),
        (lambda c: c["report"].update(ratio=["local", "nope"]), "report.ratio: .*'nope'"),
        (lambda c: c["models"]["piper-joe"].pop("deploy"), "models.piper-joe.deploy"),
        (lambda c: c["models"]["piper-joe"].update(voice={}), "models.piper-joe.voice"),
        # Labels are checked at config time: each says its load exactly, none is shared.
        (
            lambda c: c.update(request_rates=[0.1234567, 0.1234568]),
            r"request_rates\[0\]: 0.1234567 would be named r0.123457, which does not say it",
        ),
        (lambda c: c.update(request_rates=[1e-05]), r"request_rates\[0\]: 1e-05 would be named"),
        (lambda c: c.update(request_rates=[2e6]), r"request_rates\[0\]: 2000000.0 would be named"),
        (
            lambda c: c.update(request_rates=[2, 2.0]),
            r"request_rates\[1\]: 2.0 and .* share the label r2",
        ),
    ],
)
def test_cross_checks_name_the_field(edit, message):
    config = checked(load("config.yaml"))
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
    config = checked(load("published.yaml"))
    before = {
        (s, m): wfc.bench_job(config, s, m).to_json()
        for s in config["systems"]
        for m in config["models"]
    }
    path = workdir / "deploy" / "moss.yaml"
    path.write_text(path.read_text() + "\n# edited\n")
    changed = {key for key, job in before.items() if wfc.bench_job(config, *key).to_json() != job}
    with_deploy = {s for s, spec in config["systems"].items() if spec["use_deploy_file"]}
    assert "thestage-vllm-omni" not in with_deploy and "vllm-omni" in with_deploy
    assert changed == {(s, "moss") for s in with_deploy}


def test_job_spec_carries_every_run_setting(workdir):
    config = checked(load("published.yaml"))
    job = wfc.bench_job(config, "vllm-omni", "moss")
    # The 23 fields every job has, plus the published capacity search (capacity.refine).
    assert set(json.loads(job.to_json())) == {*JOB_FIELDS, "capacity"} and len(JOB_FIELDS) == 23
    # The service level: capacity.slo's defaults, continuity from report.min_continuity_pct.
    assert job.capacity == {
        "max_steps": 3,
        "repeat_boundary": 0,
        "slo": {
            "player_model": "max_deficit_0.1s",
            "min_continuity_pct": 95.0,
            "max_audible_p95_s": 1.0,
            "max_failed_pct": 1.0,
            "max_wer_pct": None,
            "ttfa_slo_s": None,
        },
    }
    assert job.deploy_file == "deploy/moss.yaml"
    assert job.deploy_sha256 == wfc.file_sha256("deploy/moss.yaml")
    assert job.env == {"THESTAGE_VLLM_OMNI": "0"}
    assert job.extra_args == ("--init-timeout", "1800", "--stage-init-timeout", "1800")
    assert job.mps is True and job.seed == 42
    assert job.requests[32] == 300
    stock = wfc.bench_job(config, "thestage-vllm-omni", "moss")
    assert stock.deploy_file is None and stock.env == {}
    # Any other setting changes the spec too.
    edited = copy.deepcopy(config)
    edited["requests"][64] = 299
    assert wfc.bench_job(edited, "vllm-omni", "moss") != wfc.bench_job(config, "vllm-omni", "moss")


# What the workflow stored in params before BenchJob existed (thetalker.pipeline.config_checks at
# 120d94c, same config): a job whose settings did not change keeps its params, so no rerun.
PINNED_JOB = (
    '{"concurrency":[1,4,16],"deploy_file":null,"deploy_sha256":null,"env":{"A":"1"},'
    '"extra_args":["--y","2","--x"],"health_timeout_s":900.0,"language":"English",'
    '"launcher":"vllm-omni","max_error_rate":1.0,"model":"m","model_id":"org/M","mps":false,'
    '"prompts":"prompts/p.jsonl","ref_audio":null,"ref_text":null,"request_timeout_s":30.0,'
    '"requests":{"1":3,"16":9,"4":5},"sample_rate":24000,"save_audio":false,"seed":42,'
    '"system":"stock","voice":{"speaker":"joe"},"warmup":1}'
)


def test_job_json_is_canonical_and_unchanged_and_round_trips():
    config = checked(
        {
            "prompts": "prompts/p.jsonl",
            "concurrency": [1, 4, 16],
            "requests": {1: 3, 4: 5, 16: 7},
            "warmup": 1,
            "request_timeout_s": 30,
            "systems": {
                "stock": {"launcher": "vllm-omni", "env": {"A": "1"}, "extra_args": ["--x"]}
            },
            "models": {
                "m": {
                    "model_id": "org/M",
                    "voice": {"speaker": "joe"},
                    "extra_args": ["--y", "2"],
                    "requests": {16: 9},
                    "sample_rate": 24000,
                }
            },
            "report": {"headline_concurrency": 4, "ratio": ["stock", "stock"]},
        }
    )
    job = wfc.bench_job(config, "stock", "m")
    assert job.to_json() == PINNED_JOB  # defaults (seed, timeouts) came from the schema
    assert BenchJob.from_json(job.to_json()) == job
    assert BenchJob.from_json(job.to_json()).to_json() == PINNED_JOB


def test_bench_inputs_name_the_files_a_run_reads(workdir):
    config = checked(load("published.yaml"))
    assert wfc.bench_inputs(config, "vllm-omni", "voxcpm2") == {
        "prompts": "prompts/seed_tts_eval_en_100.jsonl",
        "deploy": "deploy/voxcpm2.yaml",
        "ref_audio": "reference/ref.wav",
        "ref_text": "reference/ref.txt",
    }
    assert wfc.bench_inputs(config, "thestage-vllm-omni", "qwen3tts17b") == {
        "prompts": "prompts/seed_tts_eval_en_100.jsonl"
    }


def test_job_spec_error_names_the_field():
    with pytest.raises(BenchJobError, match="seed"):
        BenchJob.from_json(json.dumps({k: None for k in JOB_FIELDS if k != "seed"}))
    good = json.loads(PINNED_JOB)
    with pytest.raises(BenchJobError, match="requests: no count for concurrency 16"):
        BenchJob.from_json(json.dumps({**good, "requests": {"1": 3, "4": 5}}))
    with pytest.raises(BenchJobError, match="unknown field.* colour"):
        BenchJob.from_json(json.dumps({**good, "colour": "red"}))
    with pytest.raises(BenchJobError, match="not valid JSON"):
        BenchJob.from_json("{")


def test_job_maps_onto_server_spec_and_client_options(workdir):
    from thetalker.pipeline.serve_and_sweep import bench_options, server_spec

    config = checked(load("published.yaml"))
    ref_text = (workdir / "reference" / "ref.txt").read_text().strip()
    log = workdir / "server.log"

    moss = wfc.bench_job(config, "vllm-omni", "moss")
    spec = server_spec(moss, log)
    assert (spec.launcher, spec.deploy_config, spec.mps) == ("vllm-omni", "deploy/moss.yaml", True)
    assert spec.register_voice == {
        "name": "ref",
        "audio": "reference/ref.wav",
        "ref_text": ref_text,
    }
    opts = bench_options(moss, "http://127.0.0.1:1", 32, None)
    assert (opts.voice, opts.ref_audio, opts.requests, opts.concurrency) == ("ref", None, 300, 32)

    voxcpm = wfc.bench_job(config, "thestage-vllm-omni", "voxcpm2")
    assert server_spec(voxcpm, log).register_voice is None
    assert server_spec(voxcpm, log).deploy_config is None
    opts = bench_options(voxcpm, "http://127.0.0.1:1", 1, None)
    assert (opts.task_type, opts.ref_audio, opts.ref_text) == (
        "Base",
        "reference/ref.wav",
        ref_text,
    )
    assert opts.expected_sample_rate == 48000

    qwen = wfc.bench_job(config, "vllm-omni", "qwen3tts17b")
    opts = bench_options(qwen, "http://127.0.0.1:1", 4, None)
    assert (opts.task_type, opts.speaker, opts.voice) == ("CustomVoice", "ryan", None)
    assert (opts.requests, opts.warmup, opts.seed) == (200, 8, 42)

    # MOSS-TTS speaks with the clip registered once: a Base (cloning) request naming it.
    moss = wfc.bench_job(config, "vllm-omni", "moss")
    opts = bench_options(moss, "http://127.0.0.1:1", 1, None)
    assert (opts.task_type, opts.voice, opts.ref_audio, opts.ref_text) == (
        "Base",
        "ref",
        None,
        None,
    )


def test_point_failure_is_one_rule_for_every_caller():
    from thetalker.pipeline.verdicts import point_failure

    assert point_failure({"n_ok": 0, "error_rate": 1.0}, 1.0) == "no scored request succeeded"
    assert point_failure({"n_ok": 9, "error_rate": 0.1}, 0.1) is None  # at the limit: fine
    assert point_failure({"n_ok": 9, "error_rate": 0.1}, 0.05) == (
        "error rate 0.100 above max_error_rate 0.05"
    )
    assert point_failure({"n_ok": 3, "error_rate": None}, 0.0) is None
    # A server that failed mid-point fails it whatever the error rate allowed.
    failed = {"n_ok": 9, "error_rate": 0.1, "errors_by_type": {"server_failed": 1}}
    assert point_failure(failed, 1.0) == (
        "the server failed during the point (1 request(s) answered server_failed)"
    )


def test_job_module_refuses_bad_job_json():
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "thetalker.pipeline.serve_and_sweep", "--job", "{"]
        + ["--server-log", "x", "--records", "r"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "not valid JSON" in result.stderr


def test_repeats_rates_and_search_enter_the_job_only_when_set(workdir):
    config = checked(load("published.yaml"))
    config["capacity"].update(refine=False, max_steps=3)  # the rest as the schema filled it
    plain = json.loads(wfc.bench_job(config, "vllm-omni", "moss").to_json())
    assert not {"repeats", "request_rates", "rate_requests", "capacity"} & set(plain)
    assert wfc.point_labels(config) == [f"c{c}" for c in config["concurrency"]]
    assert wfc.round_dirs(config) == [""]
    config.update(repeats=3, request_rates=[0.5, 2.0], rate_requests=40)
    config["capacity"]["refine"] = True
    config["report"]["ttfa_slo_s"] = 1.5
    job = wfc.bench_job(config, "vllm-omni", "moss")
    data = json.loads(job.to_json())
    assert data["repeats"] == 3 and data["request_rates"] == [0.5, 2.0]
    assert data["rate_requests"] == 40
    assert data["capacity"] == {
        "max_steps": 3,
        "repeat_boundary": 0,
        # capacity.slo's defaults, continuity and first byte from report.*
        "slo": {
            "player_model": "max_deficit_0.1s",
            "min_continuity_pct": 95.0,
            "max_audible_p95_s": 1.0,
            "max_failed_pct": 1.0,
            "max_wer_pct": None,
            "ttfa_slo_s": 1.5,
        },
    }
    assert BenchJob.from_json(job.to_json()) == job
    assert job.point_labels()[-2:] == ["r0.5", "r2"] == wfc.point_labels(config)[-2:]
    assert wfc.round_dirs(config) == ["round1/", "round2/", "round3/"]
    assert ReportSettings.from_config(config).ttfa_slo_s == 1.5
    # The quality run is one run of one point: none of it.
    quality = wfc.quality_run_config(config, "moss")
    quality_job = json.loads(wfc.bench_job(quality, "vllm-omni", "moss").to_json())
    assert not {"repeats", "request_rates", "rate_requests", "capacity"} & set(quality_job)


def test_wer_at_speed_points_with_repeats_is_refused_naming_the_field(workdir):
    config = checked(load("published.yaml"))
    config["repeats"] = 2
    config["quality"]["at_speed_points"] = True
    with pytest.raises(wfc.ConfigError, match="quality.at_speed_points: needs repeats 1"):
        wfc.check_config(config)


@pytest.mark.parametrize(
    ("asr", "message"),
    [
        ({"model": "'tiny.en'"}, r"quality.asr.model: \"'tiny.en'\" is no folder here, not a"),
        (
            {"backend": "openai-whisper", "model": "whisper-huge"},
            r"quality.asr.model: 'whisper-huge' is no checkpoint file",
        ),
    ],
)
def test_a_bad_asr_model_is_refused_at_config_time(asr, message, monkeypatch):
    # Found before any quality run synthesizes its audio, in one line naming the field.
    monkeypatch.chdir(ROOT)
    config = checked(load("config.yaml"))
    config["quality"]["asr"].update(asr)
    with pytest.raises(wfc.ConfigError, match=message):
        wfc.check_quality(config)
    for fine in ("tiny.en", "Systran/faster-whisper-small", "tiny.en-bundled"):
        config["quality"]["asr"].update(backend="faster-whisper", model=fine)
        wfc.check_quality(config)


def test_config_checks_are_the_jobs_said_of_the_config_field():
    """One input check: a value the job refuses is refused in the config first, naming the
    config's field, in the one message format (thetalker.util.checks.field_message)."""
    config = checked(load("config.yaml"))
    config["models"]["piper-joe"]["voice"] = {"clone": "inline"}
    with pytest.raises(wfc.ConfigError) as refused:
        wfc.check_config(config)
    assert str(refused.value) == (
        "config field models.piper-joe.voice.clone: the local server cannot clone voices "
        "(give a speaker)"
    )


def test_capacity_slo_is_checked_and_filled_from_report(workdir):
    config = checked(load("config.yaml"))
    # The embedded default: capacity.slo's defaults, continuity from report.min_continuity_pct.
    assert wfc.service_level_spec(config) == {
        "player_model": "max_deficit_0.1s",
        "min_continuity_pct": 95.0,
        "max_audible_p95_s": 1.0,
        "max_failed_pct": 1.0,
        "max_wer_pct": None,
        "ttfa_slo_s": None,
    }
    bad = copy.deepcopy(config)
    bad["capacity"]["slo"]["player_model"] = "patient"
    with pytest.raises(wfc.ConfigError, match="capacity.slo: player model 'patient'"):
        wfc.check_config(bad)
    wer = copy.deepcopy(config)
    wer["capacity"]["slo"]["max_wer_pct"] = 5.0
    wer["quality"]["at_speed_points"] = False
    with pytest.raises(wfc.ConfigError, match="max_wer_pct: needs quality.at_speed_points"):
        wfc.check_config(wer)


def test_audible_onset_defaults_are_the_public_rule_and_keep_the_params(workdir):
    from thetalker.metrics import DEFAULT_ONSET, OnsetSettings
    from thetalker.pipeline.serve_and_sweep import bench_options

    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    settings = schema["properties"]["audible_onset"]["properties"]
    assert {k: v["default"] for k, v in settings.items()} == DEFAULT_ONSET.spec()
    config = checked(load("config.yaml"))
    assert config["audible_onset"] == DEFAULT_ONSET.spec()  # stated in the embedded default
    # Stated, or left out, the default rule is no job field: earlier runs keep their params.
    stated = wfc.bench_job(config, "local", "piper-joe")
    del config["audible_onset"]
    unstated = wfc.bench_job(checked(config), "local", "piper-joe")
    assert stated.to_json() == unstated.to_json()
    assert "audible_onset" not in json.loads(stated.to_json())
    assert stated.onset == DEFAULT_ONSET
    assert bench_options(stated, "http://127.0.0.1:1", 1, None).onset == DEFAULT_ONSET
    assert OnsetSettings.from_spec(checked(config)["audible_onset"]) == DEFAULT_ONSET


def test_a_stated_audible_onset_reaches_the_job_and_the_client_options(workdir):
    from thetalker.metrics import OnsetSettings
    from thetalker.pipeline.serve_and_sweep import bench_options

    config = load("config.yaml")
    config["audible_onset"] = {"threshold_dbfs": -30}  # the others: the schema's defaults
    config = checked(config)
    wfc.check_config(config)
    job = wfc.bench_job(config, "local", "piper-joe")
    spec = {"threshold_dbfs": -30.0, "frame_s": 0.02, "hop_s": 0.01, "run_frames": 2}
    assert json.loads(job.to_json())["audible_onset"] == spec
    assert BenchJob.from_json(job.to_json()) == job
    assert job.onset == OnsetSettings(threshold_dbfs=-30.0)
    opts = bench_options(job, "http://127.0.0.1:1", 2, None)
    assert opts.onset.label() == "abs-30dBFS/20ms/10ms/2"
    # Another rule is another job (its records would differ), the quality run's too.
    default = checked(load("config.yaml"))
    assert job.to_json() != wfc.bench_job(default, "local", "piper-joe").to_json()
    quality = wfc.quality_run_config(config, "piper-joe")
    assert wfc.bench_job(quality, "local", "piper-joe").onset == job.onset


@pytest.mark.parametrize(
    ("onset", "message"),
    [
        ({"threshold_dbfs": float("nan")}, "config field audible_onset.threshold_dbfs: nan is not"),
        (
            {"hop_s": 0.05},
            "config field audible_onset.hop_s: 0.05 s is longer than frame_s 0.02 s",
        ),
        (
            {"frame_s": 0.0123456789},
            "config field audible_onset.frame_s: 0.0123456789 would be labelled",
        ),
    ],
)
def test_bad_audible_onset_values_are_refused_naming_the_field(onset, message):
    config = checked({**load("config.yaml"), "audible_onset": onset})
    with pytest.raises(wfc.ConfigError) as refused:
        wfc.check_config(config)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("onset", "message"),
    [
        ({"threshold_dbfs": 0}, "audible_onset.threshold_dbfs: must be below 0 dBFS, full scale"),
        ({"frame_s": 0}, "audible_onset.frame_s: must be above 0 s (got 0)"),
        ({"hop_s": -0.01}, "audible_onset.hop_s: must be above 0 s (got -0.01)"),
        ({"run_frames": 0}, "audible_onset.run_frames: must be at least 1 (got 0)"),
        ({"threshold": -30}, "audible_onset.threshold: unknown onset setting (known: thresh"),
    ],
)
def test_audible_onset_ranges_and_keys_are_one_line_naming_the_field(onset, message):
    config = checked({**load("config.yaml"), "audible_onset": onset})  # the schema passes it
    with pytest.raises(wfc.ConfigError) as refused:
        wfc.check_config(config)
    assert str(refused.value).startswith(f"config field {message}")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("onset", "field"), [({"run_frames": 1.5}, "run_frames"), ({"frame_s": "x"}, "frame_s")]
)
def test_the_schema_refuses_audible_onset_values_of_another_type(onset, field):
    config = {**load("config.yaml"), "audible_onset": onset}
    with pytest.raises(jsonschema.ValidationError) as info:
        validate(config)
    assert field in str(info.value)


def test_a_job_spec_with_a_bad_onset_is_refused_naming_the_field():
    good = json.loads(PINNED_JOB)
    for onset, message in [
        ({"threshold_dbfs": 3}, "job field audible_onset.threshold_dbfs: must be below 0 dBFS"),
        ({"run_frames": 0}, "job field audible_onset.run_frames: must be at least 1"),
        ({"colour": 1}, "job field audible_onset.colour: unknown onset setting"),
    ]:
        with pytest.raises(BenchJobError) as refused:
            BenchJob.from_json(json.dumps({**good, "audible_onset": onset}))
        assert str(refused.value).startswith(message)
