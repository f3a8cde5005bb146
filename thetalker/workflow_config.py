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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "ConfigError",
    "RUNS_DIR",
    "TABLES",
    "FIGURES",
    "check_config",
    "concurrency_points",
    "request_counts",
    "deploy_file",
    "file_sha256",
    "bench_inputs",
    "bench_job",
    "run_dir",
    "records_paths",
    "table_paths",
    "figure_paths",
    "final_targets",
    "wildcard_pattern",
]

RUNS_DIR = "results/runs"
TABLES = ("throughput", "continuity", "ttfa", "cost")
FIGURES = ("throughput", "continuity", "ttfa", "cost")


class ConfigError(ValueError):
    """A config that passes the schema but cannot run; the message names the field."""


def concurrency_points(config: Mapping[str, Any]) -> list[int]:
    return [int(c) for c in config["concurrency"]]


def request_counts(config: Mapping[str, Any]) -> dict[int, int]:
    """Scored requests per concurrency point; YAML gives int keys, --config may give str."""
    counts: dict[int, int] = {}
    for key, value in config["requests"].items():
        try:
            counts[int(key)] = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"config field requests.{key}: not a concurrency integer") from None
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
    counts = request_counts(config)
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
        "save_audio": bool(config.get("save_audio", False)),
    }
    return json.dumps(job, sort_keys=True, separators=(",", ":"))


def run_dir(system: str, model: str) -> str:
    return f"{RUNS_DIR}/{system}/{model}"


def records_paths(config: Mapping[str, Any]) -> list[str]:
    """Every point's records.jsonl, in config order (models, then systems, then points)."""
    return [
        f"{run_dir(system, model)}/c{c}/records.jsonl"
        for model in config["models"]
        for system in config["systems"]
        for c in concurrency_points(config)
    ]


def table_paths() -> list[str]:
    return [f"results/tables/{name}.md" for name in TABLES]


def figure_paths() -> list[str]:
    return [f"results/figures/{name}.png" for name in FIGURES]


def final_targets(config: Mapping[str, Any]) -> list[str]:
    return table_paths() + figure_paths()


def wildcard_pattern(names: Any) -> str:
    """A regex matching exactly the given names (for wildcard_constraints)."""
    return "|".join(re.escape(str(n)) for n in names)
